"""Shapes a launcher states only in its host checks, and a launch taken at one scaled size.

The fixture tests/fixtures/framework/csrc/checked_shapes.cu was written for these tests in the
style of a serving framework's fused activation and group quantisation (no framework code is
copied): its output and scale are sized only by ``TORCH_CHECK(t.size(-1) == n && t.numel() ==
rows * n)``, and one launch is taken only where half the input's width is 1536.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.draft import suites
from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import DRAFTED_NOTE, Analysis, analyse, device_constants
from astra_graph.framework.parse import parse_source
from astra_graph.kernel.contract import load_contract

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "checked_shapes.cu"
H100 = device_constants("sm_90", (13, 0))

pytestmark = pytest.mark.usefixtures("default_search_path")


def _analyses(launcher_name: str) -> list[Analysis]:
    source = parse_source(flatten(SOURCE, []).text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return [
        analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
        for launch in launcher.launches
    ]


def test_a_tensor_sized_only_by_checks_of_its_last_axis_and_count_takes_that_shape() -> None:
    for analysis in _analyses("gated_quant"):
        assert analysis.shapes["input"] == ["tokens", "input_1"]
        assert analysis.shapes["out"] == ["tokens", "(input_1 // 2)"]
        # `num_tokens * num_groups` over `num_groups = d / group_size`: the launcher's integer
        # sizes the scale, so it is a dim
        assert analysis.shapes["scale"] == ["tokens", "(input_1 // 2 // group_size)"]
        assert "group_size" in analysis.dims
        assert not any(DRAFTED_NOTE in note for note in analysis.notes)
        tuning, heldout, _ = suites(analysis)
        assert tuning and heldout  # the checks hold at the serving shapes


def test_checks_that_state_too_little_keep_the_draft() -> None:
    (analysis,) = _analyses("halves")
    # a last axis alone (out), and a count that is no product of the last axis (spread)
    assert analysis.shapes["out"] == analysis.shapes["input"]
    assert any(note.startswith(f"out: {DRAFTED_NOTE}") for note in analysis.notes)
    assert suites(analysis)[:2] == ([], [])  # the drafted shape fails the checks: never taken


def test_a_launch_at_one_half_width_pins_the_whole_width() -> None:
    fixed, generic = _analyses("gated_quant")
    assert "(input_1 // 2) == 1536" in fixed.requires
    tuning, heldout, _ = suites(fixed)
    assert {shape["input_1"] for shape in tuning + heldout} == {3072}
    assert {shape["input_1"] for shape in suites(generic)[0]} != {3072}


@pytest.mark.usefixtures("needs_nvrtc")
def test_both_launches_import_and_validate(tmp_path: Path) -> None:
    assert main(["import", str(SOURCE), "--out", str(tmp_path)]) == 0
    for op in ("gated_quant_1", "gated_quant_2"):
        spec = load_contract(tmp_path / op)
        shapes = {a.name: a.shape for a in spec.contract.args}
        assert shapes["scale"] == ["tokens", "(input_1 // 2 // group_size)"], op
        assert main(["validate", str(tmp_path / op)]) == 0, op
    assert not (tmp_path / "halves").exists()

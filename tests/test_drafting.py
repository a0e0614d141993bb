"""Drafting an operation around a kernel as written (``kernel.drafting``, behind ``astra new``):
the texts come back without a file written, and a kernel that is not there is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.kernel.drafting import DraftError, draft_operation, template_kinds

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "byok" / "act_and_mul"
HEADER = EXAMPLE / "activation_kernels.cuh"


def test_a_draft_names_what_is_left_to_decide(tmp_path: Path) -> None:
    source = HEADER.read_text()
    draft = draft_operation(
        "my_act", HEADER, source, "byok::act_and_mul_kernel", tmp_path / "my_act", "astra new"
    )
    assert not (tmp_path / "my_act").exists()  # nothing written
    assert template_kinds(source, "act_and_mul_kernel") == [
        ("scalar_t", "type"),
        ("ActFn", "type"),
        ("act_first", "flag"),
    ]
    assert "// astra: entry = byok::act_and_mul_kernel<T, ActFn, act_first>" in draft.production
    assert draft.todo[0] == "reference.py: write the float64 reference"
    assert any("ActFn (type)" in item for item in draft.todo)
    assert 'name = "out"' in draft.contract and 'role = "inout"' in draft.contract
    assert "def my_act(xp, inputs, params):" in draft.reference


def test_a_missing_kernel_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(DraftError, match=r"activation_kernels.cuh: no __global__ function 'nope'"):
        draft_operation("x", HEADER, HEADER.read_text(), "byok::nope", tmp_path, "astra new")

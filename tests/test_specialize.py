"""Compile-time values that follow the shape (``// astra: specialize``), without a GPU.

A framework kernel templated on a problem size (SGLang's ``rmsnorm_cta<kDim, ...>``, built for
the model's hidden size; FlashInfer's head-dim dispatch) is one instantiation per value. The
header's ``specialize NAME = expression`` says so: NAME is the expression's value at each shape,
in the entry, the geometry and the requirements, and every build names the shape's values.
tests/fixtures/specialized/rms_norm_fixed.cu was written for these tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from astra_graph.cli import main
from astra_graph.harness import nvrtc
from astra_graph.harness.compile import CompileFailed, compile_implementation
from astra_graph.harness.validation import interface_problems
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import ContractError, load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

FIXED = Path(__file__).resolve().parent / "fixtures" / "specialized" / "rms_norm_fixed.cu"
SPEC = load_contract(kernels_root() / "rms_norm")


def _nvrtc() -> None:
    try:
        nvrtc.version()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")


def test_a_specialization_takes_the_shapes_value_in_entry_and_requirements() -> None:
    impl = load_implementation(FIXED, SPEC.contract)
    header = impl.header
    assert header.specializations == {"HIDDEN": "hidden"}
    assert header.specialized({"tokens": 3, "hidden": 4096}) == {"HIDDEN": 4096}
    values = header.specialized({"tokens": 3, "hidden": 4096})
    assert header.entry_for(DTYPES["float16"], values) == "rms_norm_fixed<__half, 4096>"
    assert header.unmet_requirement({"tokens": 1, "hidden": 4096}, DTYPES["float16"], {}) is None
    assert header.unmet_requirement({"tokens": 1, "hidden": 4100}, DTYPES["float16"], {})
    shapes = [{"tokens": t, "hidden": h} for t, h in ((1, 4096), (7, 2048), (9, 4096))]
    assert header.specialized_over(shapes) == [{"HIDDEN": 4096}, {"HIDDEN": 2048}]
    assert interface_problems(SPEC, impl, "sm_90") == []


def test_a_build_without_the_shapes_values_is_refused_by_name() -> None:
    _nvrtc()
    impl = load_implementation(FIXED, SPEC.contract)
    with pytest.raises(CompileFailed, match=r"header\.specialize HIDDEN: no value given"):
        compile_implementation(impl, DTYPES["float16"], arch="sm_90")
    built = compile_implementation(impl, DTYPES["bfloat16"], {"HIDDEN": 2048}, arch="sm_90")
    assert built.entry == "rms_norm_fixed<__nv_bfloat16, 2048>"


def test_validate_builds_one_instantiation_per_value_over_the_suites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _nvrtc()
    folder = tmp_path / "rms_norm"
    shutil.copytree(kernels_root() / "rms_norm", folder)
    shutil.copy(FIXED, folder / FIXED.name)
    (folder / "production.cu").unlink()  # the fixture's builds alone are counted below
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out
    built = {
        line.split(": ")[1].split(" for ")[0] for line in out.splitlines() if "compile" in line
    }
    hidden = {
        d["hidden"] for suite in ("tuning", "heldout", "edge") for d in SPEC.contract.suite(suite)
    }
    fixed = {b for b in built if b.startswith("rms_norm_fixed<")}
    assert fixed == {
        f"rms_norm_fixed<{t}, {h}>" for t in ("__half", "__nv_bfloat16") for h in hidden
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("// astra: specialize HIDDEN = hidden\n// astra: tunable HIDDEN = 8", "also a tunable"),
        ("// astra: specialize HIDDEN = width", "unknown dim 'width'"),
        ("// astra: specialize 4096", "expected 'NAME = expression over the dims'"),
        # over the dims alone, under a name of its own, once
        ("// astra: specialize HIDDEN = hidden * BLOCK\n// astra: tunable BLOCK = 1, 2", "BLOCK"),
        ("// astra: specialize hidden = tokens", "a dim's name"),
        ("// astra: specialize HIDDEN = hidden\n// astra: specialize HIDDEN = tokens", "twice"),
    ],
)
def test_a_malformed_specialization_is_one_line_naming_it(line: str, message: str) -> None:
    source = FIXED.read_text().replace("// astra: specialize HIDDEN = hidden", line)
    with pytest.raises(ContractError, match=message) as raised:
        load_implementation(FIXED, SPEC.contract, source)
    assert "\n" not in str(raised.value)


def test_a_specialization_named_as_a_template_parameter_is_refused() -> None:
    source = FIXED.read_text().replace("kHidden", "HIDDEN")
    impl = load_implementation(FIXED, SPEC.contract, source)
    (problem, *_) = interface_problems(SPEC, impl, "sm_90")
    assert "header.specialize HIDDEN: the kernel rms_norm_fixed has a template parameter" in problem


def test_a_shape_where_a_specialization_has_no_value_is_unsupported_not_a_crash() -> None:
    source = FIXED.read_text().replace(
        "// astra: specialize HIDDEN = hidden", "// astra: specialize HIDDEN = 4096 // (hidden - 8)"
    )
    header = load_implementation(FIXED, SPEC.contract, source).header
    unmet = header.unmet_requirement({"tokens": 1, "hidden": 8}, DTYPES["float16"], {})
    assert unmet is not None and unmet.startswith("specialize HIDDEN = 4096 // (hidden - 8)")


def test_a_specialized_kernel_loads_one_instantiation_per_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The harness's SpecializedKernel, its loader replaced: one load per distinct value (the
    loaded-kernel cache keeps them), the carried state asked of the instantiation launched last."""
    from astra_graph.harness import launch

    loads: list[dict[str, int]] = []

    class Loaded:
        def __init__(self, settings: dict[str, int]) -> None:
            self.settings = settings

        def launch(self, case: object, stream: object = None) -> None:
            pass

        def carried_state(self) -> str | None:
            return f"left at {self.settings['HIDDEN']}"

    def load_one(spec: object, impl: object, dtype: str, settings: dict[str, int]) -> Loaded:
        loads.append(settings)
        return Loaded(settings)

    monkeypatch.setattr(launch, "_load_one", load_one)
    impl = load_implementation(FIXED, SPEC.contract)
    kernel = launch.load_kernel(SPEC, impl, "float16")
    assert isinstance(kernel, launch.SpecializedKernel) and kernel.carried_state() is None
    built: Any = kernel.at({"tokens": 3, "hidden": 2048})
    assert built.settings == {"HIDDEN": 2048}
    case: Any = SimpleNamespace(dims={"tokens": 1, "hidden": 512})
    kernel.launch(case)
    assert loads == [{"HIDDEN": 2048}, {"HIDDEN": 512}]
    assert kernel.carried_state() == "left at 512"
    assert kernel.unsupported({"tokens": 1, "hidden": 12}) == "HIDDEN % 8 == 0"


def test_export_refuses_a_kernel_built_per_shape_by_name() -> None:
    from astra_graph.export.dispatch_source import ExportError, _check_evaluable

    header = load_implementation(FIXED, SPEC.contract).header
    with pytest.raises(ExportError, match=r"header\.specialize HIDDEN = hidden"):
        _check_evaluable(SPEC, header, [])

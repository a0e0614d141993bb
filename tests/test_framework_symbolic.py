"""Compile-time pointer choices and symbolic sizes of JIT-style launchers (issue 23).

The fixture tests/fixtures/framework/csrc/symbolic_sizes.cu was written for these tests in the
style of SGLang's JIT kernels: tensor-shape matchers bind named sizes (``SymbolicSize``) to the
tensors they verify, a host check relates two of them, and a flag of the launcher's template
picks between a tensor's pointer and nullptr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import Analysis, Unmapped, analyse, device_constants
from astra_graph.framework.parse import parse_source
from astra_graph.kernel.contract import load_contract

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "symbolic_sizes.cu"
H100 = device_constants("sm_90", (13, 0))


def _analysis(launcher_name: str) -> Analysis:
    source = parse_source(flatten(SOURCE, []).text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return analyse(
        launcher,
        launcher.launches[0],
        source.kernels,
        source.macros,
        H100,
        source.constants,
        source.structs,
    )


def test_matchers_on_every_path_are_read_and_branches_keep_what_both_bind() -> None:
    source = parse_source(flatten(SOURCE, []).text)
    (launch,) = next(x for x in source.launchers if x.name == "run_gate").launches
    # out is matched in both branches of `if constexpr`, with strides in one only
    assert launch.matched == (
        ("out", ("N", "D_out"), ()),
        ("input", ("N", "D_in"), ()),
    )
    assert ("width * 2 == D_in.unwrap()", True) in launch.conditions
    (unmatched,) = next(x for x in source.launchers if x.name == "run_unmatched").launches
    assert unmatched.matched == ()


def test_a_symbolic_size_is_the_dim_its_matcher_binds_and_a_check_derives_a_dim() -> None:
    found = _analysis("run_gate")
    assert found.shapes == {
        "input": ["num_tokens", "(output_width * 2)"],
        "out": ["num_tokens", "output_width"],
    }
    assert found.dims == ["num_tokens", "output_width"]
    (params,) = found.bindings
    fields = {f.param: (f.kind, f.value) for f in params.fields}
    assert fields["out"] == ("tensor", "out")
    assert fields["scale"] == ("null", "")
    assert fields["width"] == ("expr", "(output_width)")
    assert fields["rows"][1].strip("()") == "num_tokens"
    assert found.grid == "num_tokens"
    assert found.entry == "sym::gate_kernel<T, false>"
    assert not any("input_width" in r for r in found.requires)


def test_one_matcher_of_two_tensors_gives_them_one_shape() -> None:
    found = _analysis("run_square")
    assert found.shapes == {"out": ["num_tokens", "hidden"], "input": ["num_tokens", "hidden"]}
    assert found.bindings[2].value == "(num_tokens * hidden)"


def test_a_compile_time_condition_picks_the_pointer_per_site() -> None:
    found = _analysis("run_scaled")
    fields = {f.param: (f.kind, f.value) for f in found.bindings[0].fields}
    assert fields["scale"] == ("tensor", "scale")  # kAlwaysScale, a constexpr of the source
    assert fields["out"] == ("tensor", "out")  # kInPlace, false as the entry instantiates it
    assert found.shapes["scale"] == ["width"]
    assert any("'kInPlace' is false at compile time" in n for n in found.notes)


def _gathers(source_text: str) -> list[Analysis]:
    source = parse_source(source_text)
    launcher = next(x for x in source.launchers if x.name == "run_gather")
    return [
        analyse(launcher, launch, source.kernels, source.macros, H100, source.constants)
        for launch in launcher.launches
    ]


def test_a_template_lambda_binds_its_type_in_the_arguments_and_any_size_is_its_own_dim() -> None:
    # `launch.template operator()<int64_t>()` and `<int32_t>()`: one launch each, the index
    # pointer's cast `static_cast<const Index*>` read at that type
    wide, narrow = _gathers(flatten(SOURCE, []).text)
    assert (wide.entry, narrow.entry) == (
        "sym::gather_kernel<int64_t>",
        "sym::gather_kernel<int32_t>",
    )
    assert (wide.tensors["index"].element, narrow.tensors["index"].element) == ("int64", "int32")
    # the table's rows are `-1` in its matcher: a dim of its own, tied to no other size
    assert wide.shapes == {
        "out": ["num_tokens", "width"],
        "table": ["table_0", "width"],
        "index": ["num_tokens"],
    }
    assert wide.dims == ["num_tokens", "width", "table_0"]


def test_a_literal_matcher_size_other_than_any_stays_refused() -> None:
    text = flatten(SOURCE, []).text.replace("TensorMatcher({-1, D})", "TensorMatcher({8, D})")
    with pytest.raises(Unmapped, match="table: its matcher names the size '8'"):
        _gathers(text)


@pytest.mark.parametrize(
    ("launcher", "reason"),
    [
        ("run_reversed", "the kernel gets nullptr where otherwise a tensor it writes"),
        ("run_chosen", "is not a data_ptr()"),  # a run-time flag: not a compile-time choice
        ("run_unmatched", "bound by no tensor matcher that runs on every path"),
    ],
)
def test_what_cannot_be_read_soundly_is_refused(launcher: str, reason: str) -> None:
    with pytest.raises(Unmapped, match=reason.replace("(", r"\(").replace(")", r"\)")):
        _analysis(launcher)


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_imported_operations_validate(tmp_path: Path) -> None:
    assert main(["import", str(SOURCE), "--out", str(tmp_path)]) == 0
    for op in ("run_gate", "run_scaled", "run_square", "run_gather_1", "run_gather_2"):
        spec = load_contract(tmp_path / op)
        shapes = {a.name: a.shape for a in spec.contract.args if hasattr(a, "shape")}
        assert shapes, op
        assert main(["validate", str(tmp_path / op)]) == 0, op
    assert not (tmp_path / "run_reversed").exists()


ASSERTED = SOURCE.parent / "asserted_rows.cu"


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_launcher_classs_static_assert_bounds_the_domain_and_the_element_types(
    tmp_path: Path,
) -> None:
    """fixtures/framework/csrc/asserted_rows.cu, as SGLang's RMSNormHalfKernel: the class
    asserts a width that is a multiple of 256 and a 2-byte element. The kernel alone compiles
    for any width and for float32, so before, the import drafted both: random widths and a
    float32 oracle (SGLang's faulted, misaligned, on the H100). The assert is now a host check
    of the launch: a requirement on the width, and float32 left out."""
    from astra_graph.framework.importer import import_file

    (result,) = import_file(ASSERTED, [], tmp_path).launchers
    assert result.imported, result.reason
    assert result.dtypes == ["float16", "bfloat16"]
    assert "element type float32 left out: the launcher requires elem_bytes == 2" in result.notes
    header = (tmp_path / "run" / "production.cu").read_text()
    assert "// astra: requires = (hidden_size) % 256 == 0 and elem_bytes == 2" in header
    spec = load_contract(tmp_path / "run")
    widths = {case["hidden_size"] for case in spec.contract.suite("tuning")}
    assert widths and all(w % 256 == 0 for w in widths)
    assert main(["validate", str(tmp_path / "run")]) == 0

"""``astra import`` of by-value struct parameters, kernels chosen on the host and template
element types (tests/fixtures/framework/csrc/params_struct.cu), and the struct's byte layout as
the harness packs it, on the CPU (NumPy; the GPU launch of a packed struct is not run here)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from astra_graph.cli import main
from astra_graph.framework.launchers import Analysis, Unmapped, analyse, device_constants
from astra_graph.framework.parse import parse_source
from astra_graph.harness.launch import struct_argument, struct_dtype
from astra_graph.kernel.contract import Binding, load_contract
from astra_graph.kernel.header import load_implementation
from astra_graph.kernel.param_struct import layout
from astra_graph.kernel.signature import interface_problem

PARAMS = Path(__file__).parent / "fixtures" / "framework" / "csrc" / "params_struct.cu"
H100 = device_constants("sm_90", (13, 0))

pytestmark = pytest.mark.usefixtures("default_search_path")


def _analyses(launcher_name: str) -> list[Analysis]:
    source = parse_source(PARAMS.read_text())
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return [
        analyse(launcher, launch, source.kernels, source.macros, H100, None, source.structs)
        for launch in launcher.launches
    ]


def test_a_designated_params_struct_binds_each_field() -> None:
    (found,) = _analyses("run")
    (struct,) = found.bindings
    assert (struct.kind, struct.value) == ("struct", "Params")
    assert [(f.param, f.kind, f.dtype) for f in struct.fields] == [
        ("input", "tensor", "T"),
        ("output", "tensor", "T"),
        ("stride", "expr", "int64"),
        ("rows", "expr", "int32"),
        ("scale", "scalar", "float32"),
    ]
    assert found.entry == "jit::scale_kernel<T, false>"  # DType is T, kUsePDL fixed false
    assert any("kUsePDL" in n and "false" in n for n in found.notes)
    assert found.drafted_dtypes and set(found.dtypes) == {"float16", "bfloat16", "float32"}


def test_a_positional_struct_value_initialises_what_it_leaves_out() -> None:
    (found,) = _analyses("run_positional")
    fields = {f.param: (f.kind, f.value) for f in found.bindings[0].fields}
    assert fields["rows"] == ("expr", "0")
    assert found.constants == {"scale": 0.0}
    assert any("rows, scale not in the initialiser" in n for n in found.notes)


def test_a_field_never_assigned_is_refused_not_guessed() -> None:
    with pytest.raises(Unmapped, match=r"params\.stride \(Params\) is not assigned"):
        _analyses("run_unset")


def test_a_selector_function_gives_one_operation_per_kernel_it_returns() -> None:
    relu, scale = _analyses("run_selected")
    assert (relu.entry, scale.entry) == ("jit::act_kernel<T, 0>", "jit::act_kernel<T, 1>")
    assert any('select(name): name == "relu"' in n for n in relu.notes)
    assert any('!(name == "relu") && name == "scale"' in n for n in scale.notes)
    assert scale.constants == {"scale": 2.0}  # `Params params{..., 2.0f}`


def test_an_index_type_chosen_by_a_flag_and_cudas_own_type_names() -> None:
    narrow, wide = _analyses("gather")
    assert (narrow.entry, wide.entry) == (
        "jit::gather_kernel<int32_t>",
        "jit::gather_kernel<int64_t>",
    )
    assert narrow.tensors["index"].element == "int32" and wide.tensors["index"].element == "int64"
    assert narrow.tensors["table"].element == "bfloat16"  # nv_bfloat16
    assert narrow.dtypes == ("bfloat16",)


def test_a_compile_time_size_of_the_launchers_template_is_a_one_line_reason() -> None:
    source = parse_source(PARAMS.read_text())
    fixed = next(x for x in source.launchers if x.launches[0].kernel == "fixed_kernel")
    with pytest.raises(Unmapped, match=r"^'kWidth' is a compile-time value of run's own template"):
        analyse(fixed, fixed.launches[0], source.kernels, source.macros, H100, None, {})


@pytest.mark.parametrize(
    "kinds",
    [
        ["pointer", "pointer", "int64", "int32", "float32"],
        ["int32", "pointer", "bool", "float64", "int32"],
        ["bool", "bool", "int32", "bool"],
        ["float32"],
    ],
)
def test_the_struct_layout_is_the_c_abis_as_numpy_aligns_it(kinds: list[str]) -> None:
    placed = layout(kinds)
    names = [f"f{i}" for i in range(len(kinds))]
    codes = {"pointer": "u8", "int64": "i8", "int32": "i4", "float32": "f4", "float64": "f8"}
    aligned = np.dtype({"names": names, "formats": [codes.get(k, "?") for k in kinds]}, align=True)
    fields: Mapping[str, tuple[Any, ...]] = aligned.fields or {}
    assert list(placed.offsets) == [fields[n][1] for n in names]
    assert (placed.size, placed.align) == (aligned.itemsize, aligned.alignment)


def test_a_struct_argument_packs_pointers_and_values_at_their_offsets() -> None:
    binding = Binding(
        name="Params",
        kind="struct",
        fields=[
            Binding(name="x", kind="tensor"),
            Binding(name="n", kind="expr", dtype="int32", value="rows"),
            Binding(name="w", kind="null"),
            Binding(name="s", kind="expr", dtype="int64", value="rows * 3"),
            Binding(name="eps", kind="scalar", dtype="float32"),
        ],
    )
    case = SimpleNamespace(
        arrays={"x": None}, dims={"rows": 5}, dtype="float32", scalars={"eps": 0.5}
    )
    packed = struct_argument(binding, case, lambda _: 0x1122334455667788).tobytes()  # type: ignore[arg-type]
    assert struct_dtype(binding).itemsize == len(packed) == 40
    assert int.from_bytes(packed[0:8], "little") == 0x1122334455667788
    assert int.from_bytes(packed[8:12], "little") == 5  # then 4 bytes of padding
    assert packed[16:24] == bytes(8)  # the null pointer
    assert int.from_bytes(packed[24:32], "little") == 15
    assert np.frombuffer(packed[32:36], np.float32)[0] == 0.5


@pytest.mark.usefixtures("needs_nvrtc")
def test_astra_import_of_params_structs_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(PARAMS), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "6 of 8 launch sites imported" in out
    for op in ("run", "run_positional", "run_selected_1", "run_selected_2", "gather_1"):
        assert main(["validate", str(tmp_path / op)]) == 0, op
    spec = load_contract(tmp_path / "run")
    impl = load_implementation(tmp_path / "run" / "production.cu", spec.contract)
    assert "Params{in, out, stride: int64" in impl.source
    assert interface_problem(spec, impl, "float16") is None
    # a field the struct does not have in that width is caught before anything runs
    production = tmp_path / "run" / "production.cu"
    production.write_text(impl.source.replace("int64_t stride;", "int32_t stride;"))
    problem = interface_problem(spec, load_implementation(production, spec.contract), "float16")
    assert problem is not None and "Params.stride is int32, 'stride' is passed as int64" in problem


def test_a_struct_the_packing_cannot_match_is_refused() -> None:
    """An array member was read as a pointer and a bit-field as a whole int, and the first of
    two same-named structs won: each would shift the packed fields, so each is refused."""
    from astra_graph.kernel.signature import StructUnreadable, struct_fields

    with pytest.raises(StructUnreadable, match="array or a bit-field"):
        struct_fields(["struct P { float* x; float w[4]; };"], "P")
    with pytest.raises(StructUnreadable, match="array or a bit-field"):
        struct_fields(["struct P { int a : 3; int b; };"], "P")
    with pytest.raises(StructUnreadable, match="more than once"):
        struct_fields(["struct P { int a; };", "namespace o { struct P { long a; }; }"], "P")
    fields = struct_fields(["struct P { bool on; int n; };"], "P")
    assert fields is not None and [f.name for f in fields] == ["on", "n"]


def test_every_access_label_is_read_past() -> None:
    from astra_graph.kernel.signature import struct_fields

    fields = struct_fields(["struct P { float* x; protected: int m; private: int k; };"], "P")
    assert fields is not None
    assert [(f.base_type, f.name) for f in fields] == [("float", "x"), ("int", "m"), ("int", "k")]

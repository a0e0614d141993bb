"""Tensors passed at a moved address, host conditions a kernel choice fixes, and one-return
functions with locals (issue 23), on the CPU.

The fixture tests/fixtures/framework/csrc/moved_heads.cu was written for these tests in the
style of SGLang's rotary launcher: ``k`` is passed moved back by ``q``'s heads in bytes (the
kernel adds them back), the kernel is chosen by the index tensor's type, the grid is capped by
an occupancy table indexed by that choice and an SM count a static local keeps; a typed
pointer is moved by whole elements; a moved tensor whose shape no check states is refused.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import LauncherResult, import_file
from astra_graph.framework.launchers import _chosen_conditions, _moved_pointer
from astra_graph.framework.parse import parse_source
from astra_graph.harness.launch import struct_argument
from astra_graph.kernel.contract import Binding, load_contract, parse_bindings
from astra_graph.kernel.header import load_implementation

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "moved_heads.cu"

pytestmark = pytest.mark.usefixtures("default_search_path")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[LauncherResult]]:
    out = tmp_path_factory.mktemp("moved")
    return out, import_file(SOURCE, [], out).launchers


def _header(folder: Path, op: str) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for line in (folder / op / "production.cu").read_text().splitlines():
        if line.startswith("// astra: "):
            key, _, value = line.removeprefix("// astra: ").partition(" = ")
            lines.setdefault(key, []).append(value)
    return lines


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_pre_offset_pointer_is_bound_moved_back_by_the_other_tensors_heads(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, results = imported
    ops = {r.op: r for r in results}
    for op, index_type in (("run_1", "int32_t"), ("run_2", "int64_t")):
        assert ops[op].imported, ops[op].reason
        header = _header(out, op)
        assert header["entry"] == [f"moved::shift_heads_kernel<T, {index_type}>"]
        (params,) = header["params"]
        # k moved back by q's heads of head_dim elements, in bytes
        assert "k + bytes(((-((q_heads) * (head_dim * elem_bytes)))))" in params
        # the occupancy table's item for this choice, capped by the SM count kept in a static
        (grid,) = header["grid"]
        assert "blocks_per_sm((128), 0)" in grid and "sm_count" in grid
        contract = load_contract(out / op).contract
        assert {a.name: a.shape for a in contract.args}["k"] == [
            "num_tokens",
            "k_heads",
            "head_dim",
        ]
        # a `const void*` field the kernel casts to `const IdType*`: the choice's index type
        # (drafted as the element type T, the oracle's float32 ids read as integers differed
        # from the candidate's on the H100)
        assert {a.name: a.dtype for a in contract.args}["ids"] == index_type.removesuffix("_t")
        assert main(["validate", str(out / op)]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_typed_pointer_moved_by_elements_is_moved_by_their_bytes(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, _ = imported
    (params,) = _header(out, "run")["params"]
    assert params.startswith("out, in + bytes(((width)) * elem_bytes), ")
    spec = load_contract(out / "run")
    assert {a.name: a.shape for a in spec.contract.args}["in"] == ["num_tokens", "(width * 2)"]
    impl = load_implementation(out / "run" / "production.cu", spec.contract)
    (moved,) = [b for b in impl.bindings if b.name == "in"]
    assert moved.byte_offset({"num_tokens": 3, "width": 40}, 2) == 80
    assert main(["validate", str(out / "run")]) == 0


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_moved_tensor_whose_shape_no_check_states_is_refused(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    _, results = imported
    (unsized,) = [r for r in results if r.launcher == "run_unsized"]
    assert not unsized.imported
    assert "'in' is passed at a moved address" in unsized.reason


def test_the_params_language_moves_a_tensor_by_bytes_of_the_dims() -> None:
    contract = SimpleNamespace(
        args=[SimpleNamespace(name="x"), SimpleNamespace(name="y")],
        scalars=[],
        dims={"rows": None, "cols": None},
    )
    bindings = parse_bindings(
        ["x - bytes(rows * elem_bytes)", "y + bytes(cols)"],
        contract,  # type: ignore[arg-type]
        "params",
    )
    assert [b.byte_offset({"rows": 3, "cols": 5}, 4) for b in bindings] == [-12, 5]
    for bad, said in (
        ("n + bytes(rows)", "'n' is no tensor"),
        ("x + bytes(heads)", "heads"),
    ):
        with pytest.raises(ValueError, match=said):
            parse_bindings([bad, "y"], contract, "params")  # type: ignore[arg-type]


def test_a_struct_field_at_a_moved_address_is_packed_moved() -> None:
    binding = Binding(
        name="Params",
        kind="struct",
        fields=[
            Binding(name="x", kind="tensor"),
            Binding(name="y", kind="tensor", value="-(rows * elem_bytes)"),
        ],
    )
    case = SimpleNamespace(arrays={"x": None, "y": None}, dims={"rows": 5}, dtype="float16")
    packed = struct_argument(binding, case, lambda _: 0x10000).tobytes()  # type: ignore[arg-type]
    assert int.from_bytes(packed[0:8], "little") == 0x10000
    assert int.from_bytes(packed[8:16], "little") == 0x10000 - 10


def test_a_kernel_choice_fixes_its_condition_and_no_selectors() -> None:
    assert _chosen_conditions("is_int32 true") == {"is_int32": True}
    assert _chosen_conditions("use_wide false; flag true") == {"use_wide": False, "flag": True}
    assert _chosen_conditions('select_kernel(type): type == "silu"') == {}


def test_a_function_with_locals_before_its_return_is_read_with_them() -> None:
    source = parse_source(
        flatten(SOURCE, []).text
        + """
namespace extra {
inline int doubled(int d) { const int twice = d * 2; return twice + 1; }
inline int first_call(int d) { static const int kept = d * 2; return kept; }
inline int looped(int d) { int p = 1; while (p < d) p *= 2; return p; }
}
"""
    )
    returns = source.returns
    sm_count = returns["moved::ShiftHeadsKernel::num_sm"]
    assert sm_count is not None
    assert sm_count.returned == "(runtime::get_sm_count(device.device_id))"
    doubled = returns["extra::doubled"]
    assert doubled is not None and doubled.returned == "(d * 2) + 1"
    # a static that keeps its first call's value of a parameter, and a loop: not one expression
    assert returns.get("extra::first_call") is None
    assert returns.get("extra::looped") is None


def test_the_type_a_kernel_casts_a_pointer_to_is_read_once_per_name() -> None:
    source = parse_source(
        "template <typename T, typename IdType> __global__ void k(const void* ids, P params,"
        " const void* mixed) {\n"
        "  auto a = static_cast<const IdType*>(params.ids)[0];\n"
        "  auto b = reinterpret_cast<T *>(params.out);\n"
        "  auto c = (const float*)mixed; auto d = (const int*)mixed;\n"
        "  auto e = static_cast<char*>(a ? params.q : params.k);\n"
        "}\n"
    )
    (kernel,) = source.kernels
    assert dict(kernel.casts) == {"ids": "IdType", "out": "T"}


def test_a_moved_pointer_counts_the_outermost_casts_units() -> None:
    assert _moved_pointer("x.data_ptr<float>() + n") == (
        "x.data_ptr<float>()",
        "(n) * sizeof(float)",
    )
    recast = "reinterpret_cast<char*>(x.data_ptr<float>())"
    assert _moved_pointer(f"{recast} - n") == (recast, "-(n) * sizeof(char)")
    assert _moved_pointer("pointer::offset<T>(x.data_ptr(), a, b)") == (
        "x.data_ptr()",
        "((a) + (b)) * sizeof(T)",
    )
    assert _moved_pointer("x.data_ptr() + n") is None  # void*: no C++


def test_a_static_local_reading_a_parameter_beside_the_sm_count_is_no_return_only() -> None:
    source = parse_source(
        "inline int waves(int device, int n) {\n"
        "  static const int kept = get_sm_count(device) * n;\n  return kept;\n}\n"
        "inline int slots(int device) {\n"
        "  static const int kept = get_sm_count(device) * 4;\n  return kept;\n}\n"
    )
    assert source.returns.get("waves") is None
    slots = source.returns["slots"]
    assert slots is not None and slots.returned == "(get_sm_count(device) * 4)"

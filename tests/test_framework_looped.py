"""``astra import`` of launch sizes computed by a host function that loops (its body run by
:mod:`astra_graph.framework.interpret`) and of params structs that nest another struct
(tests/fixtures/framework/csrc/looped_sizes.cu), on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.interpret import (
    MAX_STEPS,
    MAX_UNROLLED,
    NotInterpreted,
    Num,
    Outcome,
    _literal,
    call,
)
from astra_graph.framework.launchers import Analysis, Unmapped, analyse, device_constants
from astra_graph.framework.parse import Param, Procedure, expression_node, parse_source
from astra_graph.framework.structs import StructUnread, flattened
from astra_graph.kernel import expr
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.header import load_implementation
from astra_graph.kernel.param_struct import flat_layout_holds
from astra_graph.kernel.signature import interface_problem, struct_problem

LOOPED = Path(__file__).parent / "fixtures" / "framework" / "csrc" / "looped_sizes.cu"
H100 = device_constants("sm_90", (13, 0))
NEXT_POW2 = """
constexpr unsigned next_pow2(unsigned target, unsigned factor = 1) {
  unsigned power = 1;
  while (power * factor < target) power *= 2;
  return power;
}
"""

pytestmark = pytest.mark.usefixtures("default_search_path")


def _procedure(source: str, name: str) -> Procedure:
    found = parse_source(source).procedures[name]
    assert found is not None
    return found


def _no_constants(name: str) -> str | None:
    return None


def _run(source: str, name: str, *args: int | str) -> Outcome:
    values = [Num(a, 64, True) if isinstance(a, int) else a for a in args]
    return call(_procedure(source, name), values, _no_constants)


def test_a_loop_over_known_arguments_runs_to_its_number() -> None:
    assert _run(NEXT_POW2, "next_pow2", 100, 8).value == "16"
    assert _run(NEXT_POW2, "next_pow2", 100).value == "128"  # the default factor
    assert _run(NEXT_POW2, "next_pow2", 1, 1) == Outcome("1", ())


def test_statements_run_as_cpp_runs_them() -> None:
    source = """
    int mixed(int n) {
      int total = 0;
      for (int i = 0, j = 10; i < n; ++i, --j) {
        if (i % 2 == 0) { total += j; } else total -= i / 2;
      }
      int k = 0;
      do { k++; } while (k < 3);
      return total * 10 + k + (-7 / 2) + (-7 % 2);
    }
    """
    total = 0
    for i, j in zip(range(5), range(10, 5, -1), strict=True):
        total += j if i % 2 == 0 else -(i // 2)
    # C++ truncates: -7 / 2 == -3, -7 % 2 == -1
    assert _run(source, "mixed", 5).value == str(total * 10 + 3 - 3 - 1)


def test_a_loop_on_a_size_is_a_select_chain_exact_under_its_requirement() -> None:
    outcome = _run(NEXT_POW2, "next_pow2", "(d)", 8)
    assert outcome.value.count("?") == MAX_UNROLLED
    (requirement,) = outcome.requires  # the loop's conditions met MAX_UNROLLED + 1 times
    assert requirement.startswith("!(") and requirement.count("&&") == MAX_UNROLLED
    # the chain gives the C++ loop's answer at each size the requirement admits
    for d in (1, 8, 9, 100, 8 << MAX_UNROLLED):
        answer = 1
        while answer * 8 < d:
            answer *= 2
        assert _cpp_value(outcome.value, d) == answer, d
    assert _cpp_value(requirement, 8 << MAX_UNROLLED) == 1
    assert _cpp_value(requirement, (8 << MAX_UNROLLED) + 1) == 0


def _cpp_value(cpp: str, d: int) -> int:
    """The C++ expression ``cpp`` (``?:``, ``!``, ``&&``, ``*``, ``<``, ``>``, literals and
    ``d``) at ``d``, read on its syntax tree."""
    from tree_sitter import Node

    from astra_graph.framework.parse import expression_node, text, unparenthesised

    def value(node: Node | None) -> int:
        assert node is not None
        node = unparenthesised(node)
        field = node.child_by_field_name
        if node.type == "conditional_expression":
            taken = "consequence" if value(field("condition")) else "alternative"
            return value(field(taken))
        if node.type == "unary_expression":
            return int(not value(field("argument")))
        if node.type == "binary_expression":
            left, right = value(field("left")), value(field("right"))
            op = text(field("operator"))
            return {"*": left * right, "<": int(left < right), ">": int(left > right),
                    "&&": int(bool(left and right))}[op]  # fmt: skip
        return d if text(node) == "d" else int(text(node))

    return value(expression_node(cpp))


def test_a_function_with_two_definitions_is_not_run() -> None:
    """A specialisation beside the primary: which one a call takes is the compiler's choice."""
    source = """
    template <typename T> constexpr int lanes() { int n = 1; n *= 2; return n; }
    template <> constexpr int lanes<float>() { return 64; }
    """
    assert parse_source(source).procedures["lanes"] is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("unsigned x = 0; x -= 1; return x;", "leaves its type"),
        ("int x = 2147483647; x += 1; return x;", "leaves its type"),
        ("while (true) {} return 0;", f"past {MAX_STEPS} statements"),
        ("for (int i = 0; i < 4; ++i) { break; } return 0;", "break statement"),
        ("float f = 1; f += 1; return 0;", "not a whole number"),
        ("int x; return x;", "read before it is set"),
        ("n += 1; return n / 0;", "6 / 0"),
        ("if (n < 2) return 1;", "ends without a return"),
        ("n += 1; return unknown_name;", "neither a local"),
    ],
)
def test_what_cannot_be_run_soundly_is_refused_with_its_reason(body: str, reason: str) -> None:
    with pytest.raises(NotInterpreted, match=reason):
        _run(f"int f(int n) {{ {body} }}", "f", 5)


def test_an_if_on_a_size_returns_a_conditional_and_a_known_one_its_branch() -> None:
    source = "int pick(int n, int m) { if (n > 64) { return m * 2; } return m; }"
    assert _run(source, "pick", 100, 3).value == "6"
    assert _run(source, "pick", "(n)", 3).value == "((((n) > 64)) ? 6 : 3)"


def _analyses(launcher_name: str, kernel: str = "") -> list[Analysis]:
    """The analyses of the launches of the launcher so named that launches ``kernel``."""
    source = parse_source(LOOPED.read_text())
    launcher = next(
        x
        for x in source.launchers
        if x.name == launcher_name and all(kernel in launch.kernel for launch in x.launches)
    )
    return [
        analyse(
            launcher,
            launch,
            source.kernels,
            source.macros,
            H100,
            source.constants,
            source.structs,
            None,
            source.returns,
            source.procedures,
        )
        for launch in launcher.launches
    ]


def test_a_looping_helper_with_literals_folds_into_the_entry_and_the_grid() -> None:
    (found,) = _analyses("scale_rows_256")
    assert found.entry == "looped::scale_rows_kernel<256, 32, nv_bfloat16>"
    assert expr.evaluate_int(found.grid, {"rows": 100}) == 25  # 128 / 32 rows a block


def test_a_looping_helper_over_a_size_is_a_specialization_bounded_by_its_unrolling() -> None:
    (found,) = _analyses("run", "scale_rows_kernel")
    assert found.entry == "looped::scale_rows_kernel<ASTRA_SIZE_KDIM, ASTRA_SIZE_KLANES, T>"
    lanes = found.specializations["ASTRA_SIZE_KLANES"]
    assert {h: expr.evaluate_int(lanes, {"hidden_size": h}) for h in (8, 256, 1000)} == {
        8: 1,
        256: 32,
        1000: 128,
    }
    # 16-byte vectors: the lanes follow the width, so only the 2-byte types share one value
    assert set(found.dtypes) == {"float16", "bfloat16"}
    assert any("float32 left out" in n and "kLanes" in n for n in found.notes)
    bound = [r for r in found.requires if " and " in r and "hidden_size" in r]
    assert bound, found.requires  # the shapes that would loop past the unrolling are excluded
    dims = {"hidden_size": 8 << (MAX_UNROLLED + 1), "num_tokens": 4, "elem_bytes": 2}
    assert not expr.evaluate(bound[0], dims)
    assert expr.evaluate(bound[0], {**dims, "hidden_size": 1024})


def test_a_nested_struct_is_packed_as_its_fields_in_its_place() -> None:
    (found,) = _analyses("run", "counted_rows_kernel")
    (struct,) = found.bindings
    assert (struct.kind, struct.value) == ("struct", "CountedRows")
    assert [(f.param, f.kind) for f in struct.fields] == [
        ("in", "tensor"),
        ("out", "tensor"),
        ("stride", "expr"),
        ("rows", "expr"),
        ("elements", "expr"),
        ("scale", "scalar"),
    ]


def test_a_nested_struct_whose_padding_moves_a_field_is_refused() -> None:
    with pytest.raises(Unmapped, match="PaddedRows: a nested struct's alignment or tail padding"):
        _analyses("run_padded")


@pytest.mark.parametrize(
    ("members", "holds"),
    [
        ([["pointer", "int64", "int32"], "pointer"], True),  # the tail padding ends on 8
        ([["pointer", "int32"], "int32"], False),  # flat, the int32 sits in the padding
        (["int32", ["int32", "int64"]], False),  # nested, aligned on 8; flat, at 4
        (["int32", ["int32", "int32"], "int32"], True),
        ([[["int64"], "bool"], "bool"], False),
        (["int32", [], "int32"], False),  # an empty struct is one byte in C++, none flat
    ],
)
def test_a_nested_layout_is_the_flat_one_only_where_no_padding_moves_a_field(
    members: list[object], holds: bool
) -> None:
    assert flat_layout_holds(members) is holds  # type: ignore[arg-type]


@pytest.mark.usefixtures("needs_nvrtc")
def test_astra_import_of_looped_sizes_and_nested_structs_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(LOOPED), "--out", str(tmp_path)]) == 0
    assert "3 of 4 launch sites imported" in capsys.readouterr().out
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert folders == ["run", "run_104", "scale_rows_256"]  # as test_import_gpu.py launches
    for op in folders:
        assert main(["validate", str(tmp_path / op)]) == 0, op
    spec = load_contract(tmp_path / "run_104")  # NestedRowsKernel::run
    impl = load_implementation(tmp_path / "run_104" / "production.cu", spec.contract)
    assert "CountedRows{in, out, stride: int64" in impl.source
    assert interface_problem(spec, impl, "float16") is None
    # the signature check reads the nesting itself: a wider nested field is caught
    production = tmp_path / "run_104" / "production.cu"
    production.write_text(impl.source.replace("uint32_t rows;", "uint64_t rows;"))
    problem = interface_problem(spec, load_implementation(production, spec.contract), "float16")
    assert problem is not None and "rows" in problem


def test_the_signature_check_refuses_a_nesting_that_moves_a_field() -> None:
    from astra_graph.kernel.contract import Binding
    from astra_graph.kernel.signature import KernelParam

    texts = ["struct In { int64_t a; int32_t b; }; struct Out { In in; float s; };"]
    binding = Binding(
        name="Out",
        kind="struct",
        fields=[
            Binding(name="a", kind="expr", dtype="int64", value="1"),
            Binding(name="b", kind="expr", dtype="int32", value="1"),
            Binding(name="s", kind="expr", dtype="float32", value="1"),
        ],
    )
    param = KernelParam(text="Out p", pointer=False, base_type="Out", name="p", const=False)
    problem = struct_problem(None, binding, param, texts, {}, "float16")  # type: ignore[arg-type]
    assert "tail padding" in problem


def test_a_struct_nesting_one_of_its_own_name_is_refused_not_followed_forever() -> None:
    """``a::P { b::P inner; }`` reads, by unqualified names, as P nesting itself."""
    inner = Param("b::P inner", "inner", "b::P", False, False, False)
    count = Param("int n", "n", "int", False, False, False)
    with pytest.raises(StructUnread, match="nest more than"):
        flattened(
            "P", [inner, count], ["{}", "n"], {"P": [inner, count]}, {}, [], lambda _: "int32"
        )


@pytest.mark.parametrize(
    ("spelled", "bits", "signed"),
    [
        ("5", 32, True),
        ("2147483648", 64, True),  # decimal: int, then long, never unsigned
        ("0x80000000", 32, False),  # hexadecimal: unsigned int fits first
        ("4294967295u", 32, False),
        ("1ul", 64, False),
    ],
)
def test_an_integer_literal_takes_the_type_cpp_gives_it(
    spelled: str, bits: int, signed: bool
) -> None:
    node = expression_node(spelled)
    assert node is not None
    value = _literal(node)
    assert (value.bits, value.signed) == (bits, signed)

"""Tensors a launcher asks only strides of take a sized tensor's shape, their twin (CPU).

vLLM's fused_add_rms_norm asks ``residual.stride(-2)`` and no size of it; drafted with dims of
its own, random draws gave it fewer rows than the kernel writes, on the H100. The fixtures were
written for these tests in the style of the frameworks: tests/fixtures/framework/csrc/
strided_twins.cu holds torch launchers (a residual beside its input, rotated copies of q and k
with their own head counts, attention states whose lse is [heads, tokens]);
tests/fixtures/framework/strided_twin holds raw-pointer header launchers and the bindings that
call them, checking some of those tensors and passing others by their strides alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.callers import Callers, compose, shape_checker, size_expression
from astra_graph.framework.draft import HIDDEN_HELDOUT, HIDDEN_TUNING
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import import_file
from astra_graph.framework.launchers import (
    DRAFTED_NOTE,
    STRIDED_NOTE,
    Analysis,
    Unmapped,
    analyse,
    device_constants,
    strided_twin,
)
from astra_graph.framework.parse import parse_source
from astra_graph.kernel import expr
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "framework"
TWINS = FIXTURES / "csrc" / "strided_twins.cu"
BASE = FIXTURES / "strided_twin"
HEADER = BASE / "include" / "tw" / "twins.cuh"
FOLDERS = [BASE / "include", BASE / "csrc"]
H100 = device_constants("sm_90", (13, 0))
ROPE_SIZES = {"nnz": 3, "num_qo_heads": 8, "num_kv_heads": 2, "head_dim": 64}


def _direct(launcher_name: str) -> Analysis:
    source = parse_source(flatten(TWINS, []).text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, H100, None, source.structs
    )


def _through_binding(launcher_name: str) -> Analysis:
    """The launch of a header launcher composed with its one binding, as ``astra import``
    analyses it (importer._analysed_sites), without compiling the device code."""
    flat = flatten(HEADER, FOLDERS)
    source = parse_source(flat.text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    callers = Callers(FOLDERS, flat.files)
    (site,) = callers.calls(launcher)
    macros = {**source.macros, **callers.macros(site.file)}
    host, launch = compose(launcher, launcher.launches[0], site, macros)
    return analyse(
        host,
        launch,
        source.kernels,
        macros,
        H100,
        source.constants,
        source.structs,
        shape_checker(site),
    )


def _value(analysis: Analysis, param: str, sizes: dict[str, int]) -> int:
    (binding,) = (b for b in analysis.bindings if b.param == param)
    return expr.evaluate_int(binding.value, sizes)


def test_the_twin_is_the_tensor_a_name_is_made_from_else_the_main_one_of_its_rank() -> None:
    shapes = {"input": ["t", "h"], "q_cache": ["n", "hq", "d"], "q": ["n", "hq", "d"]}
    shapes["k"] = ["n", "hk", "d"]

    def twin(
        name: str,
        rank: int,
        exact: bool = False,
        notes: tuple[str, ...] = (),
        read_only: bool = False,
        among: dict[str, list[str]] = shapes,
    ) -> str:
        found = strided_twin(name, rank, exact, read_only, among, list(notes))
        return found[0] if found is not None else ""

    # a sized tensor whose name is made of its tokens, the most tokens first
    assert (twin("q_rope", 2), twin("k_rope", 2), twin("q_cache_rope", 3)) == ("q", "k", "q_cache")
    # a name that only shares a token is no twin, and says the main tensor is none either
    assert twin("cache_out", 3) == ""
    # the other way round, a sized tensor named after it is its companion, not its shape: a
    # quantized `out` [t, h] beside its scales `out_scale` [t, h / 128]
    assert twin("out", 2, among={"input": ["t", "h"], "out_scale": ["t", "groups"]}) == ""
    # no name relates: the main tensor, of the very rank its strides read, for one it writes
    assert twin("residual", 2) == "input"
    note = strided_twin("residual", 2, False, False, shapes, [])[1]  # type: ignore[index]
    assert note.startswith(f"residual: {STRIDED_NOTE}; drafted as input's shape (an assumption")
    assert twin("residual", 1) == ""  # fewer axes: no companion of it
    # an input it only reads may be wider than the output the launcher sizes (a gated 2d row)
    assert twin("residual", 2, read_only=True) == ""
    # a rank a check states is exact: k's three axes are not two, and a name that relates to a
    # sized tensor says it is no companion of the main one
    assert twin("k_rope", 2, exact=True) == ""
    # a tensor whose shape is not its own size queries' is nobody's twin
    assert twin("residual", 2, notes=(f"input: {DRAFTED_NOTE}; drafted as [n]",)) == ""


def test_a_residual_asked_only_its_strides_has_its_inputs_dims() -> None:
    """twin_add_norm, as vLLM's fused_add_rms_norm: ``input`` sized by ``size(-1)`` and
    ``numel()``, ``residual.stride(-2)`` alone. The two share their dims, so every draw keeps
    them one shape, and residual's row stride is computed from that shape."""
    found = _direct("twin_add_norm")
    assert found.shapes["residual"] == found.shapes["input"] == ["tokens", "hidden_size"]
    assert found.dims == ["tokens", "hidden_size"]
    assert _value(found, "residual_stride", {"tokens": 5, "hidden_size": 96}) == 96
    assert any(n.startswith(f"residual: {STRIDED_NOTE}; drafted as input's") for n in found.notes)


def test_rotated_copies_pair_with_q_and_k_not_both_with_the_main_tensor() -> None:
    found = _direct("twin_rope")
    assert found.shapes["q_rope"] == found.shapes["q"] == ["nnz", "num_qo_heads", "head_dim"]
    assert found.shapes["k_rope"] == found.shapes["k"]
    assert "num_kv_heads" in found.shapes["k_rope"]
    assert _value(found, "q_rope_stride_n", ROPE_SIZES) == 8 * 64
    assert _value(found, "k_rope_stride_n", ROPE_SIZES) == 2 * 64
    assert _value(found, "k_rope_stride_h", ROPE_SIZES) == 64


def test_a_strided_tensor_of_fewer_axes_than_any_sized_one_is_refused() -> None:
    """twin_merge: ``prefix_output`` is ``output``'s twin by name; ``prefix_lse`` ([heads,
    tokens]) relates to no sized tensor by name and has fewer axes than ``output``, whose shape
    would be wrong for it. Dims of its own were the draft before the twin rule, and a random draw
    of fewer heads than the kernel reads made the original read past it (vLLM's
    merge_attn_states on the H100): the launcher is refused, naming the tensor."""
    with pytest.raises(Unmapped, match=r"tensor 'prefix_lse': .* no tensor it sizes is its twin"):
        _direct("twin_merge")


def test_a_strided_tensor_whose_indices_the_kernel_bounds_has_the_axes_they_stay_below() -> None:
    """bounded_merge, as vLLM's merge_attn_states: the lse tensors ([heads, tokens]) are asked
    only their strides and have no twin, but the kernel keeps ``head`` below ``num_heads`` (a
    modulo) and ``token`` below ``num_tokens`` (its early return ``global_idx >= num_tokens *
    num_heads * head_size``, then two divisions): each takes those axes, contiguous."""
    found = _direct("bounded_merge")
    assert found.shapes["prefix_lse"] == ["num_heads", "num_tokens"]
    assert found.shapes["out_lse"] == ["num_heads", "num_tokens"]  # written, in the other order
    sizes = {"num_tokens": 5, "num_heads": 3, "head_size": 64}
    assert _value(found, "lse_head_stride", sizes) == 5
    assert _value(found, "lse_token_stride", sizes) == 1
    assert _value(found, "out_lse_head_stride", sizes) == 5
    (note,) = (n for n in found.notes if n.startswith("prefix_lse: "))
    assert "axis 0 below output's axis 1, axis 1 below output's axis 0" in note


def _strided(body: str, params: str) -> dict[str, tuple[tuple[str, str], ...]]:
    kernel = parse_source(f"__global__ void k({params}) {{\n{body}\n}}\n").kernels[0]
    return {e.pointer: e.axes for e in kernel.strided}


def test_a_strided_index_is_bounded_only_where_the_kernel_says_so() -> None:
    """The bounds of an index times a stride, read on the kernel's syntax tree: a modulo, a
    guard of an enclosing ``if`` or loop, an earlier ``if (... >= E) return;`` whose product a
    division takes a factor out of. Nothing is claimed of an unbounded index, a division by a
    factor the bound does not have, a pointer passed on, or an index assigned again."""
    params = "const float* p, int n, int m, int s, int t"
    row = "const int r = blockIdx.x / m, c = blockIdx.x % m;"
    # the row is unbounded (blockIdx.x has no guard): nothing
    assert _strided(f"{row} float x = p[c * s + r * t];", params) == {}
    # an early return bounds blockIdx-derived indices; a division takes m out of n * m
    early = "const int i = blockIdx.x; if (i >= n * m) return;"
    body = f"{early} const int r = i / m, c = i % m; float x = p[c * s + r * t];"
    assert _strided(body, params) == {"p": (("s", "m"), ("t", "n"))}
    # an `||` term of the return's condition bounds it as well
    either = body.replace("if (i >= n * m)", "if (t == 0 || n * m <= i)")
    assert _strided(either, params) == {"p": (("s", "m"), ("t", "n"))}
    # a division by a factor the bound does not have: nothing
    assert _strided(body.replace("i / m", "i / s"), params) == {}
    # an enclosing if's then-branch, and a loop's condition
    guarded = "float x; for (int j = 0; j < m; j += 4) if (r < n) x = p[r * t + j * s];"
    assert _strided(guarded, params + ", int r") == {"p": (("s", "m"), ("t", "n"))}
    # the pointer also passed on, or an index assigned again: nothing
    assert _strided(f"{body} use(p);", params) == {}
    # an element's address read as a wider vector, or an element handed to a call: nothing
    start = "const int i = blockIdx.x; if (i >= n) return; "
    vector = start + "float4 v = *reinterpret_cast<const float4*>(&p[i * s]);"
    assert _strided(vector, params) == {}
    assert _strided(start + "store8(p[i * s]);", params) == {}
    # the index stepped by another loop's update, a lambda's own i, a parameter declared again,
    # handed bare to a call (by reference, perhaps) or its address taken: nothing
    stepped = (
        "int i = blockIdx.x; if (i >= n) return; for (int r = 0; r < m; ++r, i += 4) x = p[i * s];"
    )
    assert _strided("float x; " + stepped, params) == {}
    assert (
        _strided(start + "auto f = [&](int i) { float x = p[i * s]; }; f(i + 100);", params) == {}
    )
    assert (
        _strided(
            "const int i = blockIdx.x; { int n = m + 5; if (i >= n) return; float x = p[i * s]; }",
            params,
        )
        == {}
    )
    assert (
        _strided("int i = blockIdx.x; if (i >= n) return; bump(i); float x = p[i * s];", params)
        == {}
    )
    assert (
        _strided(
            "int i = blockIdx.x; if (i >= n) return; int* w = &i; *w += 9; float x = p[i * s];",
            params,
        )
        == {}
    )
    again = body.replace("const int r = i / m,", "int r = i / m; r += 1; const int")
    assert _strided(again, params) == {}


def test_an_input_read_beside_the_output_it_is_not_named_after_is_refused() -> None:
    """twin_gated: the launcher sizes the d-wide output and asks only ``input.stride(-2)`` of
    the [tokens, 2d] input the kernel reads: the output's shape would be too narrow for it
    (the main tensor is a twin only of a tensor the kernel writes)."""
    with pytest.raises(Unmapped, match=r"tensor 'input': .* no tensor it sizes is its twin"):
        _direct("twin_gated")


def test_the_refusal_names_the_tensor_without_a_twin_not_one_its_name_ends() -> None:
    """twin_two_outs: ``out`` is the input's twin; ``prefix_out``, one axis read by its stride,
    has none. The refusal names ``prefix_out``, whose note also ends in ``out: ...``."""
    with pytest.raises(Unmapped, match=r"^tensor 'prefix_out': "):
        _direct("twin_two_outs")


def test_a_binding_that_checks_no_shape_of_a_strided_tensor_gives_it_its_twins() -> None:
    """rotary_copy checks q and k (3-D, k's first and last axes q's) and passes q_rope and k_rope
    by their strides alone: each takes its twin's shape as the binding's checks give it (the
    launch itself reads only two axes of k), where it used to be refused."""
    found = _through_binding("RotaryCopy")
    assert found.shapes["q_rope"] == found.shapes["q"] == ["nnz", "num_qo_heads", "head_dim"]
    assert found.shapes["k_rope"] == found.shapes["k"] == ["nnz", "num_kv_heads", "head_dim"]
    assert _value(found, "k_rope_stride_n", ROPE_SIZES) == 2 * 64
    # out's rank is checked (CHECK_DIM(2, out)) and its strides read one axis: the main tensor
    doubled = _through_binding("DoubleRows")
    assert doubled.shapes["out"] == doubled.shapes["in"] == ["rows", "d"]
    assert _value(doubled, "out_stride", {"rows": 4, "d": 256}) == 256


def test_a_strided_tensor_with_no_twin_or_sizes_the_checks_say_otherwise_is_refused() -> None:
    with pytest.raises(Unmapped, match=r"tensor 'lse': .* and no tensor it sizes is its twin"):
        _through_binding("MaskHeads")  # [heads, tokens] beside a 3-D output: no twin
    with pytest.raises(Unmapped, match=r"tensor 'block_scale': .* checks sizes of it that give no"):
        _through_binding("BlockMaxShifted")  # block_scale.size(0) == d >> 7: no expression


def test_a_strided_tensor_checked_equal_to_sizes_computed_from_dims_has_them_as_its_shape() -> None:
    """block_max checks block_scale.size(0) == d / 128 and size(1) == (rows + 3) & ~3u, through
    a local: its shape is those expressions over the dims, the mask a rounding up to 4, and
    the stride the launcher passes is the padded row count (the kernel's column stride)."""
    found = _through_binding("BlockMax")
    assert found.shapes["block_scale"] == ["(d // 128)", "((rows + 3) // 4 * 4)"]
    assert found.dims == ["rows", "d"]
    assert _value(found, "block_scale_stride", {"rows": 5, "d": 256}) == 8
    assert any(n.startswith("block_scale: shape ['(d // 128)'") for n in found.notes)


@pytest.mark.usefixtures("needs_nvrtc")
def test_operations_with_twins_are_written_and_validate(tmp_path: Path) -> None:
    direct = import_file(TWINS, [], tmp_path / "direct")
    bound = import_file(HEADER, FOLDERS, tmp_path / "bound")
    results = {r.launcher: r for r in [*direct.launchers, *bound.launchers]}
    assert not direct.compile_error and not bound.compile_error
    expected = {
        ("direct", "twin_add_norm"): {"residual": ["tokens", "hidden_size"]},
        ("direct", "bounded_merge"): {
            "prefix_lse": ["num_heads", "num_tokens"],
            "out_lse": ["num_heads", "num_tokens"],
        },
        ("bound", "rotary_copy"): {
            "q_rope": ["nnz", "num_qo_heads", "head_dim"],
            "k_rope": ["nnz", "num_kv_heads", "head_dim"],
        },
        ("bound", "double_rows"): {"out": ["rows", "d"]},
        ("bound", "block_max"): {"block_scale": ["(d // 128)", "((rows + 3) // 4 * 4)"]},
    }
    for (where, op), shapes in expected.items():
        folder = tmp_path / where / op
        contract = load_contract(folder).contract
        assert {a.name: a.shape for a in contract.args if a.name in shapes} == shapes
        assert main(["validate", str(folder)]) == 0
    assert not results["MaskHeads"].imported and not results["BlockMaxShifted"].imported
    # d sizes a computed leading axis, [d // 128, ...], but is a row's length, not a row count:
    # its suites draw hidden sizes (a token count of 1 gave block_scale no rows)
    suites = load_contract(tmp_path / "bound" / "block_max").contract.suites
    assert {s["d"] for s in [*suites.tuning, *suites.heldout]} <= {*HIDDEN_TUNING, *HIDDEN_HELDOUT}


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("d / 128", "(d // 128)"),
        ("padded", "((rows + 3) // 4 * 4)"),  # a local, followed to its initialiser
        ("rows & ~0xFu", "(rows // 16 * 16)"),
        ("(d)", "d"),
        ("d * 2 + 16u", "(d * 2 + 16)"),
        ("rows & ~5u", None),  # 5 + 1 is no power of two: no rounding
        ("rows & 3", None),
        ("d >> 7", None),
        ("d / 2.0", None),
        ("heads * d", None),  # not a dim, not a local
        ("loop", None),  # a local whose initialiser reads itself
    ],
)
def test_a_size_expression_reads_dims_locals_arithmetic_and_rounding_masks(
    written: str, expected: str | None
) -> None:
    locals_ = {"padded": "(rows + 3) & ~3u", "loop": "loop + 1", "rows": "in.size(0)"}
    assert size_expression(written, locals_, {"rows", "d"}) == expected

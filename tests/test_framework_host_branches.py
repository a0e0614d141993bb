"""Host branches that exit and locals set by reference, as the import reads them (CPU).

FlashInfer's rotary launchers check ``head_dim >= rotary_dim`` as ``if (head_dim < rotary_dim)
{ FLASHINFER_ERROR(...); }`` and size their grids from ``RopeResidentCtas(kernel, threads,
num_ctas)``, a helper that sets ``num_ctas`` through a reference. The import read neither: the
cache's width was drafted a hidden size (the drafts faulted on the H100), and ``num_ctas`` was
read at its initialiser 0, so every shape took the branch the framework takes only above a full
wave. tests/fixtures/framework/csrc/host_branches.cu was written for these tests in that style.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from astra_graph.cli import main
from astra_graph.framework import draft
from astra_graph.framework.flatten import flatten
from astra_graph.framework.launchers import (
    Analysis,
    Unmapped,
    analyse,
    device_constants,
    opaque_grid_tunable,
)
from astra_graph.framework.parse import parse_source
from astra_graph.kernel import expr
from astra_graph.kernel.contract import load_contract

pytestmark = pytest.mark.usefixtures("plots_not_drawn", "default_search_path")

BRANCHES = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "host_branches.cu"
H100 = device_constants("sm_90", (13, 0))


def _requires(launcher_name: str, site: int = 0) -> list[str]:
    source = parse_source(flatten(BRANCHES, [BRANCHES.parent]).text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    analysis = analyse(
        launcher, launcher.launches[site], source.kernels, source.macros, H100, None, source.structs
    )
    return analysis.requires


def test_a_branch_that_exits_states_its_negation_as_a_requirement() -> None:
    requires = _requires("rotate_heads")

    def holds(rotary: int, tokens: int = 4) -> bool:
        sizes = {"tokens": tokens, "heads": 8, "head_dim": 128, "rotary_dim": rotary}
        return all(expr.evaluate(r, {**sizes, "elem_bytes": 2}) for r in requires)

    assert holds(64) and holds(128)
    assert not holds(256)  # FW_ERROR: head_dim must be >= rotary_dim
    assert not holds(64, tokens=0)  # `if (tokens == 0) return;`


def test_a_width_bounded_by_the_head_size_is_drafted_a_head_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(BRANCHES), "--op", "rotate_heads", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    spec = load_contract(tmp_path / "rotate_heads")
    shapes = [*spec.contract.suites.tuning, *spec.contract.suites.heldout]
    assert shapes
    for shape in shapes:
        # the cache's width is at most the head, never a hidden size
        assert shape["rotary_dim"] <= shape["head_dim"] <= 256, shape
    assert main(["validate", str(tmp_path / "rotate_heads")]) == 0


def test_a_local_a_helper_takes_by_reference_is_not_read_at_its_initialiser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(BRANCHES), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "7 of 11 launch sites imported" in out
    assert "'ctas' is passed by reference to resident_ctas(), which may set it" in out
    assert not (tmp_path / "resident_copy").exists()
    # set by reference under an `if` before the launch: refused the same way
    assert "'rows' is passed by reference to get_rows(), which may set it" in out
    # taken by reference only after the launch, in the same dispatch lambda: read as declared
    assert (tmp_path / "recorded_copy" / "contract.toml").is_file()
    # out is drafted from in's shape, so the launcher's own check of its element count fails at
    # every shape: the refusal names that draft, not only the serving shapes
    (halved,) = (line for line in out.splitlines() if line.startswith("not imported halved_copy"))
    assert "never launched" in halved and "shapes the import assumed: out:" in halved, halved


def test_a_grid_dimension_a_helper_sets_by_reference_is_imported_as_a_tunable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """split_double, as FlashInfer's rotary launchers: ``int split = 1; plan_split(kernel, rows,
    split); dim3 grid(rows, split)``. The split is the tunable SPLIT, its declared 1 the
    default, and the note names the helper; ``ctas`` (declared 0, resident_copy) stays refused,
    as the assertions above say."""
    assert main(["import", str(BRANCHES), "--op", "split_double", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "'split' is set at run time by plan_split() (it takes 'split' by reference)" in out
    header = (tmp_path / "split_double" / "production.cu").read_text()
    assert "// astra: grid = ((rows), SPLIT)" in header
    assert "// astra: tunable SPLIT = 1, 2, 4, 8, 16" in header
    assert main(["validate", str(tmp_path / "split_double")]) == 0


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (
            {"split": "1", "assigned after its declaration: split": "12"},
            ("SPLIT", (1, 2, 4, 8, 16)),
        ),
        (
            {"n": "value_set_through_a_reference_by_plan()", "declared as: n": "4u"},
            ("N", (4, 1, 2, 8, 16)),
        ),
        ({"n": "value_set_through_a_reference_by_plan()", "declared as: n": "0"}, None),
        ({"n": "value_set_through_a_reference_by_plan()"}, None),  # a parameter: no declaration
        ({"n": "rows / 2", "assigned after its declaration: n": "3"}, None),  # not a literal
        ({"n": "4"}, None),  # never set again: read as written
    ],
)
def test_only_a_positive_declared_literal_set_at_run_time_makes_a_grid_tunable(
    found: dict[str, str], expected: tuple[str, tuple[int, ...]] | None
) -> None:
    name = next(iter(found))
    tunable = opaque_grid_tunable(name, found)
    assert (None if tunable is None else (tunable.name, tunable.values)) == expected


def _analysis(launcher_name: str, site: int) -> Analysis:
    source = parse_source(flatten(BRANCHES, [BRANCHES.parent]).text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return analyse(
        launcher, launcher.launches[site], source.kernels, source.macros, H100, None, source.structs
    )


def test_a_pointer_set_under_has_value_is_given_where_the_launch_sits_under_it() -> None:
    """maybe_scaled_copy, as vLLM's merge_attn_states with an FP8 output: ``scale_ptr`` starts
    null and is set under ``scale.has_value()``. The launch in that branch reads the scale (it
    was passed null, and the original faulted against itself on the H100); the launch in the
    other branch is passed null, as the framework does."""
    scaled, plain = (_analysis("maybe_scaled_copy", site) for site in (0, 1))
    (passed,) = (b for b in scaled.bindings if b.param == "scale")
    assert (passed.kind, passed.value) == ("tensor", "scale")
    assert any(
        n.startswith("scale: the launcher's scale_ptr starts as nullptr and is assigned")
        for n in scaled.notes
    )
    (absent,) = (b for b in plain.bindings if b.param == "scale")
    assert absent.kind == "null"


SCALED = """
template <bool kScaled>
__global__ void scaled_kernel(float* out, const float* in, const float* scale, int64_t n) {{
  const int64_t i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) out[i] = in[i] * (kScaled ? *scale : 1.0f);
}}
void scaled(torch::Tensor& out, torch::Tensor const& in, std::optional<torch::Tensor> const& scale,
            torch::Tensor const& other, bool fp8) {{
  const int64_t n = in.numel();
  float* scale_ptr = nullptr;
  {assign}
  if (scale.has_value()) {{
    scaled_kernel<true><<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), in.data_ptr<float>(),
                                                 scale_ptr, n);
  }}
}}
"""


@pytest.mark.parametrize(
    "assign",
    [
        # assigned in the else-branch: not the given value
        "if (scale.has_value()) {} else { scale_ptr = other.data_ptr<float>(); }",
        # under a further condition, or assigned again after: which one runs is not read
        "if (scale.has_value()) { if (fp8) { scale_ptr = scale.value().data_ptr<float>(); } }",
        "if (scale.has_value()) { scale_ptr = scale.value().data_ptr<float>(); }\n"
        "  if (fp8) { scale_ptr = nullptr; }",
    ],
)
def test_a_pointer_whose_given_value_is_not_read_is_not_passed_as_given(assign: str) -> None:
    source = parse_source(SCALED.format(assign=assign))
    launcher = next(x for x in source.launchers if x.name == "scaled")
    try:
        found = analyse(launcher, launcher.launches[0], source.kernels, source.macros, H100)
    except ValueError as refused:  # Unmapped: refused, saying why
        assert "scale_ptr" in str(refused)
        return
    (passed,) = (b for b in found.bindings if b.param == "scale")
    assert passed.kind == "null", passed


def test_the_if_a_launch_is_in_states_no_requirement_against_it() -> None:
    # `if (rows < 1024) { launch; return; } launch;`: the first launch runs under the branch,
    # the second only past it
    inside, after = (_requires("small_or_large_copy", site) for site in (0, 1))

    def holds(requires: list[str], rows: int) -> bool:
        sizes = {"rows": rows, "cols": 64, "elem_bytes": 2}
        return all(expr.evaluate(r, sizes) for r in requires)

    assert holds(inside, 64) and not holds(inside, 4096)
    assert holds(after, 4096) and not holds(after, 64)


@pytest.mark.parametrize(
    ("call", "exits"),
    [
        ("cudaGetLastError()", False),  # "error" in its name, and it returns
        ('LOG_ERROR("rows")', False),
        ("report_error(rows)", False),
        ("throw_if_error(rows)", False),
        ('FW_ERROR("rows")', True),
        ("std::abort()", True),
    ],
)
def test_a_branch_is_an_exit_by_its_last_call_name(tmp_path: Path, call: str, exits: bool) -> None:
    source = tmp_path / "returns.cu"
    source.write_text(
        BRANCHES.read_text().split("void rotate_heads(")[0]
        + """
void checked_copy(torch::Tensor& out, torch::Tensor const& in) {
  const int64_t rows = in.size(0);
  const int cols = in.size(1);
  if (rows > 4096) {
    CALL;
  }
  FW_DISPATCH_FLOATING_TYPES(in.scalar_type(), "checked_copy", [&] {
    fw::strided_copy_kernel<scalar_t><<<rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<scalar_t>(), in.data_ptr<scalar_t>(), rows, cols);
  });
}
"""
    )
    source.write_text(source.read_text().replace("CALL", call))
    parsed = parse_source(flatten(source, [BRANCHES.parent]).text)
    launcher = next(x for x in parsed.launchers if x.name == "checked_copy")
    analysis = analyse(
        launcher, launcher.launches[0], parsed.kernels, parsed.macros, H100, None, parsed.structs
    )
    sizes = {d: 8192 for d in analysis.dims} | {"elem_bytes": 2}
    assert all(expr.evaluate(r, sizes) for r in analysis.requires) != exits, analysis.requires


def _bounds_of(requires: list[str], dims: list[str]) -> list[tuple[str, str, bool]]:
    stand_in = cast(Analysis, SimpleNamespace(requires=requires, dims=dims, shapes={}))
    return [(b.smaller, b.larger, b.strict) for b in draft._upper_bounds(stand_in)]


def test_upper_bounds_are_read_in_every_direction_and_negated() -> None:
    dims = ["rot", "head", "n"]
    assert _bounds_of(["rot <= head"], dims) == [("rot", "head", False)]
    assert _bounds_of(["head >= rot"], dims) == [("rot", "head", False)]
    assert _bounds_of(["(((head) < (rot))) == 0"], dims) == [("rot", "head", False)]
    assert _bounds_of(["((rot >= head)) == 0"], dims) == [("rot", "head", True)]
    assert _bounds_of(["rot < head"], dims) == [("rot", "head", True)]
    assert _bounds_of(["rot + 2 <= head"], dims) == [("rot + 2", "head", False)]
    # each term of an `and` bounds as one requirement (SGLang's `RuntimeCheck(rot > 0 && rot %
    # 2 == 0 && rot <= head)`); a term of an `or` holds on one path only, and bounds nothing
    assert _bounds_of(["rot > 0 and rot % 2 == 0 and (rot <= head)"], dims) == [
        ("0", "rot", True),
        ("rot", "head", False),
    ]
    assert _bounds_of(["rot > 0 or rot <= head"], dims) == []
    # a chain, an equation, a constant bound, a non-zero comparison: no bound between dims
    assert (
        _bounds_of(["n <= rot <= head", "rot == head", "rot <= 64", "(rot < head) == 1"], dims)
        == []
    )


def test_clamping_follows_chains_keeps_strict_bounds_and_pinned_dims() -> None:
    def clamped(requires: list[str], dims: dict[str, int]) -> dict[str, int]:
        stand_in = cast(Analysis, SimpleNamespace(requires=requires, dims=list(dims), shapes={}))
        return draft._clamped(dims, draft._lowerable_bounds(stand_in))

    assert clamped(["a <= b", "b <= c"], {"a": 128, "b": 128, "c": 64}) == {
        "a": 64,
        "b": 64,
        "c": 64,
    }
    assert clamped(["a < b"], {"a": 128, "b": 64}) == {"a": 63, "b": 64}
    # a dim the launch pins keeps its value (the shape is then left out, not bent)
    assert clamped(["a <= b", "a == 128"], {"a": 128, "b": 64}) == {"a": 128, "b": 64}
    assert clamped(["a <= b"], {"a": 32, "b": 64}) == {"a": 32, "b": 64}


CHAINS = BRANCHES.parent / "branch_values.cu"


def _chain_analysis(launcher_name: str) -> Analysis:
    source = parse_source(flatten(CHAINS, [CHAINS.parent]).text)
    launcher = next(x for x in source.launchers if x.name == launcher_name)
    return analyse(
        launcher, launcher.launches[0], source.kernels, source.macros, H100, None, source.structs
    )


@pytest.mark.parametrize(
    ("launcher", "extents", "heads", "head_stride"),
    [
        # 2-D as its size queries draft it: the chain's then-branch, one head a token, the
        # token's stride its head's
        ("ranked_copy", (4, 64), 1, 64),
        # under `if (in.dim() == 3)`: drafted 3-D, the else-branch's size(1) heads
        ("headed_copy", (4, 8, 64), 8, 64),
    ],
)
def test_a_local_an_if_else_chain_sets_on_every_path_is_the_branch_the_shape_takes(
    launcher: str, extents: tuple[int, ...], heads: int, head_stride: int
) -> None:
    """FlashInfer's rope_quantize declares ``num_kv_heads`` bare and sets it in both branches of
    ``if (k.ndim() == 2)``: its value is that conditional, read at the drafted rank."""
    found = _chain_analysis(launcher)
    assert len(found.shapes["in"]) == len(extents)
    sizes = dict(zip(found.shapes["in"], extents, strict=True))
    bound = {b.param: b.value for b in found.bindings}
    assert expr.evaluate(bound["heads"], sizes) == heads
    assert expr.evaluate(bound["head_stride"], sizes) == head_stride
    assert expr.evaluate(found.grid, sizes) == (4, heads)


def test_a_plain_assignment_after_the_declaration_is_read_in_order() -> None:
    # `int threads = in.size(-1); threads = std::min(threads, 1024);`
    found = _chain_analysis("ranked_copy")
    assert expr.evaluate(found.block, {found.shapes["in"][-1]: 4096}) == 1024
    assert expr.evaluate(found.block, {found.shapes["in"][-1]: 64}) == 64


@pytest.mark.parametrize(
    ("launcher", "local"),
    [
        ("partly_ranked_copy", "heads"),  # no else: its initialiser on one path
        ("reordered_copy", "head_stride"),  # reads heads before the branch sets it
    ],
)
def test_a_chain_that_does_not_say_the_value_on_every_path_stays_refused(
    launcher: str, local: str
) -> None:
    with pytest.raises(Unmapped, match=f"'{local}' is assigned after its declaration"):
        _chain_analysis(launcher)


def test_the_chain_read_operations_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(CHAINS), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 of 4 launch sites imported" in out, out
    for op in ("ranked_copy", "headed_copy"):
        assert main(["validate", str(tmp_path / op)]) == 0, op


def test_an_assignment_to_a_local_another_initialiser_reads_stays_refused() -> None:
    """Locals are kept as written and read at the launch: ``b = a; a = 5;`` would read ``b``
    as 5 if ``a``'s new value were taken (a grid of 5 blocks, not ``x.size(0)``)."""
    source = parse_source(
        "template <typename T> __global__ void k(T* out, int n) {}\n"
        "void run(torch::Tensor& out) {\n"
        "  int a = out.size(0);\n  int b = a;\n  a = 5;\n"
        "  k<float><<<b, 256>>>(out.data_ptr<float>(), a);\n}\n"
    )
    (launcher,) = source.launchers
    (launch,) = launcher.launches
    assert launch.locals["b"] == "a"
    assert launch.locals["a"] == "out.size(0)"  # its declared value, with the mark beside it
    with pytest.raises(Unmapped, match="'a' is assigned after its declaration"):
        analyse(launcher, launch, source.kernels, source.macros, H100, None, source.structs)

"""Vector-width accesses and the multiples they need of the dims, on the CPU.

The fixture tests/fixtures/framework/csrc/aligned_cache.cu was written for these tests in the
style of FlashInfer's rotary kernel with a cos/sin cache: a vector type whose float
specialisation's ``load`` reads ``float4`` (16 bytes) is called on ``cache + pos * rot_dim +
idx`` with ``idx`` a remainder by ``rot_dim / 2``, and on ``rot_dim / 2`` more; no check states
that ``rot_dim`` is then a multiple of 8, at which alone every load is aligned (FlashInfer's
original faulted, misaligned, on the H100 at the widths the domain drew). Its twin reads the
cache one element at a time and needs nothing, and a guarded one tests the address first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import LauncherResult, import_file
from astra_graph.framework.parse import expression_node, parse_source
from astra_graph.framework.vectors import required_multiples
from astra_graph.harness.plan import plan_cases
from astra_graph.harness.thresholds import code_thresholds, requires_thresholds
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.header import load_implementation

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "aligned_cache.cu"
DRAW_SEEDS = 12
"""Checks whose shapes (suites, random and domain shapes) are drawn per operation."""

pytestmark = pytest.mark.usefixtures("default_search_path")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[LauncherResult]]:
    out = tmp_path_factory.mktemp("vectors")
    return out, import_file(SOURCE, [], out).launchers


def test_a_vector_load_in_a_member_function_is_found_with_the_kernels_offsets() -> None:
    kernels = {k.name: k for k in parse_source(flatten(SOURCE, []).text).kernels}
    accesses = kernels["vector_cache_kernel"].vectors
    assert {(a.pointer, a.width) for a in accesses} == {("cos_sin_cache", 16)}
    offsets = [o for a in accesses for o in a.offsets]
    # the locals are replaced by their values: the position loaded, the half width
    assert any("rot_dim / 2" in o and "positions[" in o for o in offsets)
    assert kernels["scalar_cache_kernel"].vectors == ()
    # a kernel that reads the row's address as an integer chooses its vector path by it: no
    # requirement, only a pointer-less access the import notes as not read
    (guarded,) = kernels["guarded_cache_kernel"].vectors
    assert guarded.pointer == "" and guarded.where.endswith("(tests an address)")


@pytest.mark.parametrize(
    ("offset", "k", "needed"),
    [
        ("pos * rot + (tx * 8) % (rot / 2)", 4, [("rot", 4), ("rot", 8)]),
        ("pos * rot + rot / 2", 4, [("rot", 4), ("rot", 8)]),
        ("tx * 8 + 4", 4, []),
        ("threadIdx.x * vec", 8, [("vec", 8)]),
        ("tx * 6", 4, None),  # a thread index times 3 (of 4 needed over 2): not a multiple
        ("f(pos) + rot", 4, None),  # a call is not read
    ],
)
def test_an_offset_is_read_into_the_multiples_its_launch_values_must_be(
    offset: str, k: int, needed: list[tuple[str, int]] | None
) -> None:
    node = expression_node(offset)
    assert node is not None
    assert required_multiples(node, k, {"rot", "vec"}) == needed


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_width_the_vector_loads_need_is_the_dims_multiple_and_every_draw_honours_it(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, results = imported
    ops = {r.op: r for r in results}
    assert ops["vector_cache"].imported, ops["vector_cache"].reason
    spec = load_contract(out / "vector_cache")
    dim = spec.contract.dims["rot_dim"]
    # the float4 loads make the width a multiple of 8 (no check states that); the launcher's
    # own check (whole vectors to each half) sets the least width
    assert dim.multiple_of == 8 and dim.min == 16
    impl = load_implementation(out / "vector_cache" / "production.cu", spec.contract)
    thresholds = requires_thresholds(impl.header.requires, spec)
    thresholds += code_thresholds(impl.source, spec)
    drawn = set()
    for seed in range(DRAW_SEEDS):
        rng = np.random.default_rng(seed)
        cases = plan_cases(spec, ["tuning", "heldout"], [], rng, domain=True, thresholds=thresholds)
        drawn |= {(case.suite, case.kind.split(" ")[0], case.dims["rot_dim"]) for case in cases}
    # the suites, the random shapes and every kind of domain shape (thresholds, non-multiples
    # and the 2^31 shapes included) keep to multiples of 8
    assert {kind for _, kind, _ in drawn} >= {"", "min", "max", "non_multiple", "sample"}
    assert {suite for suite, _, _ in drawn} >= {"tuning", "heldout", "random", "domain"}
    assert all(width % 8 == 0 for _, _, width in drawn)


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_kernel_without_vector_loads_gets_no_multiple(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, results = imported
    ops = {r.op: r for r in results}
    assert ops["scalar_cache"].imported, ops["scalar_cache"].reason
    dim = load_contract(out / "scalar_cache").contract.dims["rot_dim"]
    # the launcher's own check (an even width: cosine and sine halves) sets the least width;
    # no vector access asks a multiple
    assert dim.multiple_of == 1 and dim.min == 2


def test_accesses_the_rule_cannot_read_are_kept_to_be_noted_not_dropped() -> None:
    """A vector access through a struct parameter's field or a structured binding of one, and
    a function that tests an address at run time, are kept without a pointer, which the import
    notes as not read (the domain is left as it was); the function's own shared memory is no
    access of a tensor."""
    source = """
struct P { float* out; const float* in; int d; };
__global__ void field_kernel(P p) { reinterpret_cast<float4*>(p.out)[threadIdx.x] = {}; }
__global__ void bound_kernel(P p) {
  auto [out, in, d] = p;
  reinterpret_cast<float4*>(out)[threadIdx.x] = {};
}
__global__ void tested_kernel(float* x, float* y) {
  if (reinterpret_cast<unsigned long long>(y) % 16 == 0) y[0] = 1.f;
  reinterpret_cast<float4*>(x)[threadIdx.x] = {};
}
__global__ void shared_kernel(float* x) {
  __shared__ float4 tile[32];
  float4* slot = &tile[threadIdx.x];
  *slot = {};
  x[0] = 1.f;
}
"""
    kernels = {k.name: k for k in parse_source(source).kernels}
    for name in ("field_kernel", "bound_kernel"):
        assert [(v.pointer, v.offsets, v.width) for v in kernels[name].vectors] == [("", (), 16)]
    (tested,) = kernels["tested_kernel"].vectors
    assert tested.pointer == "" and tested.where.endswith("(tests an address)")
    assert kernels["shared_kernel"].vectors == ()

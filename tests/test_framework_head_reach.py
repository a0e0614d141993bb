"""How far a kernel reaches each strided row of a pointer it writes through, its device
functions included, as a launch requirement (:mod:`astra_graph.framework.reach`), on the CPU.

The fixture tests/fixtures/framework/csrc/head_reach.cu was written for these tests in the style
of SGLang's rotary launcher: the kernel hands ``query + token * row_stride + head *
head_stride`` to a device function that reads and writes ``arr[r]`` and ``arr[half + r]`` for
``r < half``, ``half = rot_dim / 2``, and the launcher passes the head size as the head stride
without checking the cache's width against it. SGLang's original, drafted with the cache's
width at a hidden size, wrote past its heads and was rejected against itself on the H100.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework import draft
from astra_graph.framework.importer import import_file
from astra_graph.framework.parse import parse_source
from astra_graph.kernel import expr
from astra_graph.kernel.contract import load_contract
from test_framework_import import _analysis

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "head_reach.cu"
HEAD_REACH = "2 * (rot_dim // 2) <= head_size"
ROW_REACH = "2 * (rot_dim // 2) <= query_1"

pytestmark = pytest.mark.usefixtures("default_search_path")


def _reaches(source: str) -> dict[str, dict[str, tuple[tuple[str, str], ...]]]:
    return {
        k.name: {r.pointer: r.rows for r in k.row_reaches} for k in parse_source(source).kernels
    }


def test_a_row_handed_to_a_device_function_is_reached_as_far_as_it_subscripts() -> None:
    reaches = _reaches(SOURCE.read_text())
    # the written query only; the cache and positions are only read (rows may overlap)
    assert reaches["head_rotate_kernel"] == {
        "query": (
            ("2 * ((rot_dim) // (2))", "row_stride"),
            ("2 * ((rot_dim) // (2))", "head_stride"),
        )
    }
    # through local pointers (`lo = arr + r`) the reach is not read: nothing is claimed
    assert reaches["head_rotate_pointers_kernel"] == {}


def test_the_launch_requires_each_row_to_hold_the_reach_and_the_suites_keep_to_it() -> None:
    analysis = _analysis(SOURCE, "head_rotate")
    assert HEAD_REACH in analysis.requires and ROW_REACH in analysis.requires
    assert any(n.startswith("query: the kernel reaches 2 * (rot_dim // 2)") for n in analysis.notes)
    tuning, heldout, _ = draft.suites(analysis)
    assert tuning and heldout
    for dims in [*tuning, *heldout]:
        assert dims["rot_dim"] <= dims["head_size"], dims
        assert all(expr.evaluate(r, dims) for r in analysis.requires), dims
    # serving head sizes still, the cache's width a whole head
    assert {(d["head_size"], d["rot_dim"]) for d in [*tuning, *heldout]} == {(128, 128), (64, 64)}
    # a width past the head breaks the requirement, though the launcher's checks pass
    wide = {**tuning[0], "rot_dim": tuning[0]["query_1"]}
    assert draft.takes(analysis, wide) is False
    assert draft.takes(analysis, {**tuning[0], "rot_dim": tuning[0]["head_size"] + 1}) is True


def test_an_unread_reach_claims_no_requirement() -> None:
    analysis = _analysis(SOURCE, "head_rotate_pointers")
    assert not [r for r in analysis.requires if "rot_dim" in r]
    assert not [n for n in analysis.notes if "the kernel reaches" in n]


KERNELS = """
template <typename T, bool NEOX>
__device__ void turn(T* arr, const int r, const int half) {
  int a, b;
  if (NEOX) {
    a = r;
    b = half + r;
  } else {
    a = 2 * r;
    b = 2 * r + 1;
  }
  const T x = arr[a];
  const T y = arr[b];
  arr[a] = y;
  arr[b] = x;
}

template <typename T>
__device__ T peek(const T* arr, const int r) { return arr[r]; }

template <typename T, bool NEOX>
__device__ void both(T* q, T* k, const int width, const int token, const long q_stride,
                     const long k_stride, const long head_stride, const int heads) {
  const int half = width / 2;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
    const int head = i / half;
    const int r = i % half;
    const long at = token * q_stride + head * head_stride;
    turn<T, NEOX>(q + at, r, half);
  }
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
    const int head = i / half;
    const int r = i % half;
    const long at = token * k_stride + head * head_stride;
    turn<T, NEOX>(k + at, r, half);
  }
}

template <typename T, bool NEOX>
__global__ void two_loops(T* q, T* k, const int width, const long q_stride, const long k_stride,
                          const long head_stride, const int heads) {
  const int token = blockIdx.x;
  both<T, NEOX>(q, k, width, token, q_stride, k_stride, head_stride, heads);
}

template <typename T>
__global__ void only_read(const T* q, T* out, const int half, const long head_stride) {
  const int r = threadIdx.x % half;
  out[threadIdx.x] = peek<T>(q + blockIdx.x * head_stride, r);
}

template <typename T>
__global__ void loaded_lane(T* q, const int* lanes, const int half, const long head_stride) {
  const int r = lanes[threadIdx.x];
  turn<T, true>(q + blockIdx.x * head_stride, r, half);
}

template <typename T>
__global__ void zero_head(T* q, const int half, const long row_stride, const long head_stride) {
  const int r = threadIdx.x % half;
  const int head = r / half;
  turn<T, true>(q + blockIdx.x * row_stride + head * head_stride, r, half);
}

template <typename T>
__global__ void by_reference(T* q, const int half, const long head_stride) {
  int r = threadIdx.x % half;
  bump(r);
  turn<T, true>(q + blockIdx.x * head_stride, r, half);
}
"""


def test_sibling_loops_branch_assigned_indices_and_unread_values() -> None:
    reaches = _reaches(KERNELS)
    # each loop's own `head`, `r` and `at` (declared again in the next loop) and an index
    # assigned in each branch of a template flag: both branches reach 2 * half
    expected = "2 * ((width) // (2))"
    assert reaches["two_loops"] == {
        "q": ((expected, "q_stride"), (expected, "head_stride")),
        "k": ((expected, "k_stride"), (expected, "head_stride")),
    }
    # rows only read may overlap (a sliding window): no requirement
    assert reaches["only_read"] == {}
    # an index loaded from memory, or handed to an unknown function that may change it
    assert reaches["loaded_lane"] == {}
    assert reaches["by_reference"] == {}
    # an index whose largest value is 0 takes no two values: its stride asks nothing
    assert reaches["zero_head"] == {"q": (("2 * half", "row_stride"),)}


GUARDED = """
__device__ void clear(float* arr, int d, int m) {
  for (int r = threadIdx.x; r < d; r += blockDim.x)
    if (r < m) arr[r] = 0.f;
}
__device__ void fill(float* arr, int d) {
  for (int r = threadIdx.x; r < d; r += blockDim.x) arr[r] = 0.f;
}
__global__ void two_guards(float* q, int s, int d, int m) { clear(q + blockIdx.x * s, d, m); }
__global__ void one_guard(float* q, int s, int d) { fill(q + blockIdx.x * s, d); }
"""


def test_an_index_under_two_guards_claims_no_reach() -> None:
    """``r < d`` and ``r < m``: the index stays below the smaller, which is not read; taking
    the nearer guard's ``m`` would require ``m <= s`` where the kernel reaches only ``min(d, m)``
    (review of 6f828fe). One guard alone is the reach."""
    reaches = _reaches(GUARDED)
    assert reaches["two_guards"] == {}
    assert reaches["one_guard"] == {"q": (("d", "s"),)}


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_operation_imports_with_the_requirement_and_validates(tmp_path: Path) -> None:
    report = import_file(SOURCE, [], tmp_path)
    assert {r.op: r.imported for r in report.launchers} == {
        "head_rotate": True,
        "head_rotate_pointers": True,
    }
    header = (tmp_path / "head_rotate" / "production.cu").read_text()
    assert f"// astra: requires = {HEAD_REACH}" in header
    contract = load_contract(tmp_path / "head_rotate").contract
    for dims in [*contract.suites.tuning, *contract.suites.heldout]:
        assert dims["rot_dim"] <= dims["head_size"], dims
    assert main(["validate", str(tmp_path / "head_rotate")]) == 0

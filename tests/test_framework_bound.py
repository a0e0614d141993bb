"""Pointers a kernel reaches through struct fields it unpacks, on the CPU (issue 23).

The fixture tests/fixtures/framework/csrc/bound_store.cu was written for these tests in the
style of SGLang's fused rotary + KV-cache store (rope.cuh at 0.5.23, whose two fused sites the
H100 rejected against themselves at 8b18284): a nested params struct of ``void*`` fields the
kernel unpacks with structured bindings, a float table the launcher's matcher types
(``with_dtype<float>()``) beside half tensors, and a cache row placed by a slot that is stored
through a device helper taking ``void*`` after a byte-offset helper. Drafted as the launch's
element type, the table was half as long as the kernel reads; drafted uniform, the slots
repeated and two tokens raced for one cache row.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.framework.flatten import flatten
from astra_graph.framework.importer import LauncherResult, import_file
from astra_graph.framework.parse import parse_source
from astra_graph.kernel.contract import load_contract

SOURCE = Path(__file__).resolve().parent / "fixtures" / "framework" / "csrc" / "bound_store.cu"

pytestmark = pytest.mark.usefixtures("default_search_path")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[LauncherResult]]:
    out = tmp_path_factory.mktemp("bound")
    return out, import_file(SOURCE, [], out).launchers


def test_a_slot_reached_through_bindings_and_stored_through_a_helper_is_found() -> None:
    (kernel,) = parse_source(flatten(SOURCE, []).text).kernels
    # `loc` and `cache` are fields of params, bound by name; `out` is stored through
    # store_to(void*), and `row` (q, placed by the token) is no slot's row
    assert kernel.scattered == (("params.loc", "params.cache"),)


def test_the_matchers_one_element_type_is_kept_per_tensor() -> None:
    (launcher,) = parse_source(flatten(SOURCE, []).text).launchers
    for launch in launcher.launches:
        # `with_dtype<int32_t, int64_t>(id_type)` names no one type: the choice says which
        assert dict(launch.typed) == {
            "q": "DType",
            "v": "DType",
            "table": "float",
            "cache": "DType",
        }


def test_a_pointer_passed_to_a_read_only_helper_places_no_store() -> None:
    source = """
__device__ float read_at(const void* p, long i) { return static_cast<const float*>(p)[i]; }
__device__ void touch(const void* p) {}
__device__ void touch(void* p) {}
__global__ void gather_kernel(float* out, float* table, const int* ids) {
  const int id = ids[threadIdx.x];
  float* row = table + id * 4;
  out[threadIdx.x] = read_at(row, 0);
  touch(row);
}
"""
    (kernel,) = parse_source(source).kernels
    # `table` is not const, but `row` goes only to a `const void*` parameter, and to an
    # overload set that also takes `const void*` there: a gather, whose ids may repeat
    assert kernel.scattered == ()


def test_a_pointer_passed_to_a_helper_that_only_reads_its_non_const_pointer_places_no_store() -> (
    None
):
    source = """
__device__ float dot(float* a, const float* b, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
__device__ void put(float* a, float v) { float* at = a + 1; at[0] = v; }
__device__ void hand_on(float* a, float v) { put(a, v); }
__global__ void attend_kernel(float* out, float* cache, const int* table, const float* q,
                              int d) {
  float* row = cache + table[blockIdx.x] * d;
  out[blockIdx.x] = dot(row, q, d);
}
__global__ void put_kernel(float* out, float* cache, const int* slots, int d) {
  float* row = cache + slots[blockIdx.x] * d;
  hand_on(row, out[blockIdx.x]);
}
"""
    kernels = {k.name: k for k in parse_source(source).kernels}
    # a lax `float*` that is only read (a paged gather's block table repeats ids by design)
    assert kernels["attend_kernel"].scattered == ()
    # a store two calls down, through the callee's local: the row is written, its slot placed
    assert kernels["put_kernel"].scattered == (("slots", "cache"),)


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_table_is_float_and_the_slots_distinct_with_room_for_every_token(
    imported: tuple[Path, list[LauncherResult]],
) -> None:
    out, results = imported
    assert sorted(str(r.op) for r in results if r.imported) == ["run_1", "run_2"]
    for op in ("run_1", "run_2"):
        spec = load_contract(out / op)
        args = {a.name: a for a in spec.contract.args}
        assert args["table"].dtype == "float32"
        assert args["q"].dtype == "T" and args["cache"].dtype == "T"
        assert args["loc"].init.distinct and args["loc"].init.below == "cache_0"
        assert not args["positions"].init.distinct
        header = (out / op / "production.cu").read_text()
        assert "// astra: requires = (num_tokens) <= cache_0" in header
        assert main(["validate", str(out / op)]) == 0

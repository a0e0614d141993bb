"""run_bench, the copy-bandwidth cache and the deep checks on a real GPU (marked ``gpu``).

Beyond the statistics (tested on the CPU), what matters here is that the protocol catches what
it must: an impossible time, and a kernel that stops writing its output once it is being timed.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness import deep, roofline
from astra_graph.harness.bench import run_bench
from astra_graph.harness.payload import KernelPayload, OperationPayload
from astra_graph.harness.results import BenchReport
from astra_graph.harness.timing import NODE_METHOD
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation

pytestmark = pytest.mark.gpu

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
SILU = KERNELS / "silu_and_mul"
LARGE = {"tokens": 2048, "d": 14336}
SMALL = {"tokens": 16, "d": 4096}

SILU_HELPERS = """
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
"""

LAZY_SILU = (
    """// correct for its first few launches, then writes nothing: a replayed answer
// astra: entry = lazy_silu<T>
// astra: grid = tokens
// astra: block = 256
"""
    + SILU_HELPERS
    + """
__device__ unsigned int launches_seen;

template <typename T>
__global__ void lazy_silu(T* out, const T* x, int d) {
    const long long row = blockIdx.x;
    if (launches_seen < 8) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float a = to_f32(x[row * 2 * d + i]);
            store(out + row * d + i, a / (1.0f + expf(-a)) * to_f32(x[row * 2 * d + d + i]));
        }
    }
    if (row == gridDim.x - 1 && threadIdx.x == 0) atomicAdd(&launches_seen, 1u);
}
"""
)

OVERRUN_SILU = (
    """// writes one element past each row's end: memcheck must see the last row's overrun
// astra: entry = overrun_silu<T>
// astra: grid = tokens
// astra: block = 256
"""
    + SILU_HELPERS
    + """
template <typename T>
__global__ void overrun_silu(T* out, const T* x, int d) {
    const long long row = blockIdx.x;
    for (int i = threadIdx.x; i <= d; i += blockDim.x) {
        float a = i < d ? to_f32(x[row * 2 * d + i]) : 0.0f;
        store(out + row * d + i, a);
    }
}
"""
)


def _request(candidate: Path, baseline: Path | None, **extra: Any) -> dict[str, Any]:
    spec = load_contract(candidate.parent)

    def payload(path: Path) -> dict[str, Any]:
        return KernelPayload.of(load_implementation(path, spec.contract)).model_dump()

    return {
        "op": OperationPayload.of(spec).model_dump(),
        "candidate": payload(candidate),
        "baseline": payload(baseline) if baseline else None,
        "seed": 7,
        **extra,
    }


def _op_copy(tmp_path: Path, name: str, source: str) -> Path:
    """A silu_and_mul folder holding one extra implementation."""
    folder = tmp_path / "silu_and_mul"
    folder.mkdir(exist_ok=True)
    for file in ("contract.toml", "reference.py", "naive.cu", "production.cu"):
        shutil.copy(SILU / file, folder / file)
    path = folder / f"{name}.cu"
    path.write_text(source)
    return path


def test_production_beats_naive_on_large_shapes_in_device_mode() -> None:
    out = run_bench(_request(SILU / "production.cu", SILU / "naive.cu", shapes=[LARGE, SMALL]))
    report = BenchReport.model_validate(out)
    assert report.rejection is None
    large, small = report.shapes
    assert large.candidate.method == NODE_METHOD
    assert large.speedup is not None and large.speedup > 1.0
    assert large.call == "faster"
    assert 10 < large.roofline_pct < 120
    assert small.candidate.method.startswith("graph x")
    assert report.geomean_speedup is not None
    production = load_implementation(SILU / "production.cu", load_contract(SILU).contract)
    _, block, _ = production.header.launch(LARGE, DTYPES["float16"], {})
    assert report.resources["candidate"].threads_per_block == math.prod(block)
    # the limits: the roof of the shape's mix, and the copy and launch floors timed beside the
    # kernels (the same way: graphs at the small shape, events at the large one)
    assert large.roof_gbps is not None and 300 < large.roof_gbps < 20_000
    assert large.copy_floor is not None and small.copy_floor is not None
    assert large.launch_floor is not None and small.launch_floor is not None
    assert small.copy_floor.method.startswith("graph x")
    assert small.launch_floor.method.startswith("graph x")
    assert large.copy_floor.method == NODE_METHOD
    # an empty kernel on the copy's grid is shorter than the copy itself (on the H100 at
    # 2048x14336: 20.9 us against 64.2 us; scheduling that many blocks is not free), and never
    # longer than the small copy by more than the noise
    assert large.launch_floor.median_us < large.copy_floor.median_us
    noise = 1 + 3 * (small.copy_floor.rel_std_err + small.launch_floor.rel_std_err)
    assert small.launch_floor.median_us <= noise * small.copy_floor.median_us
    assert large.bound == "bandwidth" and small.bound in ("copy", "launch")
    assert small.limit and large.limit.startswith("bandwidth-bound at")
    assert 0 < (report.resources["candidate"].occupancy or 0) <= 1


def test_per_call_mode_takes_the_papers_hundred_samples() -> None:
    out = run_bench(
        _request(SILU / "production.cu", SILU / "naive.cu", mode="per-call", shapes=[SMALL])
    )
    report = BenchReport.model_validate(out)
    (shape,) = report.shapes
    assert shape.baseline is not None
    assert shape.candidate.samples == shape.baseline.samples == 100
    assert shape.candidate.method.startswith("per-call")
    assert report.rejection is None


def test_copy_bandwidth_is_cached_per_device() -> None:
    first, _ = roofline.copy_bandwidth_gbps()
    second, cached = roofline.copy_bandwidth_gbps()
    assert cached
    assert second == first
    assert 300 < first < 20_000


def test_a_time_beyond_the_copy_bandwidth_is_impossible() -> None:
    out = run_bench(_request(SILU / "production.cu", None, shapes=[LARGE], copy_gbps=1.0))
    report = BenchReport.model_validate(out)
    assert report.shapes[0].impossible
    assert report.rejection is not None and report.rejection.reason == "impossible_time"
    assert report.rejection.evidence is not None
    assert report.rejection.evidence.dims == LARGE


@pytest.mark.parametrize("shape", [LARGE, SMALL], ids=["events", "graph"])
def test_a_kernel_that_stops_writing_when_timed_is_rejected(
    tmp_path: Path, shape: dict[str, int]
) -> None:
    lazy = _op_copy(tmp_path, "lazy", LAZY_SILU)
    out = run_bench(_request(lazy, lazy.parent / "naive.cu", shapes=[shape]))
    report = BenchReport.model_validate(out)
    assert report.rejection is not None
    assert report.rejection.reason == "timing_replay"  # the class: behaves differently timed
    assert "timed calls" in (report.rejection.evidence.detail if report.rejection.evidence else "")


TIMING_KERNELS = Path(__file__).parent / "fixtures" / "timing_kernels"


def test_a_kernel_looking_for_clone_copies_gains_nothing_and_is_rejected_for_its_state(
    tmp_path: Path,
) -> None:
    # the red team's kernel recognised timing's clones of the first copy and left rows unwritten;
    # every timed copy now has its own inputs (issue 22), so it never skips and is not faster;
    # what it remembers between launches to look for clones is module state (carried_state)
    source = (TIMING_KERNELS / "silu_skips_clone_copies.cu").read_text()
    skipper = _op_copy(tmp_path, "clones", source)
    out = run_bench(_request(skipper, skipper.parent / "production.cu", shapes=[SMALL]))
    report = BenchReport.model_validate(out)
    assert report.shapes[0].candidate.method.startswith("graph")  # copies rotate only in graphs
    assert report.rejection is not None and report.rejection.reason == "carried_state"
    assert "after timing" in report.rejection.message and "g_" in report.rejection.message
    assert all(s.call != "faster" for s in report.shapes), [s.speedup for s in report.shapes]


def test_a_kernel_that_skips_outputs_already_valid_gains_nothing(tmp_path: Path) -> None:
    # it skips a chunk whose stored output already matches a recomputed sample: 1.09x "faster"
    # than production at 8192x12288 while outputs were poisoned once per round of samples
    source = (TIMING_KERNELS / "silu_skips_outputs_already_valid.cu").read_text()
    skipper = _op_copy(tmp_path, "valid", source)
    shapes = [LARGE, {"tokens": 8192, "d": 12288}]
    out = run_bench(_request(skipper, skipper.parent / "production.cu", shapes=shapes))
    report = BenchReport.model_validate(out)
    assert report.rejection is None  # every timed launch computed: a correct, slower kernel
    assert all(s.call != "faster" for s in report.shapes), [s.speedup for s in report.shapes]


def test_a_kernel_that_skips_some_timed_launches_is_rejected(tmp_path: Path) -> None:
    # a single-launch node times copy 0 over and over: the kernel skips every third launch
    # there, so the last sample (the one re-checked) is usually whole; every sample's
    # fingerprint is not
    source = (TIMING_KERNELS / "silu_skips_some_timed_launches.cu").read_text()
    skipper = _op_copy(tmp_path, "some", source)
    out = run_bench(_request(skipper, skipper.parent / "production.cu", shapes=[LARGE]))
    report = BenchReport.model_validate(out)
    assert report.shapes[0].candidate.method == NODE_METHOD
    assert report.rejection is not None, report.shapes[0].candidate
    assert report.rejection.reason == "timing_replay"


def test_memcheck_passes_production_and_catches_an_overrun(tmp_path: Path) -> None:
    if deep.find_tool("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer not installed")
    from astra_graph.kernel.contract import load_contract

    spec = load_contract(SILU)
    good = deep.sanitize(spec, SILU / "production.cu", "float16", [{"tokens": 3, "d": 24}])
    assert [r.ok for r in good] == [True, True], [r.summary for r in good]
    overrun = _op_copy(tmp_path, "overrun", OVERRUN_SILU)
    bad_spec = load_contract(overrun.parent)
    (bad,) = deep.sanitize(
        bad_spec, overrun, "float16", [{"tokens": 3, "d": 24}], tools=["memcheck"]
    )
    assert not bad.ok and bad.errors > 0, bad.summary


def test_ncu_reports_dram_throughput_and_occupancy() -> None:
    if deep.find_tool("ncu") is None:
        pytest.skip("Nsight Compute not installed")
    from astra_graph.kernel.contract import load_contract

    spec = load_contract(SILU)
    result = deep.profile(spec, SILU / "production.cu", "float16", [LARGE], "silu_and_mul_vec")
    assert result.ok, result.summary
    (kernel,) = result.kernels
    assert kernel.dram_throughput_pct is not None and kernel.dram_throughput_pct > 10
    assert kernel.achieved_occupancy_pct is not None and kernel.achieved_occupancy_pct > 0
    assert kernel.top_stalls

"""The clock guard on a real GPU (marked ``gpu``): NVML is read through ctypes and every bench
result carries the SM clock it was timed at (issue 26, item 3)."""

from __future__ import annotations

import pytest

from astra_graph.harness.bench import run_bench
from astra_graph.harness.clock import NvmlClock, nvml_source
from astra_graph.harness.results import BenchReport
from test_bench_gpu import SILU, SMALL, _request

pytestmark = pytest.mark.gpu


def test_nvml_reads_the_sm_clock_of_the_cuda_device() -> None:
    import cupy

    source = nvml_source(cupy.cuda.Device().pci_bus_id)
    assert isinstance(source, NvmlClock), source
    reading = source.read()
    assert reading is not None and reading.sm_mhz > 0


def test_a_bench_result_carries_the_sm_clock() -> None:
    out = run_bench(_request(SILU / "production.cu", SILU / "naive.cu", shapes=[SMALL]))
    report = BenchReport.model_validate(out)
    assert report.clock is not None
    assert report.clock.readable, report.clock.unreadable_because
    assert report.clock.sm_mhz_min is not None and report.clock.sm_mhz_max is not None
    assert 0 < report.clock.sm_mhz_min <= report.clock.sm_mhz_max
    print(
        f"SM clock {report.clock.sm_mhz_min}-{report.clock.sm_mhz_max} MHz, "
        f"{report.clock.rounds_discarded} round(s) discarded: {report.clock.events}"
    )

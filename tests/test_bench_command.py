"""``astra bench`` without a GPU: bad input and no GPU exit 2 in one line; the table's format."""

from __future__ import annotations

import pytest

from astra_graph.cli import main
from astra_graph.commands.bench import format_report
from astra_graph.harness.compile import gpu_arch
from astra_graph.harness.results import BenchReport, Measurement, ResourceReport, ShapeTiming
from astra_graph.harness.timing import EVENTS_METHOD, GRAPH_METHOD, NODE_METHOD


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["bench", *argv])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["silu_and_mul", "--against", "fused_add_rmsnorm/naive"], "--against"),
        (["silu_and_mul", "--dtype", "float64"], "--dtype"),
        (["no_such_op"], "no such kernel"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, err = _run(capsys, *argv)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_mode_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["bench", "silu_and_mul", "--mode", "fast"])
    assert raised.value.code == 2
    assert "--mode" in capsys.readouterr().err


@pytest.mark.skipif(gpu_arch() is not None, reason="this machine has a GPU")
def test_no_gpu_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "silu_and_mul", "--against", "silu_and_mul/naive")
    assert code == 2
    assert err.strip() == "astra bench: no CUDA GPU here: timing needs one (CuPy sees no device)"


def _measurement(median: float, rse: float, method: str = "events+l2flush") -> Measurement:
    return Measurement(median_us=median, spread_us=0.1, rel_std_err=rse, samples=40, method=method)


def test_table_shows_each_shape_and_the_geomean() -> None:
    shapes = [
        ShapeTiming(
            label="16x4096",
            dims={"tokens": 16, "d": 4096},
            dtype="float16",
            bytes_moved=393216,
            candidate=_measurement(2.0, 0.004, "graph x256, 256 rotating copies"),
            baseline=_measurement(3.0, 0.004),
            speedup=1.5,
            speedup_err=0.008,
            call="faster",
            achieved_gbps=196.6,
            roofline_pct=6.5,
        ),
        ShapeTiming(
            label="8192x12288",
            dims={"tokens": 8192, "d": 12288},
            dtype="float16",
            bytes_moved=603979776,
            candidate=_measurement(210.0, 0.002),
            baseline=_measurement(211.0, 0.002),
            speedup=1.0048,
            speedup_err=0.003,
            call="tie",
            achieved_gbps=2876.0,
            roofline_pct=95.0,
        ),
    ]
    report = BenchReport(
        op="silu_and_mul",
        mode="device",
        device="NVIDIA H100",
        candidate="kernels/silu_and_mul/production.cu",
        baseline="kernels/silu_and_mul/naive.cu",
        copy_bandwidth_gbps=3026.0,
        shapes=shapes,
        geomean_speedup=1.228,
        geomean_speedup_err=0.004,
        resources={"candidate": ResourceReport(registers=16, static_smem_bytes=0, occupancy=1.0)},
    )
    text = format_report(report, "tuning")
    lines = text.splitlines()
    assert lines[0].startswith("silu_and_mul  device mode  tuning  NVIDIA H100")
    row = next(line for line in lines if line.startswith("16x4096"))
    assert "1.500 ±0.008" in row and "faster" in row and "graph x256" in row
    assert "tie" in next(line for line in lines if line.startswith("8192x12288"))
    assert "geomean speedup 1.228 ±0.004 over 2 shapes (1 faster, 0 slower, 1 tie)" in text
    assert "candidate: 16 registers" in text


@pytest.mark.skipif(gpu_arch() is not None, reason="this machine has a GPU")
def test_run_bench_refuses_to_run_without_a_gpu() -> None:
    from astra_graph.harness.bench import run_bench
    from astra_graph.harness.errors import NoGpu

    with pytest.raises(NoGpu):
        run_bench({"op_folder": "kernels/silu_and_mul", "candidate": "x.cu"})


def test_each_shape_says_which_limit_binds() -> None:
    from astra_graph.harness import roofline
    from astra_graph.loop.agents.summary import likely_bottlenecks, summarize

    def shape(
        label: str, dims: dict[str, int], nbytes: int, time: float, floor: float
    ) -> ShapeTiming:
        limit = roofline.limit_of(time, nbytes, 3000.0, floor, 1.5)
        return ShapeTiming(
            label=label,
            dims=dims,
            dtype="float16",
            bytes_moved=nbytes,
            candidate=_measurement(time, 0.004),
            achieved_gbps=roofline.achieved_gbps(nbytes, time),
            roofline_pct=roofline.roofline_pct(roofline.achieved_gbps(nbytes, time), 3000.0),
            roof_gbps=3000.0,
            copy_floor=_measurement(floor, 0.003),
            launch_floor=_measurement(1.5, 0.003),
            bound=limit.bound,
            limit=limit.text,
        )

    report = BenchReport(
        op="silu_and_mul",
        mode="device",
        device="NVIDIA H100",
        candidate="kernels/silu_and_mul/production.cu",
        copy_bandwidth_gbps=2990.0,
        shapes=[
            shape("16x4096", {"tokens": 16, "d": 4096}, 393216, 2.1, 2.05),
            shape("8192x12288", {"tokens": 8192, "d": 12288}, 603979776, 204.0, 202.0),
        ],
    )
    text = format_report(report)
    limit_rows = text.split("limit per shape", 1)[1].splitlines()
    small = next(line for line in limit_rows if line.strip().startswith("16x4096"))
    assert "copy 2.05 us" in small and "launch 1.50 us" in small
    assert "at the same-bytes copy floor (2.05 us, +2%)" in text
    assert "bandwidth-bound at 99% of the bandwidth roof 3000 GB/s" in text
    profile = summarize(report, "Profile")
    assert "at the same-bytes copy floor (2.05 us" in profile
    assert any(
        b.startswith("at the same-bytes copy floor on 16x4096") for b in likely_bottlenecks(report)
    )
    # the roof percent of the latency-bound shape does not drag the bandwidth median down
    assert any("median 99% of the roofline" in b for b in likely_bottlenecks(report))


def _shape(method: str) -> ShapeTiming:
    return ShapeTiming(
        label="8192x12288",
        dims={"tokens": 8192, "d": 12288},
        dtype="float16",
        bytes_moved=603979776,
        candidate=_measurement(210.0, 0.002, method),
        baseline=None,
        achieved_gbps=2876.0,
        roofline_pct=95.0,
    )


@pytest.mark.parametrize(
    ("method", "noted"),
    [(NODE_METHOD, False), (EVENTS_METHOD, False), (GRAPH_METHOD.format(copies=64), True)],
)
def test_the_partly_warm_note_is_for_graphs_of_copies_only(method: str, noted: bool) -> None:
    # a single launch is a graph node too (timing.NODE_METHOD), but its data is flushed before
    # every sample: only rotating copies can stay partly warm
    from types import SimpleNamespace

    from astra_graph.harness.bench import _summarise

    report = BenchReport(
        op="silu_and_mul",
        mode="device",
        device="test",
        candidate="production",
        copy_bandwidth_gbps=3000.0,
        shapes=[_shape(method)],
    )
    _summarise(SimpleNamespace(mode="device"), report)  # type: ignore[arg-type]
    assert any("stay partly warm" in note for note in report.notes) is noted

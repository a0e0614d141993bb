"""Synthetic run directories, in the layout ``optimize()`` writes, for report and notebook tests.

The numbers are made up (clearly labelled SYNTHETIC in run.json); only the layout and the data
models are real. Run as a script to (re)write the committed fixtures (factors: one per round,
``x`` for a rejected round):

    .venv/bin/python tests/synthetic_run.py tests/data/rundirs/synthetic-a 1.18 x 1.41
    .venv/bin/python tests/synthetic_run.py tests/data/rundirs/synthetic-b 1.05 1.12
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from astra_graph.harness.results import BenchReport, Measurement, ShapeTiming, Verdict
from astra_graph.llm.usage import Usage
from astra_graph.loop.plans import Plan
from astra_graph.loop.records import Attempt, CandidateRecord, RoundRecord
from astra_graph.loop.state import OptimizationResult

COPY_BANDWIDTH_GBPS = 3026.0
SHAPES = [(16, 4096), (32, 5120), (32, 8192), (16, 12288), (64, 8192)]
BASELINE_SOURCE = """\
// silu_and_mul, naive: scalar loads
template <typename T>
__global__ void silu_and_mul_naive(T* out, const T* x, int d) {
    const long long row = blockIdx.x;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float a = to_f32(x[row * 2 * d + i]);
        out[row * d + i] = from_f32<T>(a / (1.0f + expf(-a)) * to_f32(x[row * 2 * d + d + i]));
    }
}
"""
BEST_SOURCE = BASELINE_SOURCE.replace("naive: scalar loads", "vectorised: 16-byte loads").replace(
    "expf(-a)", "__expf(-a)"
)


def _measurement(median_us: float) -> Measurement:
    return Measurement(
        median_us=median_us,
        spread_us=median_us * 0.02,
        rel_std_err=0.004,
        samples=200,
        method="graph x64 rotating",
    )


def shape_timings(factor: float, op: str = "silu_and_mul") -> list[ShapeTiming]:
    """Per-shape timings of a candidate ``factor`` times faster than a fixed baseline."""
    timings = []
    for i, (tokens, d) in enumerate(SHAPES):
        moved = 3 * tokens * d * 2
        baseline_us = moved / (COPY_BANDWIDTH_GBPS * 1e3) / 0.45 + 1.5
        shape_factor = factor * (1.0 + 0.04 * (i - 2))
        candidate_us = baseline_us / shape_factor
        err = shape_factor * 0.006
        call = "tie" if abs(shape_factor - 1.0) < 2 * err else "faster"
        if shape_factor < 1.0 - 2 * err:
            call = "slower"
        gbps = moved / candidate_us / 1e3
        timings.append(
            ShapeTiming(
                label=f"{tokens}x{d}",
                dims={"tokens": tokens, "d": d},
                dtype="float16",
                bytes_moved=moved,
                candidate=_measurement(candidate_us),
                baseline=_measurement(baseline_us),
                speedup=shape_factor,
                speedup_err=err,
                call=call,
                achieved_gbps=gbps,
                roofline_pct=100 * gbps / COPY_BANDWIDTH_GBPS,
            )
        )
    return timings


def bench(shapes: list[ShapeTiming], candidate: str, op: str = "silu_and_mul") -> BenchReport:
    """A candidate timed against the baseline."""
    speedups = [s.speedup or 1.0 for s in shapes]
    return BenchReport(
        op=op,
        mode="device",
        device="SYNTHETIC (no GPU)",
        candidate=candidate,
        baseline="baseline.cu",
        copy_bandwidth_gbps=COPY_BANDWIDTH_GBPS,
        shapes=shapes,
        geomean_speedup=math.exp(sum(math.log(v) for v in speedups) / len(speedups)),
        geomean_speedup_err=0.005,
    )


def baseline_bench() -> BenchReport:
    """The starting kernel timed alone, as profile_baseline records it: no speedups."""
    shapes = [
        s.model_copy(
            update={"candidate": s.baseline, "baseline": None, "speedup": None, "call": None}
        )
        for s in shape_timings(1.0)
    ]
    return BenchReport(
        op="silu_and_mul",
        mode="device",
        device="SYNTHETIC (no GPU)",
        candidate="baseline.cu",
        copy_bandwidth_gbps=COPY_BANDWIDTH_GBPS,
        shapes=[s.model_copy(update={"speedup_err": None}) for s in shapes],
    )


def write_synthetic_run(path: Path, factors: tuple[float | None, ...] = (1.18, None, 1.41)) -> Path:
    """A finished run of ``len(factors)`` rounds; ``None`` is a rejected round (a mismatch)."""
    op = "silu_and_mul"
    path.mkdir(parents=True, exist_ok=True)
    (path / "baseline.cu").write_text(BASELINE_SOURCE)
    baseline = baseline_bench()
    (path / "baseline").mkdir(exist_ok=True)
    (path / "baseline" / "bench.json").write_text(baseline.model_dump_json(indent=1))
    records, usage = [], []
    best_factor, best_round, best_speedup = None, 0, 1.0
    for number, factor in enumerate(factors, start=1):
        folder = path / "rounds" / str(number)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "candidate.cu").write_text(BEST_SOURCE)
        file = f"rounds/{number}/candidate.cu"
        tries, report = [], None
        if factor is None:
            verdict = Verdict.reject("mismatch", "out[3, 17]: got 0.5, expected 0.25")
            tries.append(Attempt(number=1, problem="no code in the reply", repair="send code"))
        else:
            verdict = Verdict(accepted=True, message="all cases passed", cases_checked=30)
            report = bench(shape_timings(factor), file)
            (folder / "bench.json").write_text(report.model_dump_json(indent=1))
            if best_factor is None or factor > best_factor:
                best_factor, best_round = factor, number
                best_speedup = report.geomean_speedup or 1.0
        tries.append(Attempt(number=len(tries) + 1, file=file, verdict=verdict))
        (folder / "verdict.json").write_text(verdict.model_dump_json(indent=1))
        plan = Plan(summary=f"round {number}: vectorise the loads", changes=[])
        candidate = CandidateRecord(plan=plan, path=file, tries=tries, timing=report, finished=True)
        records.append(RoundRecord(round=number, candidates=[candidate]))
        for agent in ("planning", "coding"):
            usage.append(
                Usage(
                    agent=agent,
                    round=number,
                    model="scripted-test-model",
                    input_tokens=900 + 10 * number,
                    output_tokens=300,
                    cost_usd=0.0021,
                )
            )
    heldout = Verdict(accepted=True, message="held-out suite passed", cases_checked=12)
    if best_factor:
        (path / "rounds" / str(best_round) / "heldout.json").write_text(heldout.model_dump_json())
    shapes = shape_timings(best_factor) if best_factor else []
    best_path = "best.cu" if best_factor else "baseline.cu"
    (path / "best.cu").write_text(BEST_SOURCE if best_factor else BASELINE_SOURCE)
    result = OptimizationResult(
        run_id=path.name,
        run_dir=str(path),
        op=op,
        kernel="baseline.cu",
        status="finished",
        models={"testing": "scripted-test-model", "planning": "scripted-test-model"},
        rounds_requested=len(factors),
        rounds_completed=len(factors),
        baseline=baseline,
        best_round=best_round,
        best_path=best_path,
        best_source=BEST_SOURCE if best_factor else BASELINE_SOURCE,
        improved=best_factor is not None,
        geomean_speedup=best_speedup,
        geomean_speedup_err=0.005 if best_factor else None,
        shapes=shapes,
        heldout=heldout if best_factor else None,
        message="SYNTHETIC fixture: made-up numbers, no GPU (tests/synthetic_run.py)",
        rounds=records,
        usage=usage,
        total_tokens=sum(u.input_tokens + u.output_tokens for u in usage),
        total_cost_usd=sum(u.cost_usd or 0.0 for u in usage),
        started_at="2026-11-22T06:00:00+00:00",
        updated_at="2026-11-22T06:05:00+00:00",
    )
    (path / "run.json").write_text(result.model_dump_json(indent=1))
    return path


if __name__ == "__main__":
    factors = tuple(None if f == "x" else float(f) for f in sys.argv[2:])
    write_synthetic_run(Path(sys.argv[1]), factors or (1.18, None, 1.41))

"""The tunable sweep's buckets, ranking, verification gate and bounds, with a scripted evaluator."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness.buckets import bucket_of
from astra_graph.harness.pool import GpuPool, Slot
from astra_graph.harness.protocol import EvaluatorLike
from astra_graph.harness.results import BenchReport, TimingMode, Verdict
from astra_graph.harness.tuning import config_label, group_by_bucket, tune
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import OperationSpec

SPEC, NAIVE = resolve("silu_and_mul/naive")
NAIVE_PATH = NAIVE.path


class ScriptedEvaluator(EvaluatorLike):
    """Speedups and verdicts by configuration label; records every call."""

    def __init__(
        self,
        speedups: dict[str, tuple[float, float]],
        rejected: AbstractSet[str] = frozenset(),
        timing_rejected: AbstractSet[str] = frozenset(),
    ) -> None:
        self.speedups = speedups
        self.rejected = rejected
        self.timing_rejected = timing_rejected
        self.bench_calls: list[tuple[str, list[dict[str, int]]]] = []
        self.check_calls: list[str] = []
        self.extra_seen: list[list[dict[str, int]]] = []

    def bench(
        self,
        op: OperationSpec,
        candidate: Path,
        *,
        against: Path | None = None,
        mode: TimingMode = "device",
        shapes: Sequence[Mapping[str, int]] | None = None,
        dtypes: Sequence[str] | None = None,
        tunables: Mapping[str, int] | None = None,
    ) -> BenchReport:
        label = config_label(tunables or {})
        self.bench_calls.append((label, [dict(d) for d in shapes or []]))
        speedup, err = self.speedups.get(label, (1.0, 0.01))
        rejection = (
            Verdict.reject("impossible_time", "faster than memory allows")
            if label in self.timing_rejected
            else None
        )
        return BenchReport(
            op=op.name,
            mode=mode,
            device="scripted",
            candidate=str(candidate),
            copy_bandwidth_gbps=3000.0,
            shapes=[],
            geomean_speedup=speedup,
            geomean_speedup_err=err,
            rejection=rejection,
        )

    def check(
        self,
        op: OperationSpec,
        baseline: Path,
        candidate: Path,
        *,
        suites: Sequence[str] = (),
        extra_shapes: Iterable[Mapping[str, int]] = (),
        tunables: Mapping[str, int] | None = None,
    ) -> Verdict:
        label = config_label(tunables or {})
        self.check_calls.append(label)
        self.extra_seen.append([dict(d) for d in extra_shapes])
        if label in self.rejected:
            return Verdict.reject("mismatch", "wrong at 16x4096")
        return Verdict(accepted=True)

    def close(self) -> None:
        """Nothing to stop."""


def test_buckets_split_decode_prefill_and_row_size() -> None:
    assert bucket_of(SPEC, {"tokens": 16, "d": 1024}, "float16") == "decode/small"
    assert bucket_of(SPEC, {"tokens": 256, "d": 4096}, "float16") == "decode/medium"
    assert bucket_of(SPEC, {"tokens": 257, "d": 4096}, "float16") == "prefill/medium"
    assert bucket_of(SPEC, {"tokens": 4096, "d": 28672}, "float16") == "prefill/large"
    # the row class follows the bytes a row moves, so the element size matters
    assert bucket_of(SPEC, {"tokens": 8, "d": 2048}, "float16") == "decode/small"
    assert bucket_of(SPEC, {"tokens": 8, "d": 2048}, "float32") == "decode/medium"


def test_group_by_bucket_covers_every_shape_once() -> None:
    shapes = SPEC.contract.suite("tuning")
    groups = group_by_bucket(SPEC, shapes, "float16")
    assert sorted(map(str, (s for g in groups.values() for s in g))) == sorted(map(str, shapes))
    assert len(groups) >= 3


def test_fastest_verified_configuration_wins_per_bucket() -> None:
    evaluator = ScriptedEvaluator(
        speedups={"BLOCK=512": (1.30, 0.02), "BLOCK=1024": (1.50, 0.02), "BLOCK=128": (0.9, 0.02)},
        rejected={"BLOCK=1024"},
    )
    shapes = [{"tokens": 16, "d": 4096}, {"tokens": 4096, "d": 28672}]
    report = tune(evaluator, SPEC, NAIVE_PATH, baseline=NAIVE_PATH, shapes=shapes)
    assert report.default_tunables == {"BLOCK": 256}
    assert [e.bucket for e in report.dispatch] == ["decode/medium", "prefill/large"]
    for entry in report.dispatch:
        # 1024 was fastest but failed verification, so 512 is chosen
        assert entry.tunables == {"BLOCK": 512}
        assert entry.verified
        assert entry.speedup_vs_default == pytest.approx(1.30)
    assert any("BLOCK=1024" in s and "rejected" in s for s in report.skipped)
    assert report.tried == 6  # three configurations, two buckets
    decode = bucket_of(SPEC, {"tokens": 8, "d": 4096}, "float16")
    assert next(e for e in report.dispatch if e.bucket == decode).tunables == {"BLOCK": 512}


def test_ties_keep_the_default() -> None:
    evaluator = ScriptedEvaluator(speedups={"BLOCK=512": (1.02, 0.02)})
    report = tune(
        evaluator, SPEC, NAIVE_PATH, baseline=NAIVE_PATH, shapes=[{"tokens": 16, "d": 4096}]
    )
    (entry,) = report.dispatch
    assert entry.tunables == {"BLOCK": 256}
    assert entry.speedup_vs_default == 1.0
    assert evaluator.check_calls == ["BLOCK=256"]  # the default itself is verified


def test_verification_includes_the_testing_agents_shapes() -> None:
    extra = [{"tokens": 3, "d": 4104}]
    evaluator = ScriptedEvaluator(speedups={"BLOCK=512": (1.3, 0.01)})
    tune(
        evaluator,
        SPEC,
        NAIVE_PATH,
        baseline=NAIVE_PATH,
        shapes=[{"tokens": 16, "d": 4096}],
        extra_shapes=extra,
    )
    assert evaluator.extra_seen and all(seen == extra for seen in evaluator.extra_seen)


def test_a_noisy_fast_setting_does_not_hide_a_sure_one() -> None:
    evaluator = ScriptedEvaluator(speedups={"BLOCK=512": (1.10, 0.06), "BLOCK=1024": (1.08, 0.005)})
    report = tune(
        evaluator, SPEC, NAIVE_PATH, baseline=NAIVE_PATH, shapes=[{"tokens": 16, "d": 4096}]
    )
    assert report.dispatch[0].tunables == {"BLOCK": 1024}


def test_timing_rejection_and_budget_are_reported_as_skipped() -> None:
    evaluator = ScriptedEvaluator(
        speedups={"BLOCK=512": (3.0, 0.01)}, timing_rejected={"BLOCK=512"}
    )
    report = tune(
        evaluator, SPEC, NAIVE_PATH, baseline=NAIVE_PATH, shapes=[{"tokens": 16, "d": 4096}]
    )
    assert report.dispatch[0].tunables == {"BLOCK": 256}
    assert any("impossible_time" in s for s in report.skipped)

    report = tune(
        ScriptedEvaluator({}),
        SPEC,
        NAIVE_PATH,
        baseline=NAIVE_PATH,
        shapes=[{"tokens": 16, "d": 4096}],
        budget_s=0.0,
    )
    assert report.tried == 1  # the budget starts once the first timing is done
    assert sum("time budget" in s for s in report.skipped) == 2


def test_a_slow_first_timing_does_not_use_up_the_budget() -> None:
    class ColdStart(ScriptedEvaluator):
        def bench(self, *args: Any, **kwargs: Any) -> BenchReport:
            if not self.bench_calls:
                time.sleep(0.3)  # the worker's one-time start-up
            return super().bench(*args, **kwargs)

    report = tune(
        ColdStart({}),
        SPEC,
        NAIVE_PATH,
        baseline=NAIVE_PATH,
        shapes=[{"tokens": 16, "d": 4096}],
        budget_s=0.2,
    )
    assert report.tried == 3 and not any("time budget" in s for s in report.skipped)


def test_max_configs_bounds_the_sweep() -> None:
    _, production = resolve("silu_and_mul/production")
    evaluator = ScriptedEvaluator({})
    report = tune(
        evaluator,
        SPEC,
        production.path,
        baseline=production.path,
        shapes=[{"tokens": 16, "d": 4096}],
        max_configs=2,
    )
    assert report.tried == 2
    assert "not tried (max_configs)" in report.skipped[0]


def test_an_implementation_without_tunables_is_not_swept(tmp_path: Path) -> None:
    source = NAIVE.source.replace("// astra: tunable BLOCK = 256, 128, 512, 1024\n", "")
    source = source.replace("block = BLOCK", "block = 256")
    copy = tmp_path / "naive.cu"
    copy.write_text(source)
    evaluator = ScriptedEvaluator({})
    report = tune(evaluator, SPEC, copy, baseline=NAIVE_PATH, shapes=[{"tokens": 16, "d": 4096}])
    assert report.dispatch == [] and evaluator.bench_calls == []
    assert report.skipped == ["no tunables declared: nothing to sweep"]


# --- the sweep over a GPU pool ------------------------------------------------------------------

WAIT_S = 10.0
# three buckets (decode/medium, decode/large, prefill/large), two shapes in one of them
SPREAD_SHAPES = [
    {"tokens": 16, "d": 4096},
    {"tokens": 64, "d": 4096},
    {"tokens": 8, "d": 14336},
    {"tokens": 4096, "d": 28672},
]


class MeetingScripted(ScriptedEvaluator):
    """A scripted slot whose first timing waits at a barrier shared by the pool's slots: it
    passes only if the other slot's first timing runs at the same time (BrokenBarrierError,
    so a failed sweep, if the pool's slots were used one at a time)."""

    def __init__(self, barrier: threading.Barrier, **script: Any) -> None:
        super().__init__(**script)
        self.barrier = barrier

    def bench(self, *args: Any, **kwargs: Any) -> BenchReport:
        if not self.bench_calls:
            self.barrier.wait(WAIT_S)
        return super().bench(*args, **kwargs)


def spread_script() -> dict[str, Any]:
    """Settings that differ: two tie for best (the order tried breaks the tie), a faster one
    is refused by verification, the fastest by timing."""
    return {
        "speedups": {
            "BLOCK=256,VECS=2": (1.4, 0.01),
            "BLOCK=64,VECS=4": (1.4, 0.01),
            "BLOCK=512,VECS=4": (1.9, 0.01),
            "BLOCK=128,VECS=4": (1.2, 0.01),
            "BLOCK=64,VECS=1": (3.0, 0.01),
        },
        "rejected": {"BLOCK=512,VECS=4"},
        "timing_rejected": {"BLOCK=64,VECS=1"},
    }


def test_the_sweep_spreads_over_the_pool_and_reports_what_one_gpu_reports() -> None:
    _, production = resolve("silu_and_mul/production")
    barrier = threading.Barrier(2)
    lone = ScriptedEvaluator(**spread_script())
    pair = [MeetingScripted(barrier, **spread_script()) for _ in range(2)]
    reports = {}
    for name, evaluators in (("one GPU", [lone]), ("two GPUs", pair)):
        pool = GpuPool([Slot(gpu=str(i), evaluator=e) for i, e in enumerate(evaluators)])
        report = tune(pool, SPEC, production.path, baseline=NAIVE_PATH, shapes=SPREAD_SHAPES)
        reports[name] = report.model_dump(exclude={"seconds"})
    assert not barrier.broken  # the two slots' first timings ran at the same time
    assert all(e.bench_calls for e in pair)
    # the same timings and verifications, only spread: 11 settings x 3 buckets
    assert len(lone.bench_calls) == sum(len(e.bench_calls) for e in pair) == 33
    assert sorted(lone.check_calls) == sorted(c for e in pair for c in e.check_calls)
    assert reports["two GPUs"] == reports["one GPU"]
    dispatch = [e["tunables"] for e in reports["one GPU"]["dispatch"]]
    # 64x1 was refused by timing, 512x4 by verification; of the two 1.4x settings the one tried
    # first (64x4 comes before 256x2 in the header's order) wins in every bucket
    assert dispatch == [{"BLOCK": 64, "VECS": 4}] * 3
    skipped = reports["one GPU"]["skipped"]
    assert sum("BLOCK=64,VECS=1" in s and "impossible_time" in s for s in skipped) == 3
    assert sum("BLOCK=512,VECS=4: 1.90x but rejected" in s for s in skipped) == 3

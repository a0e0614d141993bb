"""Statistics and the sampling protocol of ``harness.timing``, on synthetic samples (no GPU)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from astra_graph.harness import timing
from astra_graph.harness.clock import ClockGuard
from astra_graph.harness.results import Measurement


def _measurement(median_us: float, rse: float) -> Measurement:
    return Measurement(median_us=median_us, spread_us=0.0, rel_std_err=rse, samples=50, method="x")


def test_quantiles_interpolate_between_order_statistics() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]
    assert timing.median(samples) == 2.5
    assert timing.iqr(samples) == pytest.approx(1.5)  # 3.25 - 1.75
    assert timing.iqr([7.0]) == 0.0
    with pytest.raises(ValueError):
        timing.median([])
    with pytest.raises(ValueError):
        timing.iqr([])


def test_relative_standard_error_matches_the_spread_of_medians() -> None:
    rng = np.random.default_rng(1)
    n, center, sigma = 50, 100.0, 2.0
    predicted = [
        timing.rel_std_err_median(rng.normal(center, sigma, n).tolist()) for _ in range(50)
    ]
    medians = np.median(rng.normal(center, sigma, (4000, n)), axis=1)
    observed = medians.std() / center
    assert np.median(predicted) == pytest.approx(observed, rel=0.15)


def test_relative_standard_error_ignores_a_single_outlier() -> None:
    rng = np.random.default_rng(2)
    samples = rng.normal(10.0, 0.1, 40).tolist()
    clean = timing.rel_std_err_median(samples)
    dirty = timing.rel_std_err_median([*samples, 10_000.0])
    assert dirty < 1.3 * clean
    assert timing.rel_std_err_median([5.0]) == math.inf


def test_summarize_fills_a_measurement() -> None:
    m = timing.summarize([1.0, 2.0, 3.0, 4.0, 5.0], "events+l2flush")
    assert (m.median_us, m.spread_us, m.samples, m.method) == (3.0, 2.0, 5, "events+l2flush")
    assert 0 < m.rel_std_err < 1


def test_speedup_error_adds_relative_errors_in_quadrature() -> None:
    ratio, err = timing.speedup(_measurement(200.0, 0.01), _measurement(100.0, 0.01))
    assert ratio == pytest.approx(2.0)
    assert err == pytest.approx(2.0 * math.sqrt(2) * 0.01)


def test_geomean_of_reciprocal_speedups_is_one_with_propagated_error() -> None:
    value, err = timing.geomean_speedup([(2.0, 0.02), (0.5, 0.005)])
    assert value == pytest.approx(1.0)
    assert err == pytest.approx(math.sqrt(0.01**2 + 0.01**2) / 2)
    value, _ = timing.geomean_speedup([(1.0, 0.0), (4.0, 0.0), (2.0, 0.0)])
    assert value == pytest.approx(2.0)
    with pytest.raises(ValueError):
        timing.geomean_speedup([])


def test_converged_needs_enough_samples_and_small_error_on_every_side() -> None:
    steady = [100.0 + 0.01 * (i % 3) for i in range(timing.MIN_SAMPLES)]
    noisy = [100.0 * (1 + 0.5 * (i % 2)) for i in range(timing.MIN_SAMPLES)]
    assert timing.converged([steady, steady])
    assert not timing.converged([steady, noisy])
    assert not timing.converged([steady[:3]])


def test_copies_exceed_twice_the_l2_within_the_limit() -> None:
    l2 = 50 << 20
    big = timing.copies_for_cold_data(300 << 20, l2)
    assert big == 2
    mid = timing.copies_for_cold_data(10 << 20, l2)
    assert mid * (10 << 20) > 2 * l2
    assert timing.copies_for_cold_data(48, l2) == timing.MAX_COPIES


@pytest.mark.parametrize(
    ("estimate", "cold", "expected"),
    [(2.0, 4, 100), (0.01, 4, timing.MAX_COPIES), (9.0, 11, 23), (1.0, 300, 300), (50.0, 2, 4)],
)
def test_graph_copies_fill_the_target_and_keep_the_data_cold(
    estimate: float, cold: int, expected: int
) -> None:
    # each copy is launched once per replay: about GRAPH_TARGET_US of work, never fewer copies
    # than the L2 needs, at most MAX_COPIES unless the L2 needs more
    assert timing.graph_copies(estimate, cold) == expected


@pytest.mark.parametrize(
    ("estimate", "cold", "room", "expected"),
    [(2.0, 4, 30, 30), (2.0, 4, 500, 100), (1.0, 300, 12, 12), (0.01, 2, 0, 1)],
)
def test_graph_copies_never_exceed_the_memory_room(
    estimate: float, cold: int, room: int, expected: int
) -> None:
    # copies that do not fit failed whole runs: the room wins over the target and the L2, and
    # the copy already drawn always stays
    assert timing.graph_copies(estimate, cold, room) == expected


class _Event:
    def record(self, stream: Any) -> None:
        pass


class _Stream:
    def __init__(self, log: list[str] | None = None) -> None:
        self.log = log if log is not None else []

    def synchronize(self) -> None:
        pass

    def begin_capture(self) -> None:
        self.log.append("begin capture")

    def end_capture(self) -> Any:
        self.log.append("end capture")
        return _Graph(self.log)


class _Graph:
    def __init__(self, log: list[str], name: str = "") -> None:
        self.log = log
        self.name = name

    def upload(self, stream: Any) -> None:
        self.log.append("upload")

    def launch(self, stream: Any) -> None:
        self.log.append(f"replay {self.name}".strip())


class _LoggingTimer(timing.Timer):
    """A timer whose samples only log what would run on the GPU, in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.stream = _Stream(self.log)
        self.clock = ClockGuard("no GPU in this test")

    def flush_l2(self) -> None:
        self.log.append("flush")

    def _event(self) -> Any:
        return _Event()

    def _elapsed_us(self, pairs: list[Any]) -> list[float]:
        return [1.0] * len(pairs)


def test_outputs_are_poisoned_before_every_timed_sample() -> None:
    # a kernel that finds its answer already in the outputs could skip the work: no timed launch
    # may start from the previous launch's result, as a single-launch node or in a graph replay;
    # every sample starts from restored inputs, and its outputs are recorded right after it
    timer = _LoggingTimer()
    subject = timing.Subject(
        name="cand",
        launch=lambda i, s: timer.log.append(f"launch {i}"),
        copies=2,
        restore=lambda i, s: timer.log.append(f"restore {i}"),
        restore_all=lambda s: timer.log.append("restore all"),
        poison=lambda s: timer.log.append("poison"),
        after_sample=lambda s: timer.log.append("after"),
    )
    nodes = [timing.Node(_Graph(timer.log, str(j)), _Event(), _Event()) for j in range(3)]
    pairs = [(n.start, n.end) for n in nodes]
    recorded: list[Any] = []

    def elapsed_us(pairs: list[Any]) -> list[float]:
        recorded.extend(pairs)
        return [1.0] * len(pairs)

    timer._elapsed_us = elapsed_us  # type: ignore[method-assign]
    timer.flushed_round([subject], [nodes])
    # a node graph holds its own flush; each sample is its own node, read by its own events
    assert timer.log == [
        entry for j in range(3) for entry in ("restore 0", "poison", f"replay {j}", "after")
    ]
    assert recorded == pairs
    timer.log.clear()
    timer.graph_round([subject], [_Graph(timer.log)], [2], 3)
    assert timer.log == ["restore all", "poison", "flush", "replay", "after"] * 3


def test_a_single_launch_is_captured_after_a_flush_between_two_event_record_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the launch is timed as a graph node (timing.NODE_METHOD): the L2 flush and the two events
    # are nodes of the same capture, around copy 0's launch, and each node graph has its own pair,
    # so a round's samples can all be enqueued before any is read
    timer = _LoggingTimer()
    recorded: list[Any] = []

    def record_node(event: Any, stream: Any) -> None:
        recorded.append(event)
        timer.log.append("record node")

    monkeypatch.setattr(timing, "record_node", record_node)
    subject = timing.Subject(
        name="cand", launch=lambda i, s: timer.log.append(f"launch {i}"), copies=4
    )
    nodes = timer.nodes(subject, 2)
    one = [
        "begin capture",
        "flush",
        "record node",
        "launch 0",
        "record node",
        "end capture",
        "upload",
    ]
    assert timer.log == one * 2
    assert [(n.start, n.end) for n in nodes] == [tuple(recorded[:2]), tuple(recorded[2:])]
    assert len({id(e) for e in recorded}) == 4
    assert nodes[1].launch(timer.stream) == (recorded[2], recorded[3])


def test_a_launch_that_fails_in_capture_raises_its_own_error_and_ends_the_capture() -> None:
    # a candidate whose launch raises (a bad argument, a launch error) must surface that error,
    # not the one ending a broken capture gives, and must not leave the stream capturing
    timer = _LoggingTimer()

    class EndFails(_Stream):
        def end_capture(self) -> Any:
            super().end_capture()
            raise RuntimeError("cudaErrorStreamCaptureInvalidated")

    timer.stream = EndFails(timer.log)

    def launch(i: int, stream: Any) -> None:
        raise ValueError(f"launch {i}: too many resources requested")

    subject = timing.Subject(name="cand", launch=launch, copies=2)
    with pytest.raises(ValueError, match="launch 0: too many resources"):
        timer.capture(subject)
    assert timer.log == ["begin capture", "end capture"]


class _ScriptedTimer(timing.Timer):
    """A timer whose "GPU" returns given times and records the order of the calls."""

    def __init__(self, times_us: dict[str, float], jitter: float = 0.01) -> None:
        self.times_us = times_us
        self.calls: list[str] = []
        self.captured: dict[str, int] = {}
        self.rng = np.random.default_rng(3)
        self.jitter = jitter
        self.stream = None
        self.clock = ClockGuard("no GPU in this test")

    def _noisy(self, name: str, count: int) -> list[float]:
        base = self.times_us[name]
        return (base * (1 + self.jitter * self.rng.standard_normal(count))).tolist()

    def estimate_us(self, subject: timing.Subject) -> float:
        return self.times_us[subject.name]

    def nodes(self, subject: timing.Subject, count: int) -> list[Any]:
        return [subject.name] * count

    def flushed_round(
        self, subjects: Sequence[timing.Subject], nodes: Sequence[Sequence[Any]]
    ) -> list[list[float]]:
        count = len(nodes[0])
        for j in range(count):
            self.calls.extend(n[j] for n in nodes)
        return [self._noisy(s.name, count) for s in subjects]

    def capture(self, subject: timing.Subject) -> Any:
        self.captured[subject.name] = subject.copies
        return subject.name

    def graph_round(
        self,
        subjects: Sequence[timing.Subject],
        graphs: Sequence[Any],
        launches: Sequence[int],
        count: int,
    ) -> list[list[float]]:
        for _ in range(count):
            self.calls.extend(f"graph:{g}" for g in graphs)
        return [self._noisy(s.name, count) for s in subjects]


def _subject(name: str, copies: int = 1) -> timing.Subject:
    return timing.Subject(name=name, launch=lambda i, s: None, copies=copies)


def test_device_mode_interleaves_sides_and_stops_when_converged() -> None:
    timer = _ScriptedTimer({"base": 100.0, "cand": 50.0}, jitter=0.02)
    base, cand = timer.device_mode([_subject("base"), _subject("cand")], budget_s=10.0)
    assert timer.calls[:4] == ["base", "cand", "base", "cand"]
    assert base.samples > timing.SAMPLES_PER_ROUND
    assert base.method == cand.method == timing.NODE_METHOD
    assert base.samples == cand.samples < timing.MAX_SAMPLES
    assert base.rel_std_err <= timing.TARGET_RSE and cand.rel_std_err <= timing.TARGET_RSE
    assert base.median_us / cand.median_us == pytest.approx(2.0, rel=0.01)


def test_device_mode_stops_at_the_sample_cap_when_noise_never_settles() -> None:
    timer = _ScriptedTimer({"base": 100.0}, jitter=0.5)
    (base,) = timer.device_mode([_subject("base")], budget_s=60.0)
    assert base.samples == timing.MAX_SAMPLES


def test_device_mode_uses_graphs_for_short_kernels() -> None:
    timer = _ScriptedTimer({"base": 3.0, "cand": 2.0}, jitter=0.002)
    base, cand = timer.device_mode([_subject("base", 8), _subject("cand", 8)], budget_s=10.0)
    assert timer.calls[:2] == ["graph:base", "graph:cand"]
    assert timer.captured == {"base": 8, "cand": 8}  # each copy once per replay
    assert base.method == cand.method == "graph x8, each copy once"


def test_alternating_order_flips_each_turn() -> None:
    from astra_graph.harness.timing import alternating

    assert alternating(["a", "b"], 0) == [(0, "a"), (1, "b")]
    assert alternating(["a", "b"], 1) == [(1, "b"), (0, "a")]
    firsts = [alternating(["a", "b"], j)[0][1] for j in range(10)]
    assert firsts.count("a") == firsts.count("b") == 5


def test_a_graph_methods_copies_are_read_back_from_its_one_spelling() -> None:
    """The export's timing repeats the bench's protocol from a stored ``method``: the copies of
    one timed as a graph of copies, None for a single launch (a node now, stream events before)
    or per-call timing."""
    from astra_graph.harness.timing import EVENTS_METHOD, GRAPH_METHOD, NODE_METHOD, method_copies

    assert method_copies(GRAPH_METHOD.format(copies=25)) == 25
    assert method_copies(NODE_METHOD) is None
    assert method_copies(EVENTS_METHOD) is None
    assert method_copies("per-call (20 warm-up, 100 timed)") is None


@pytest.mark.usefixtures("needs_nvrtc")
def test_the_flush_read_kernel_compiles_for_the_h100() -> None:
    # the read half of the L2 flush (timing.FLUSH_READ) runs only on a GPU; its source is
    # compiled here so that CI without one still catches an error in it
    from astra_graph.harness import nvrtc

    out = nvrtc.compile_source(
        timing.FLUSH_READ_SOURCE,
        filename="flush_read.cu",
        arch="sm_90",
        name_expressions=["astra_l2_read"],
    )
    assert out.ok, out.log
    (lowered,) = out.lowered_names.values()
    assert lowered in out.resources and out.resources[lowered].spill_store_bytes == 0
    assert timing.flush_words(50 << 20) * 4 == 100 << 20  # twice the L2
    assert timing.flush_words(16 << 20) * 4 == timing.MIN_FLUSH_BYTES  # at least 64 MB
    assert timing.flush_words(50 << 20) % 4 == 0  # whole 16-byte vectors

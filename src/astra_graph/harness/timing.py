"""Kernel timing: the measurement protocol and the statistics that summarise it.

Two protocols, both interleaving baseline and candidate in one process (A B B A ...) so that clock
and thermal drift hit both alike:

``device`` (the default): kernel time only.
  * Before every sample the L2 cache is flushed by writing a buffer at least twice its size, then
    reading it whole, and the persisting-L2 lines are reset once per timer. The read leaves the
    L2 holding clean lines: after a write alone it held dirty ones, whose write-back to DRAM then
    ran inside the timed kernel (:data:`FLUSH_READ`).
  * The flush and the launch are nodes of one small CUDA graph per sample, the launch between
    two event record nodes (:meth:`Timer.nodes`, :data:`NODE_METHOD`), as a captured serving
    step launches a kernel after others, and as the export times its op (the same protocol on
    both sides; a flushed stream launch read within 2% of it on the H100).
  * A kernel whose estimated time is under :data:`GRAPH_THRESHOLD_US` cannot be seen by an event
    pair around one launch (launch overhead is ~5 us on the H100 here). Such kernels are captured
    into a CUDA graph that launches each of the subject's input copies once, and the replay time
    is divided by the copies. The copies are enough to exceed twice the L2 (the data stays cold
    without a flush) and to fill about :data:`GRAPH_TARGET_US` (:func:`graph_copies`); the small
    gaps between graph nodes are included, equally for both sides.
  * Before every sample (outside the timed events) the outputs of every copy are poisoned and
    in-place arguments restored: no timed launch finds its outputs already holding the answer,
    so a kernel that recognises finished work and skips it is caught by the caller's re-check.
    (Poisoning once per round let 9 of 10 timed launches in events mode, and every pass after
    the first over a graph's copies, start from valid outputs; a red-team kernel that skipped
    them then read 109% of the roof on the H100, 2026-11-24.)
  * Samples are taken in rounds until the relative standard error of every side's median is
    below :data:`TARGET_RSE`, or the sample or time budget runs out.
  * The SM clock is read (NVML, ``harness.clock``) before and after every round; a round taken
    while the GPU throttled or changed its clock is discarded and taken again, a bounded number
    of times per shape (nvbench discards such samples too).

``per-call``: the Astra paper's protocol, kept for comparison with its numbers. 20 warm-up calls,
  then 100 calls, each bracketed by an event pair with a synchronisation before and after it,
  no L2 flush. The GPU is idle when the start event is recorded, so the host's launch overhead
  (the Python call into CuPy and the driver, several microseconds) lies inside every sample on
  purpose: that is what the paper measured, and why its microsecond-scale kernels looked several
  times slower than their memory traffic allows. Compare per-call numbers with each other, never
  with device-mode ones.

Statistics are pure functions over samples in microseconds. The spread of the samples is
estimated robustly from the interquartile range (sigma ~ IQR / 1.349 for normal data), so one
interrupted sample does not inflate it, and the standard error of the median is
1.2533 * sigma / sqrt(n) (the median's asymptotic efficiency for normal data).
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from astra_graph.harness.clock import ClockGuard, nvml_source
from astra_graph.harness.results import Measurement

IQR_TO_SIGMA = 1.349
"""IQR of a normal distribution in units of its standard deviation."""
MEDIAN_EFFICIENCY = 1.2533
"""sqrt(pi / 2): standard error of the median over that of the mean, for normal data."""

GRAPH_THRESHOLD_US = 10.0
"""Kernels estimated faster than this are timed inside a CUDA graph (device mode)."""
TARGET_RSE = 0.005
"""Stop sampling once every side's median is known to 0.5%."""
MIN_SAMPLES = 10
MAX_SAMPLES = 200
BUDGET_S = 0.5
"""Wall-time budget for one shape's device-mode sampling (all sides together)."""
SAMPLES_PER_ROUND = 10
ESTIMATE_SAMPLES = 5
"""Samples of :meth:`Timer.estimate_us`'s quick estimate (which chooses graphs or nodes)."""

PER_CALL_WARMUP = 20
PER_CALL_CALLS = 100

MIN_FLUSH_BYTES = 64 << 20
"""The L2 flush buffer's least size (it is at least twice the L2 in any case)."""
FLUSH_READ = True
"""Whether the flush reads its buffer back after writing it. The write evicts every line, the
timed kernel's own dirty outputs included; the read makes the lines the L2 then holds clean, so
their write-back happens before the start event. Measured on the H100 (2026-11-26, an fp16 add
of 4, 8 and 16 MB a tensor in six processes with their buffers at different addresses): after a
write-only flush the add took 1.14x, 1.25x and 1.35x its time after the read, and the spread
between processes was 6.3%, 6.5% and 2.1% against 3.4%, 2.1% and 1.7%
(benchmarks/results/2026-11-26-h100/l2-flush-probe.json; Triton's do_bench and nvbench flush by
writing alone)."""
FLUSH_READ_SOURCE = r"""
extern "C" __global__ void astra_l2_read(const int4* __restrict__ buffer, long long vectors,
                                         int* __restrict__ sink) {
    int folded = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < vectors;
         i += (long long)gridDim.x * blockDim.x) {
        const int4 v = buffer[i];
        folded ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (folded == 0x7fffffff) {  // never taken (a vector of four equal words folds to 0), but
        *sink = folded;          // the compiler cannot know the buffer: every load stays
    }
}
"""
"""The flush's read: every 16 bytes of the buffer loaded once; a result the compiler cannot
prove unused, so no load is removed."""
FLUSH_READ_BLOCKS = 4096
"""Blocks of the read's grid-stride loop: enough to fill an H100 (132 SMs) several times over."""
FLUSH_READ_THREADS = 256
"""Threads a block of the read."""


def flush_words(l2_bytes: int) -> int:
    """The flush buffer's size in 4-byte words: twice the L2, at least :data:`MIN_FLUSH_BYTES`
    (a whole number of 16-byte vectors: L2 sizes are multiples of 16 bytes)."""
    return max(2 * l2_bytes, MIN_FLUSH_BYTES) // 4


NODE_METHOD = "graph node+l2flush"
"""A measurement's ``method`` where each sample is a small CUDA graph of its own: an L2 flush,
an event record node, one launch, an event record node (:meth:`Timer.nodes`). The export times
its op, captured by torch, the same way node for node (``export.measure.in_graph_us``), so the
two compare one protocol. On the H100 (2026-11-26, one process, production merge,
fused_add_rmsnorm and silu at 10-20 us) these samples read 0.982-1.007 of a flushed stream
launch between stream events (:data:`EVENTS_METHOD`), and one graph holding all samples back
to back read 0.960-0.989 of it
(benchmarks/results/2026-11-26-h100/single-launch-protocols-decc8f8.json)."""
EVENTS_METHOD = "events+l2flush"
"""The ``method`` of bench reports written before :data:`NODE_METHOD`: one flushed launch on the
stream between two stream events. Still read (an export compares a run's stored bench)."""
SINGLE_LAUNCH_METHODS = (NODE_METHOD, EVENTS_METHOD)
"""The methods whose samples are each one flushed launch (not a graph of copies)."""
GRAPH_METHOD = "graph x{copies}, each copy once"
"""A graph-timed measurement's ``method``: how many input copies one replay launched."""
GRAPH_TARGET_US = 200.0
"""A graph replay should take about this long, so its launch cost is small next to it."""
MAX_COPIES = 256
"""At most this many input copies rotate inside a graph; tiny shapes then stay partly warm (and
their replay falls short of :data:`GRAPH_TARGET_US`)."""


def method_copies(method: str) -> int | None:
    """The copies per replay a measurement's ``method`` names (:data:`GRAPH_METHOD`), or None
    for one not timed as a graph."""
    match = re.fullmatch(re.escape(GRAPH_METHOD).replace(r"\{copies\}", r"(\d+)"), method)
    return int(match.group(1)) if match else None


# --- statistics ---------------------------------------------------------------------------------


def median(samples: Sequence[float]) -> float:
    """The median (``statistics.StatisticsError``, a ValueError, for no samples)."""
    return statistics.median(samples)


def iqr(samples: Sequence[float]) -> float:
    """Interquartile range, quartiles interpolated between order statistics ("inclusive");
    0 for a single sample."""
    if len(samples) < 2:
        median(samples)  # no samples: the same error as the median's
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q3 - q1


def rel_std_err_median(samples: Sequence[float]) -> float:
    """Relative standard error of the median; infinite with fewer than two samples."""
    if len(samples) < 2:
        return math.inf
    center = median(samples)
    if center <= 0:
        return math.inf
    sigma = iqr(samples) / IQR_TO_SIGMA
    return MEDIAN_EFFICIENCY * sigma / math.sqrt(len(samples)) / center


def summarize(samples_us: Sequence[float], method: str) -> Measurement:
    return Measurement(
        median_us=median(samples_us),
        spread_us=iqr(samples_us),
        rel_std_err=rel_std_err_median(samples_us),
        samples=len(samples_us),
        method=method,
    )


def speedup(baseline: Measurement, candidate: Measurement) -> tuple[float, float]:
    """(baseline time / candidate time, one standard error), errors combined in quadrature."""
    ratio = baseline.median_us / candidate.median_us
    return ratio, ratio * math.hypot(baseline.rel_std_err, candidate.rel_std_err)


def geomean_speedup(speedups: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Geometric mean of per-shape (speedup, error) pairs, with its propagated standard error.

    The log of the geometric mean is the mean of the logs; the error of each log is err/speedup,
    and the errors of independent shapes add in quadrature.
    """
    if not speedups:
        raise ValueError("geometric mean of no speedups")
    logs = [math.log(s) for s, _ in speedups]
    mean_log = sum(logs) / len(logs)
    log_err = math.sqrt(sum((e / s) ** 2 for s, e in speedups)) / len(speedups)
    value = math.exp(mean_log)
    return value, value * log_err


def converged(sample_sets: Sequence[Sequence[float]], target: float = TARGET_RSE) -> bool:
    """Every side has enough samples and a median known to within ``target``."""
    return all(len(s) >= MIN_SAMPLES and rel_std_err_median(s) <= target for s in sample_sets)


def copies_for_cold_data(bytes_per_copy: int, l2_bytes: int, limit: int = MAX_COPIES) -> int:
    """Input copies whose total exceeds twice the L2, so a rotation never finds its data cached."""
    if bytes_per_copy <= 0:
        return limit
    return max(2, min(limit, math.ceil(2 * l2_bytes / bytes_per_copy) + 1))


def graph_copies(estimate_us: float, cold_copies: int, room: int | None = None) -> int:
    """Input copies of a graph-timed subject, each launched once per replay: at least
    ``cold_copies`` (twice the L2) and enough for about :data:`GRAPH_TARGET_US`, at most
    :data:`MAX_COPIES` unless the L2 needs more, and never more than ``room`` where given: the
    copies the GPU's free memory holds (at least one). Fewer copies than the target asks leave
    a replay shorter than :data:`GRAPH_TARGET_US`, which weighs the graph's launch a little
    more; more than fit failed whole runs (30 copies of a 470 MB input, vLLM's masked MoE
    activation on the H100, 2026-11-27)."""
    per_target = math.ceil(GRAPH_TARGET_US / max(estimate_us, 0.05))
    wanted = max(cold_copies, min(MAX_COPIES, per_target))
    return wanted if room is None else max(1, min(room, wanted))


# --- measurement on the GPU -----------------------------------------------------------------------


def alternating(subjects: Sequence[Any], turn: int) -> list[tuple[int, Any]]:
    """The subjects with their indices, in order on even turns and reversed on odd ones (A B B A),
    so that neither side always runs right after the flush or right after the other."""
    indexed = list(enumerate(subjects))
    return indexed if turn % 2 == 0 else indexed[::-1]


@dataclass
class Subject:
    """One side of a comparison: a kernel bound to ``copies`` independent input sets.

    ``launch(i, stream)`` launches on copy ``i`` without synchronising; ``restore(i, stream)``, when
    given, writes copy ``i``'s inputs for the next timed call (outside the timed region): the
    bench gives them from alternating input sets, so every timed call computes a checkable
    function of inputs it did not see in the sample before.
    A graph of a subject launches each copy once (between restores and poisons).
    """

    name: str
    launch: Callable[[int, Any], None]
    copies: int = 1
    restore: Callable[[int, Any], None] | None = None
    poison: Callable[[Any], None] | None = None
    """Overwrite every copy's outputs (on the stream) before each sample, so that every timed
    launch must write them."""
    restore_all: Callable[[Any], None] | None = None
    """Restore every copy at once (what ``restore`` of each copy does, in fewer operations)."""
    after_sample: Callable[[Any], None] | None = None
    """Called (on the stream, after the end event) once per timed sample: the caller records
    what the sample left in the outputs, to see that every sample computed the same answer."""

    def prepare(self, index: int, stream: Any) -> None:
        if self.restore is not None:
            self.restore(index, stream)

    def prepare_all(self, stream: Any) -> None:
        if self.restore_all is not None:
            self.restore_all(stream)
            return
        for index in range(self.copies):
            self.prepare(index, stream)


def l2_cache_bytes() -> int:
    import cupy

    return int(cupy.cuda.Device().attributes["L2CacheSize"])


@cache
def _driver() -> Any:
    """The CUDA driver library (``ctypes``), or None where it cannot be loaded."""
    import ctypes

    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def reset_persisting_l2() -> bool:
    """Reset persisting L2 lines of the current context (driver call); False if unavailable."""
    driver = _driver()
    return driver is not None and int(driver.cuCtxResetPersistingL2Cache()) == 0


class L2Flush:
    """The L2 flush before every sample, on a stream the caller gives (the bench's own, or the
    one torch is capturing in the export's measures): a buffer of :func:`flush_words` written
    with a value that changes every time (no write is skipped as redundant), then read back
    whole (:data:`FLUSH_READ`). CuPy work only, so a torch graph captures it like any kernel."""

    def __init__(self, l2_bytes: int) -> None:
        import cupy

        self._cupy = cupy
        self.buffer = cupy.empty(flush_words(l2_bytes), dtype=cupy.int32)
        self._sink = cupy.empty(1, dtype=cupy.int32)
        self._read = cupy.RawKernel(FLUSH_READ_SOURCE, "astra_l2_read")
        self._vectors = cupy.int64(self.buffer.size // 4)  # the read kernel takes int4 vectors
        self._value = 0

    def __call__(self, stream: Any) -> None:
        self._value = (self._value + 1) & 0x7FFFFFFF
        with stream:
            self.buffer.fill(self._value)
            if FLUSH_READ:
                self._read(
                    (FLUSH_READ_BLOCKS,),
                    (FLUSH_READ_THREADS,),
                    (self.buffer, self._vectors, self._sink),
                )


CU_EVENT_RECORD_EXTERNAL = 0x1
"""``cuEventRecordWithFlags``' flag that makes a record during stream capture an event record
node of the graph (without it the record only orders streams and times nothing)."""


def record_node(event: Any, stream: Any) -> None:
    """Record ``event`` on ``stream``, which is capturing a graph, as an event record node of
    that graph (CUDA driver call; CuPy's own record cannot set the flag)."""
    import ctypes

    driver = _driver()
    if driver is None:
        raise RuntimeError("libcuda.so.1 cannot be loaded: no event record node can be made")
    status = driver.cuEventRecordWithFlags(
        ctypes.c_void_p(event.ptr), ctypes.c_void_p(stream.ptr), CU_EVENT_RECORD_EXTERNAL
    )
    if status != 0:
        raise RuntimeError(f"cuEventRecordWithFlags failed with CUresult {status}")


@dataclass(frozen=True)
class Node:
    """A CUDA graph of one sample (:meth:`Timer.nodes`): the L2 flush, an event record node, one
    launch, an event record node; :meth:`launch` enqueues it and gives its two events."""

    graph: Any
    start: Any
    end: Any

    def launch(self, stream: Any) -> tuple[Any, Any]:
        self.graph.launch(stream)
        return self.start, self.end


class Timer:
    """Events, a stream and an L2 flush buffer: everything a measurement needs on one device."""

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.l2_bytes = l2_cache_bytes()
        self._flush = L2Flush(self.l2_bytes)
        reset_persisting_l2()
        pci_bus_id = cupy.cuda.Device().pci_bus_id
        self.clock = ClockGuard(nvml_source(pci_bus_id))
        """The SM clock around every round of samples (``harness.clock``)."""

    def flush_l2(self) -> None:
        """Flush the L2 on the timing stream (:class:`L2Flush`)."""
        self._flush(self.stream)

    def _event(self) -> Any:
        return self._cupy.cuda.Event()

    def _elapsed_us(self, pairs: list[Any]) -> list[float]:
        return [self._cupy.cuda.get_elapsed_time(a, b) * 1000.0 for a, b in pairs]

    # --- rounds of samples -------------------------------------------------------------------

    def _sample(
        self, subject: Subject, timed: Callable[[], tuple[Any, Any]], prepare_all: bool
    ) -> tuple[Any, Any]:
        """Restore and poison, then ``timed`` (which enqueues the L2 flush and the timed work and
        gives the events that bracket the work), then the subject's record of the sample."""
        if prepare_all:
            subject.prepare_all(self.stream)
        else:
            subject.prepare(0, self.stream)
        if subject.poison is not None:  # no timed launch may find its answer already there
            subject.poison(self.stream)
        pair = timed()
        if subject.after_sample is not None:
            subject.after_sample(self.stream)
        return pair

    def _flushed_replay(self, graph: Any) -> tuple[Any, Any]:
        """An L2 flush, then ``graph``'s replay between two events recorded on the stream."""
        self.flush_l2()
        start, end = self._event(), self._event()
        start.record(self.stream)
        graph.launch(self.stream)
        end.record(self.stream)
        return start, end

    def _captured(self, enqueue: Callable[[], None]) -> Any:
        """The CUDA graph of what ``enqueue`` puts on the timing stream. If ``enqueue`` raises,
        the capture is ended and its error raised, not the one ending a broken capture gives."""
        self.stream.synchronize()
        self.stream.begin_capture()
        try:
            enqueue()
        except BaseException:
            with suppress(Exception):  # the stream must leave capture mode; enqueue's error wins
                self.stream.end_capture()
            raise
        return self.stream.end_capture()

    def nodes(self, subject: Subject, count: int) -> list[Node]:
        """``count`` graphs of an L2 flush, then one launch of the subject's copy 0 between event
        record nodes (:data:`NODE_METHOD`). Each has its own events, so that a round's samples
        can all be enqueued before any is read, and its own flush value, so that no two samples
        in a row write the same one. Each is uploaded, so no sample pays the upload.

        The flush is inside the graph, before the launch, as the kernels before it are in a
        captured serving step, and as ``export.measure.in_graph_us`` captures it: at the head of
        its graph, after a flush on the stream, the launch floor (an empty kernel) read 0.1-0.4
        us longer on the H100 (single-launch-protocols-decc8f8.json)."""
        made: list[Node] = []
        for _ in range(count):
            start, end = self._event(), self._event()

            def sample(start: Any = start, end: Any = end) -> None:
                self.flush_l2()
                record_node(start, self.stream)
                subject.launch(0, self.stream)
                record_node(end, self.stream)

            graph = self._captured(sample)
            graph.upload(self.stream)
            made.append(Node(graph, start, end))
        self.stream.synchronize()
        return made

    def flushed_round(
        self, subjects: Sequence[Subject], nodes: Sequence[Sequence[Node]]
    ) -> list[list[float]]:
        """One cold sample per node of each subject (``nodes[i]``: :meth:`nodes` of subject
        ``i``, all of one count), A B B A: restore, poison, the node graph (flush and launch)."""
        pairs: list[list[Any]] = [[] for _ in subjects]
        for j in range(len(nodes[0])):
            for i, subject in alternating(subjects, j):
                timed = partial(nodes[i][j].launch, self.stream)
                pairs[i].append(self._sample(subject, timed, False))
        self.stream.synchronize()
        return [self._elapsed_us(p) for p in pairs]

    def graph_round(
        self,
        subjects: Sequence[Subject],
        graphs: Sequence[Any],
        launches: Sequence[int],
        count: int,
    ) -> list[list[float]]:
        """``count`` samples per subject of one graph replay each, in microseconds per launch."""
        pairs: list[list[Any]] = [[] for _ in subjects]
        for j in range(count):
            for i, subject in alternating(subjects, j):
                replay = partial(self._flushed_replay, graphs[i])
                pairs[i].append(self._sample(subject, replay, True))
        self.stream.synchronize()
        return [[t / n for t in self._elapsed_us(p)] for p, n in zip(pairs, launches, strict=True)]

    def estimate_us(self, subject: Subject) -> float:
        """A quick cold estimate of one launch (after one untimed warm-up launch)."""
        subject.prepare(0, self.stream)
        subject.launch(0, self.stream)
        return median(self.flushed_round([subject], [self.nodes(subject, ESTIMATE_SAMPLES)])[0])

    def capture(self, subject: Subject) -> Any:
        """A CUDA graph launching each of the subject's copies once."""

        def each_copy() -> None:
            for i in range(subject.copies):
                subject.launch(i, self.stream)

        graph = self._captured(each_copy)
        graph.launch(self.stream)  # the first replay uploads the graph: keep it out of samples
        self.stream.synchronize()
        return graph

    # --- protocols --------------------------------------------------------------------------

    def device_mode(
        self,
        subjects: Sequence[Subject],
        *,
        budget_s: float = BUDGET_S,
        target_rse: float = TARGET_RSE,
        estimates: Sequence[float] | None = None,
    ) -> list[Measurement]:
        """Cold kernel time of each subject, sampled in interleaved rounds (see the module).

        ``estimates`` (microseconds per launch, one per subject) are the ones the caller sized
        its input copies with; pass them so that the choice of copies graph or single-launch
        nodes is made once. Nodes launch copy 0 only, so a caller that made rotating copies must
        get the graph path.
        """
        if estimates is None:
            estimates = [self.estimate_us(s) for s in subjects]
        use_graph = min(estimates) < GRAPH_THRESHOLD_US
        graphs: list[Any] = []
        launches: list[int] = []
        nodes: list[list[Node]] = []
        methods: list[str] = []
        for subject in subjects:
            if use_graph:
                launches.append(subject.copies)
                graphs.append(self.capture(subject))
                methods.append(GRAPH_METHOD.format(copies=subject.copies))
            else:
                nodes.append(self.nodes(subject, SAMPLES_PER_ROUND))
                methods.append(NODE_METHOD)
        samples: list[list[float]] = [[] for _ in subjects]
        deadline = time.perf_counter() + budget_s
        self.clock.start_block()
        while True:
            before = self.clock.read()
            if use_graph:
                new = self.graph_round(subjects, graphs, launches, SAMPLES_PER_ROUND)
            else:
                new = self.flushed_round(subjects, nodes)
            if self.clock.disturbed(before, self.clock.read()):
                continue  # taken while throttled or at another clock: take the round again
            for collected, fresh in zip(samples, new, strict=True):
                collected.extend(fresh)
            enough = converged(samples, target_rse)
            full = len(samples[0]) >= MAX_SAMPLES
            if enough or full or time.perf_counter() > deadline:
                break
        return [summarize(s, m) for s, m in zip(samples, methods, strict=True)]

    def per_call_mode(self, subjects: Sequence[Subject]) -> list[Measurement]:
        """The paper's protocol: warm-ups, then one event pair and a sync around every call."""
        for _ in range(PER_CALL_WARMUP):
            for subject in subjects:
                subject.prepare(0, self.stream)
                subject.launch(0, self.stream)
        samples: list[list[float]] = [[] for _ in subjects]
        self.clock.read()  # recorded for the report; the paper's protocol discards nothing
        for _ in range(PER_CALL_CALLS):
            for i, subject in enumerate(subjects):
                subject.prepare(0, self.stream)
                if subject.poison is not None:  # as in device mode: every call must compute
                    subject.poison(self.stream)
                self.stream.synchronize()
                start, end = self._event(), self._event()
                start.record(self.stream)
                subject.launch(0, self.stream)
                end.record(self.stream)
                end.synchronize()
                samples[i].append(self._cupy.cuda.get_elapsed_time(start, end) * 1000.0)
        self.clock.read()
        method = f"per-call ({PER_CALL_WARMUP} warm-up, {PER_CALL_CALLS} calls, host launch incl.)"
        return [summarize(s, method) for s in samples]

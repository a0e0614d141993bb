"""Torch-side tools for ``--verify`` and ``--gate``: the original op built from source, the
exported package imported, contract-shaped inputs, and CUDA-graph / eager timing.

Runs only where torch and a CUDA GPU are (imported by ``commands/export.py`` after it checked).

Timing follows docs/TIMING.md and the frameworks' own benches (field notes, section 8): a CUDA
graph of ``copies`` calls, each on its own copy of the inputs, so that the copies together
exceed :data:`L2_FLUSH_FACTOR` times the L2 cache and every call reads cold memory; the graph is
replayed, the time per call is the replay time over ``copies``, and the two sides alternate
replays so drift hits both alike. The speedup's standard error comes from the per-repeat
ratios, and ``astra_graph.harness.selection.call`` (the project's tie rule) says faster, slower
or tie.
"""

from __future__ import annotations

import importlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from astra_graph.export.framework import FrameworkOp
from astra_graph.export.original import original_build
from astra_graph.harness.cases import distinct_values, offsets_values
from astra_graph.harness.clock import MAX_REPEATS, ClockGuard, nvml_source
from astra_graph.harness.timing import L2Flush, alternating
from astra_graph.kernel import expr
from astra_graph.kernel.contract import OperationSpec

L2_FLUSH_FACTOR = 3
"""Input copies per graph cover this many L2 caches, so a copy is evicted before it is reused
(FlashInfer's bench rotates over more than the L2 for the same reason)."""
OFFSETS_SEED_RANGE = 2**62
"""Seeds of the host generator an offsets input is drawn with, taken from the torch generator
(``init.offsets_into``: the draw is :func:`~astra_graph.harness.cases.offsets_values`')."""
MAX_COPIES = 64
"""At most this many input copies per graph: decode shapes of a few KB would otherwise need
thousands, and 64 launches already make the graph's own overhead negligible."""
FLUSHED_SAMPLES = 41
"""Samples per side of :func:`flushed_us` (the median of 41 is known to about 1% for the spread
a flushed single launch shows on the H100)."""
HOLD_CYCLES = 40_000_000
"""GPU clock cycles a spin kernel holds the stream while :func:`flushed_us` enqueues a batch
(about 20 ms at the H100's 1.98 GHz; a batch of two sides takes the host a few ms). Without it
a host slower than the GPU lets the GPU wait for the launch between the events: at 427de8e on
the H100, with nvcc builds on the same CPU, merge 512x64x128 fp16 read 49 us against the
bench's 14.9 while its eager call took 246 us instead of about 75."""
HOLD_TRIES = 3
"""Batches taken, each holding twice as long as the one before, until one was enqueued while
the hold still ran; the last is kept either way, marked unproven."""
REPEATS = 21
"""Alternating replays per side; the median and the ratios' spread come from these."""
WARMUP_REPLAYS = 3
EAGER_CALLS = 100
"""Back-to-back eager calls per eager timing (the per-call host overhead is their mean)."""
HOST_CALLS = 1000
"""Calls whose host-side issue time gives the per-call host overhead (no synchronisation)."""


def load_original(spec: OperationSpec, framework: FrameworkOp, source: Path) -> Any:
    """Build the framework-style original, unmodified, as a torch extension (with a generated
    registration where the file registers no op: ``export.original``); its op."""
    from torch.utils.cpp_extension import load

    build = original_build(framework, spec.name, source)
    load(
        name=build.name,
        sources=[str(s) for s in build.sources],
        extra_cuda_cflags=["-O3"],
        extra_include_paths=[str(d) for d in build.include_dirs],
        is_python_module=False,
        verbose=False,
    )
    return getattr(getattr(torch.ops, build.namespace), build.op)


def load_package(package: Path) -> Any:
    """Import the exported package from its folder (a fresh import each time it is asked)."""
    sys.path.insert(0, str(package.parent))
    try:
        for name in [m for m in sys.modules if m.split(".")[0] == package.name]:
            del sys.modules[name]
        return importlib.import_module(package.name)
    finally:
        sys.path.remove(str(package.parent))


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def make_inputs(
    spec: OperationSpec, dims: dict[str, int], dtype: str, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Every contract argument, drawn as its ``init`` says (outputs filled with NaN so an
    unwritten element shows), on the GPU; never all zeros."""
    out: dict[str, torch.Tensor] = {}
    for arg in spec.contract.args:
        shape = spec.contract.shape_of(arg, dims)
        element = torch_dtype(spec.contract.dtype_of(arg, dtype).name)
        if arg.role == "output":
            out[arg.name] = torch.full(shape, float("nan"), dtype=element, device="cuda")
            continue
        init = arg.init
        if init.offsets_into is not None:  # drawn on the host, seeded from the generator
            seed = int(
                torch.randint(0, OFFSETS_SEED_RANGE, (1,), generator=generator, device="cuda")
            )
            end = expr.evaluate_int(init.offsets_into, dims)
            drawn = offsets_values(np, np.random.default_rng(seed), shape, end)
            out[arg.name] = torch.from_numpy(drawn).to(device="cuda", dtype=element)
            continue
        if init.distinct:  # row slots no two alike: drawn on the host, seeded from the generator
            seed = int(
                torch.randint(0, OFFSETS_SEED_RANGE, (1,), generator=generator, device="cuda")
            )
            drawn = distinct_values(arg, tuple(shape), np.random.default_rng(seed), dims)
            values = torch.from_numpy(drawn).to(device="cuda")
        elif init.dist == "normal":
            values = torch.randn(shape, generator=generator, device="cuda", dtype=torch.float32)
            values = values * init.scale + init.mean
        else:
            values = torch.rand(shape, generator=generator, device="cuda", dtype=torch.float32)
            values = values * (init.high_at(dims) - init.low) + init.low
        out[arg.name] = values.to(element)
    return out


def op_arguments(
    framework: FrameworkOp, spec: OperationSpec, tensors: dict[str, torch.Tensor]
) -> list[Any]:
    """The op's arguments in the framework's order: tensors, then parameters at defaults."""
    defaults = {s.name: s.default for s in spec.contract.scalars if s.default is not None}
    return [
        tensors[a.contract_name] if a.tensor else defaults[a.contract_name] for a in framework.args
    ]


def cloned(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in tensors.items()}


def mismatch(
    spec: OperationSpec, dtype: str, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]
) -> str | None:
    """The first written element outside the contract's tolerance, or None. -inf equals -inf,
    NaN equals NaN (both sides at the same positions)."""
    for arg in spec.contract.args:
        if not arg.written:
            continue
        tol = spec.contract.tolerance[spec.contract.dtype_of(arg, dtype).name]
        a, b = got[arg.name].double(), want[arg.name].double()
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        close = (a - b).abs() <= tol.atol + tol.rtol * b.abs()
        bad = ~(same | close)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            return f"{arg.name}{list(index)}: {float(a[index])} vs original {float(b[index])}"
    return None


def copies_for(bytes_per_call: int) -> int:
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(2, min(MAX_COPIES, math.ceil(L2_FLUSH_FACTOR * l2 / max(bytes_per_call, 1))))


def capture(calls: Sequence[Callable[[], Any]]) -> torch.cuda.CUDAGraph:
    """One CUDA graph running ``calls`` in order (warmed up on a side stream first)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph


def replay_us(graph: torch.cuda.CUDAGraph, per_replay: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / per_replay


def compare_graphs(
    graphs: dict[str, tuple[torch.cuda.CUDAGraph, int]],
) -> dict[str, Any]:
    """Alternate replays of each side's graph; median time per call for each and the speedup
    of the second side over the first (first / second) with its standard error."""
    for graph, _ in graphs.values():
        for _ in range(WARMUP_REPLAYS):
            graph.replay()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(REPEATS):
        for name, (graph, calls) in graphs.items():
            times[name].append(replay_us(graph, calls))
    first, second = list(graphs)
    ratios = [a / b for a, b in zip(times[first], times[second], strict=True)]
    err = statistics.stdev(ratios) / math.sqrt(len(ratios))
    return {
        **{f"{name}_us": statistics.median(values) for name, values in times.items()},
        "speedup": statistics.median(ratios),
        "speedup_err": err,
    }


@dataclass(frozen=True)
class Flushed:
    """:func:`flushed_us`'s result: the median time per call of each side, whether every kept
    sample was enqueued before the GPU reached it, and the clock guard's events."""

    us: dict[str, float]
    host_ahead: bool
    clock_events: list[str]
    sm_mhz: tuple[int, int] | None
    """The lowest and highest SM clock read around the batches (None: NVML unreadable), to set
    beside the run's bench's own (``BenchReport.clock``): the two run minutes apart."""


@cache
def _l2_flush(device: int) -> Callable[[], None]:
    """The bench's L2 flush (``harness.timing.L2Flush``, the same buffer and kernels) on the
    stream torch makes current at each call: the timing stream eagerly, the capturing one
    inside a graph's capture. One per device for the process: its buffer is a few times the
    L2, too large to allocate again for every measure."""
    import cupy

    flush = L2Flush(torch.cuda.get_device_properties(device).L2_cache_size)

    def on_current_stream() -> None:
        flush(cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))

    return on_current_stream


def _clock_range(guard: ClockGuard) -> tuple[int, int] | None:
    """The lowest and highest SM clock the guard read (None: NVML unreadable)."""
    return (min(guard.readings), max(guard.readings)) if guard.readings else None


def flushed_us(sides: dict[str, Callable[[], None]], calls: int = 1) -> Flushed:
    """The bench's device-mode sampling (``harness.timing``) for launches made by ``sides`` on
    the stream (each a graph's replay of ``calls`` calls): before every sample the bench's L2
    flush (``timing.L2Flush``), then a pair of stream events brackets the launch; the sides
    alternate A B B A; the median of :data:`FLUSHED_SAMPLES` per side, per call. With N calls it
    is the bench's graph of N copies; with a one-kernel graph it is that graph's own launch
    beside the bench's single-launch node (:func:`in_graph_us` takes the node itself).

    Two guards the bench has or needs, here where the export's host path is slower and shares
    the CPU with builds: the batch is enqueued while a spin kernel holds the stream
    (:data:`HOLD_CYCLES`), so no sample can contain the host's time, and a batch that outran
    the hold is taken again with a longer one (:data:`HOLD_TRIES`; ``host_ahead`` says whether
    the kept one was proven); and the SM clock is read around the batch (``harness.clock``), a
    batch taken while the GPU throttled or changed its clock taken again as the bench does."""
    import cupy

    device = torch.cuda.current_device()
    flush = _l2_flush(device)
    flush()  # warm-up: the flush's kernels load before any batch is held
    for launch in sides.values():
        launch()  # warm-up: the first replay of a graph uploads it
    guard = ClockGuard(nvml_source(cupy.cuda.Device(device).pci_bus_id))
    guard.start_block()
    spin: Callable[[int], None] | None = getattr(torch.cuda, "_sleep", None)  # torch's own
    hold, ahead = HOLD_CYCLES, False
    pairs: dict[str, list[tuple[Any, Any]]] = {}
    for _ in range(HOLD_TRIES + MAX_REPEATS):
        torch.cuda.synchronize()
        before = guard.read()
        if spin is not None:  # without it every batch stays unproven (host_ahead False)
            spin(hold)
        held = torch.cuda.Event()
        held.record()
        pairs = {name: [] for name in sides}
        for sample in range(FLUSHED_SAMPLES):
            for _, (name, launch) in alternating(list(sides.items()), sample):
                flush()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                launch()
                end.record()
                pairs[name].append((start, end))
        # the hold still spinning: everything was enqueued before the GPU reached it
        ahead = spin is not None and not held.query()
        torch.cuda.synchronize()
        if guard.disturbed(before, guard.read()):
            continue
        if ahead or hold >= HOLD_CYCLES << (HOLD_TRIES - 1):
            break
        hold *= 2
    return Flushed(
        us={
            name: statistics.median(a.elapsed_time(b) * 1e3 / calls for a, b in taken)
            for name, taken in pairs.items()
        },
        host_ahead=ahead,
        clock_events=list(guard.events),
        sm_mhz=_clock_range(guard),
    )


IN_GRAPH_PASSES = 3
"""Passes over :func:`in_graph_us`'s graphs whose samples are kept (one more warms them up);
with :data:`FLUSHED_SAMPLES` graphs, the median is over 123 launches."""


@dataclass(frozen=True)
class InGraph:
    """:func:`in_graph_us`'s result: per side, the median time of its call between its two
    event nodes; the undisturbed passes pooled (0: every one was disturbed, the last one's
    samples); the clock guard's events and SM clock range (as :class:`Flushed`)."""

    us: dict[str, float]
    passes: int
    clock_events: list[str]
    sm_mhz: tuple[int, int] | None


def between_samples(spec: OperationSpec, tensors: dict[str, torch.Tensor]) -> Callable[[], None]:
    """The bench's work on the stream before each sample (``harness.timing``, ``Subject``), as
    far as the export's tensors allow: in-place arguments given their inputs again (copies of
    their values now) and pure outputs overwritten with NaN, so every timed call starts from the
    same inputs and must write its outputs. The bench does a little more: it also copies every
    pure input from one of two input sets, and copies NaN patterns (a read and a write) where
    this fills."""
    saved = {a.name: tensors[a.name].clone() for a in spec.contract.args if a.role == "inout"}
    outputs = [tensors[a.name] for a in spec.contract.args if a.role == "output"]

    def restore_and_poison() -> None:
        for name, values in saved.items():
            tensors[name].copy_(values)
        for out in outputs:
            out.fill_(float("nan"))

    return restore_and_poison


def in_graph_us(sides: dict[str, Callable[[], None]], between: Callable[[], None]) -> InGraph:
    """The device time of each side's launch captured in a CUDA graph, by the bench's
    single-launch protocol (``harness.timing.NODE_METHOD``): per side, each of
    :data:`FLUSHED_SAMPLES` graphs holds one sample, the bench's L2 flush (with a value of its
    own), an event record node, the call, an event record node
    (``torch.cuda.Event(external=True)``: a record node, not a cross-stream dependency). The
    sides' graphs are replayed interleaved, A B B A as the bench alternates its subjects, each
    after ``between`` on the stream (:func:`between_samples`, as the bench restores and
    poisons). So with the exported op on one side and its kernel launched straight on the
    other (``verify``), both are taken the same way, at the same time, on the same buffers: what
    the export adds on the device, free of what differs between two processes. Neither pays
    the graph's own launch, which a one-kernel graph replayed between stream events adds
    (about 0.5 us on the H100; ``flushed_us`` of ``graph.replay`` measures that one).

    One graph per sample, not one graph of all samples: back to back in one graph the same
    kernels read 0.960-0.989 of their time by the bench's protocol on the H100
    (benchmarks/results/2026-11-26-h100/single-launch-protocols-decc8f8.json), which kept five
    merge shapes outside 2% of the bench at ad52cf7, fd736d9 and decc8f8.

    The samples of :data:`IN_GRAPH_PASSES` passes are pooled; a pass during which the SM
    clock throttled or changed is taken again, as the bench does (``harness.clock``), up to
    :data:`~astra_graph.harness.clock.MAX_REPEATS`."""
    import cupy

    device = torch.cuda.current_device()
    flush = _l2_flush(device)
    names = list(sides)
    pairs = {
        name: [
            (
                torch.cuda.Event(enable_timing=True, external=True),
                torch.cuda.Event(enable_timing=True, external=True),
            )
            for _ in range(FLUSHED_SAMPLES)
        ]
        for name in names
    }

    def sample(launch: Callable[[], None], start: Any, end: Any) -> None:
        flush()
        start.record()
        launch()
        end.record()

    graphs = {
        name: [capture([partial(sample, sides[name], start, end)]) for start, end in pairs[name]]
        for name in names
    }
    for side in graphs.values():
        for graph in side:
            graph.replay()  # the first replay uploads the graph
    torch.cuda.synchronize()
    guard = ClockGuard(nvml_source(cupy.cuda.Device(device).pci_bus_id))
    guard.start_block()
    kept: dict[str, list[float]] = {name: [] for name in names}
    last: dict[str, list[float]] = {}
    passes = 0
    for _ in range(IN_GRAPH_PASSES + MAX_REPEATS):
        before = guard.read()
        for j in range(FLUSHED_SAMPLES):
            for _, name in alternating(names, j):
                between()
                graphs[name][j].replay()
        torch.cuda.synchronize()
        last = {
            name: [start.elapsed_time(end) * 1e3 for start, end in pairs[name]] for name in names
        }
        if guard.disturbed(before, guard.read()):
            continue
        for name in names:
            kept[name].extend(last[name])
        passes += 1
        if passes == IN_GRAPH_PASSES:
            break
    del graphs
    return InGraph(  # every pass disturbed: the last one's, its clock events saying so
        us={name: statistics.median(kept[name] or last[name]) for name in names},
        passes=passes,
        clock_events=list(guard.events),
        sm_mhz=_clock_range(guard),
    )


def eager_us(call: Callable[[], Any]) -> float:
    """Mean device-and-host time of back-to-back eager calls (host overhead included)."""
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(EAGER_CALLS):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / EAGER_CALLS


def host_us(call: Callable[[], Any]) -> float:
    """Host time to issue one call (what the CPU spends per call, kernel time excluded as long
    as the GPU keeps up: the smallest shape is used)."""
    call()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(HOST_CALLS):
        call()
    spent = time.perf_counter() - started
    torch.cuda.synchronize()
    return spent * 1e6 / HOST_CALLS

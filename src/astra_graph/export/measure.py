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
from pathlib import Path
from typing import Any

import torch

from astra_graph.export.framework import FrameworkOp
from astra_graph.export.original import original_build
from astra_graph.harness.timing import MIN_FLUSH_BYTES
from astra_graph.kernel.contract import OperationSpec

L2_FLUSH_FACTOR = 3
"""Input copies per graph cover this many L2 caches, so a copy is evicted before it is reused
(FlashInfer's bench rotates over more than the L2 for the same reason)."""
MAX_COPIES = 64
"""At most this many input copies per graph: decode shapes of a few KB would otherwise need
thousands, and 64 launches already make the graph's own overhead negligible."""
FLUSHED_SAMPLES = 41
"""Samples of :func:`flushed_replay_us` (the median of 41 is known to about 1% for the spread a
flushed single launch shows on the H100)."""
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
        if init.dist == "normal":
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


def flushed_replay_us(graph: torch.cuda.CUDAGraph, calls: int = 1) -> float:
    """The bench's device-mode protocol (``harness.timing``) for a graph of ``calls`` calls: before
    every replay the L2 is flushed by writing a buffer of at least twice its size, then a pair of
    events brackets the replay; the median of :data:`FLUSHED_SAMPLES`, per call. With one call
    it is the bench's flushed single launch, with N its graph of N copies. The flush is still
    running when the replay is submitted, so the host's submission stays outside the events, as
    in the bench; a graph (not an eager call) keeps the export's Python launch path out of a
    device-time figure."""
    device = torch.cuda.current_device()
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    flush = torch.empty(max(2 * l2_bytes, MIN_FLUSH_BYTES), dtype=torch.uint8, device="cuda")
    graph.replay()  # warm-up: the first replay uploads the graph
    pairs = []
    for sample in range(FLUSHED_SAMPLES):
        flush.fill_(sample & 0x7F)  # a value that changes: no write is skipped as redundant
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 / calls for a, b in pairs)


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

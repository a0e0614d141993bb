"""The device's limits for a call: three floors, each named for what it measures.

A memory-bound call is bounded below by three times, and a profile must say which one a shape
is near and how far it is from each (:func:`limit_of`), because each points the agents at a
different fix:

* **Bandwidth roof.** The *achievable* bandwidth for the operation's own mix of bytes read and
  bytes written (a 2:1 mix such as silu_and_mul's moves more bytes per second than a 1:1 copy:
  on the H100 silu at 8192x12288 read 100.2% of the device-to-device copy's rate); the shape's
  bytes over it are its bandwidth floor. It is measured once per device and mix with
  :data:`MIX_COPY_SOURCE`, a minimal kernel that reads and writes exactly in that ratio over each
  of :data:`ROOF_SIZES` (the best median counts), and cached as JSON beside the compile cache
  (``<cache root>/copy_bandwidth.json``, one entry per GPU, the mixes under ``mix``). At a shape
  where the minimal kernel, timed in the same rounds as the kernels, moves more than that, its
  rate is the roof (:func:`shape_roof_gbps`). The plain device-to-device copy
  (:func:`copy_bandwidth_gbps`) is kept beside it for reference.
* **Same-bytes copy floor.** The time of that minimal kernel moving exactly the shape's bytes
  (one 16-byte vector written per thread, its reads issued before any use), timed by the same
  protocol and in the same rounds as the kernels (see :mod:`astra_graph.harness.bench`). It is
  what the best memory access can reach at this size: launch, one round trip to memory, the
  drain of the writes and the bytes themselves. A kernel far above it has a memory-access
  problem (narrow or uncoalesced accesses, too few loads in flight), whatever its size.
* **Launch-and-latency floor.** The time of an empty kernel launched with the copy floor's own
  grid, timed the same way (:class:`MinimalCopies` launches both): what a launch costs with no
  memory traffic at all. Only when the copy floor is close to it is a shape bound by launch
  overhead, and only then does fusing launches or shrinking the grid pay.

Before issue 25 the profile called the copy floor a "latency floor" and labelled a shape
"latency-bound" whenever that floor exceeded its bandwidth floor, so a shape 2.4x above the copy
floor at 26% of the roof (merge 512x32x256 from naive) read "latency-bound: 138% above the
latency floor", which sends a model toward launch overhead when the problem is memory access.

A time implying more than :data:`IMPOSSIBLE_MARGIN` times the roof is not a fast kernel but a
broken measurement or a kernel skipping work, and is flagged.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from astra_graph.harness.compile import cache_dir
from astra_graph.harness.results import GpuInfo, Measurement

if TYPE_CHECKING:
    from astra_graph.harness.timing import Subject
    from astra_graph.kernel.contract import Contract

IMPOSSIBLE_MARGIN = 1.2
"""Achieved bandwidth above this multiple of the roof is impossible. The roof is itself the best
of a minimal kernel, so a well-made kernel may beat it by a few percent, not by 20%."""
COPY_BYTES = 1 << 30
"""Size of each of the copy's two buffers."""
COPY_REPEATS = 10
CACHE_FILE = "copy_bandwidth.json"

ROOF_SIZES = (512 << 20, 1 << 30)
"""Bytes read plus written by one launch of the roof's mix measurement, all far beyond the L2;
the roof is the best of their medians. One size alone can fall short of what real kernels
reach: on the H100 (2026-11-23) the minimal kernel moved 2904 GB/s at 2 GiB in a 2:1 mix
while silu_and_mul at 8192 x 12288 (0.6 GB) moved 2970 GB/s."""
ROOF_REPEATS = 20
ROOF_SIGMAS = 2.0
"""A shape's roof from the minimal kernel takes its median this many standard errors fast."""
ROOF_LIFT_FLOOR = 0.95
"""...but never more than 5% fast: a noisy floor measurement (errors of 0.06-0.3% on the H100,
2026-11-24) must not inflate the roof."""
ROOF_WARMUP_S = 0.25
"""Seconds of untimed launches before a roof or copy measurement. The timed launches last only a
few milliseconds, inside the clocks' ramp on a GPU that was idle: on fresh H100 machines
(2026-11-24) the 2:1 roof measured without it came out 2932 GB/s in one run and 2798 in the
next, and silu_and_mul at 2048x14336 read 94% of one and 98% of the other."""
ROOF_METHOD = "minimal kernel after 0.25 s warm-up, best median of 512 MiB and 1 GiB"
"""Stored with each cached roof; an entry measured another way is measured again."""
VECTOR_BYTES = 16
"""The minimal kernel moves 16-byte vectors (one ``uint4`` load or store per access)."""
MAX_READS_PER_THREAD = 8
"""The minimal kernel's threads read at most this many vectors each (all issued before use)."""
FLOOR_BLOCK = 128
"""Threads per block of the minimal kernel."""
COPY_BOUND_FACTOR = 1.5
"""A shape is bound by its copy floor, not by bandwidth, when the copy floor exceeds this
multiple of its bandwidth floor (bytes over the roof): the minimal kernel itself then spends most
of its time on launch and round trips, not on moving bytes. On the H100 the two floors meet near
20 us (2026-11-23)."""
LAUNCH_BOUND_FACTOR = 1.25
"""...and by the launch-and-latency floor when, besides, the copy floor is within this multiple
of the empty kernel's time: moving the bytes then adds at most a quarter to a bare launch, so
memory access has little left to give. Field notes section 7: at decode sizes the framework
kernels and the copy sit at ~1.6-2.2 us per launch inside a CUDA graph; the bench script of
issue 25 prints both floors per shape on the H100 to confirm the boundary."""
AT_FLOOR_PCT = 10.0
"""A time within this many percent of a floor is "at" that floor."""

Bound = Literal["bandwidth", "copy", "launch"]
"""The floor a shape is near: the bandwidth roof, the same-bytes copy floor, the launch floor."""

MIX_COPY_SOURCE = r"""
__device__ __forceinline__ uint4 load_stream(const uint4* p, bool hint) {
    if (!hint) {
        return __ldg(p);
    }
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// the launch-and-latency floor: the copy's grid, no memory traffic
extern "C" __global__ void empty_launch() {}

extern "C" __global__ void mix_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                    unsigned n_read, unsigned n_write, unsigned threads) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= threads) {
        return;
    }
    const bool hint = gridDim.x <= STREAM_HINT_MAX_BLOCKS;
    uint4 v[READS];
#pragma unroll
    for (int j = 0; j < READS; ++j) {
        const unsigned i = t + j * threads;
        v[j] = i < n_read ? load_stream(src + i, hint) : make_uint4(0, 0, 0, 0);
    }
    uint4 acc = v[0];
#pragma unroll
    for (int j = 1; j < READS; ++j) {
        acc.x ^= v[j].x; acc.y ^= v[j].y; acc.z ^= v[j].z; acc.w ^= v[j].w;
    }
    if (t < n_write) {
        dst[t] = acc;
    } else if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u) {
        dst[n_write] = acc;  // a spare slot: a condition the data never meets keeps the loads
    }
}
"""
"""The minimal kernel: thread ``t`` reads vectors ``t, t + threads, ...`` (``READS`` of them, a
compile-time constant) and writes vector ``t``; every access coalesced, every read in flight
before the first use, 32-bit indices. Its loads use the same rule as the production kernels:
the L1::no_allocate streaming hint up to :data:`STREAM_HINT_MAX_BLOCKS` blocks, the plain
read-only path beyond (on the H100 the hint made the minimal kernel 2.18 instead of 2.23 us at
silu 16x4096's bytes, but 205.5 instead of 202.3 us at 8192x12288's)."""
STREAM_HINT_MAX_BLOCKS = 32768
MAX_VECTORS = 2**31
"""32-bit indices: the minimal kernel moves fewer vectors than this (32 GiB) each way."""


def achieved_gbps(bytes_moved: int, time_us: float) -> float:
    """Bytes per call over time per call, in GB/s (10^9 bytes per second)."""
    if time_us <= 0:
        return float("inf")
    return bytes_moved / (time_us * 1e-6) / 1e9


def roofline_pct(achieved: float, roof_gbps: float) -> float:
    return 100.0 * achieved / roof_gbps


def floor_us(bytes_moved: int, roof_gbps: float) -> float:
    """The shortest time the bytes can take at the roof's bandwidth."""
    return bytes_moved / (roof_gbps * 1e9) * 1e6


def shape_roof_gbps(roof_gbps: float, bytes_moved: int, floor: Measurement | None) -> float:
    """The achievable bandwidth at one shape: the device's cached roof for the mix, or what the
    minimal kernel moved at this very shape in the same timing rounds (at the fast end of its
    median's :data:`ROOF_SIGMAS`-error interval: a roof is an upper bound), whichever is higher.

    The cached roof is measured once per device; the minimal kernel's time at the shape itself is
    interleaved with the kernels, under the same clocks. On the H100 (2026-11-24, commit c23bbfa)
    the cached 2:1 roof was 2932 GB/s while the minimal kernel at silu 8192x12288 moved 2971 GB/s
    in the same rounds, and silu_and_mul's production kernel read 101-102% of the cached roof
    there; with the median alone it still read 100.06% in one run (f84ff0d). Only the minimal
    kernel can raise the roof, never a kernel under test, and the impossible-time rule keeps
    the cached roof (:func:`impossible`), so no measurement lifts what counts as impossible."""
    if floor is None or floor.median_us <= 0:
        return roof_gbps
    fastest_us = floor.median_us * max(1.0 - ROOF_SIGMAS * floor.rel_std_err, ROOF_LIFT_FLOOR)
    return max(roof_gbps, achieved_gbps(bytes_moved, fastest_us))


def impossible(achieved: float, roof_gbps: float, margin: float = IMPOSSIBLE_MARGIN) -> bool:
    return achieved > margin * roof_gbps


# --- what a call moves ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Bytes one call reads and writes: each input read once, each output written once, each
    in-place argument both."""

    read_bytes: int
    write_bytes: int

    @property
    def mix(self) -> str:
        """The read:write mix as the cache's key: reads per write to two decimals."""
        if self.write_bytes == 0:
            return "read-only"
        return f"{self.read_bytes / self.write_bytes:.2f}"

    @property
    def fits_minimal_kernel(self) -> bool:
        """Small enough for the minimal kernel's 32-bit indices."""
        n_read, n_write, _, _ = self.vectors
        return max(n_read, n_write) * MAX_READS_PER_THREAD < MAX_VECTORS

    @property
    def vectors(self) -> tuple[int, int, int, int]:
        """(vectors read, vectors written, threads, reads per thread) of the minimal kernel."""
        n_read = math.ceil(self.read_bytes / VECTOR_BYTES)
        n_write = math.ceil(self.write_bytes / VECTOR_BYTES)
        threads = max(n_write, math.ceil(n_read / MAX_READS_PER_THREAD), 1)
        return n_read, n_write, threads, math.ceil(n_read / threads)


def traffic(contract: Contract, dims: Mapping[str, int], dtype: str) -> Traffic:
    read = write = 0
    for arg in contract.args:
        nbytes = math.prod(contract.shape_of(arg, dims)) * contract.dtype_of(arg, dtype).itemsize
        if arg.role != "output":
            read += nbytes
        if arg.role != "input":
            write += nbytes
    return Traffic(read, write)


def scaled(mix: Traffic, total_bytes: int) -> Traffic:
    """The same read:write mix over ``total_bytes`` in all."""
    moved = mix.read_bytes + mix.write_bytes
    read = round(total_bytes * mix.read_bytes / moved) if moved else total_bytes
    return Traffic(read, total_bytes - read)


# --- which limit a shape is up against -----------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    bound: Bound
    pct: float
    """``bandwidth``: percent of the roof reached; ``copy`` / ``launch``: percent above that
    floor."""
    text: str


def at_floor(time_us: float, floor_us_: float) -> bool:
    return time_us <= (1.0 + AT_FLOOR_PCT / 100.0) * floor_us_


def _above(time_us: float, floor: float, name: str) -> str:
    """``at the NAME (F us, +P%)`` or ``R.RRx the NAME F us``."""
    if at_floor(time_us, floor):
        return f"at the {name} ({floor:.2f} us, {100.0 * (time_us / floor - 1.0):+.0f}%)"
    return f"{time_us / floor:.2f}x the {name} {floor:.2f} us"


COPY_FLOOR = "same-bytes copy floor"
LAUNCH_FLOOR = "launch floor"


def limit_of(
    time_us: float,
    bytes_moved: int,
    roof_gbps: float,
    copy_floor_us: float | None,
    launch_floor_us: float | None = None,
) -> Limit:
    """The floor a shape is near, and how far the time is from each floor measured.

    Bandwidth-bound while the copy floor is within :data:`COPY_BOUND_FACTOR` of the bytes over
    the roof (or unmeasured); else launch-bound when the copy floor is within
    :data:`LAUNCH_BOUND_FACTOR` of the empty kernel, else bound by the copy floor. The text leads
    with that floor and names the others, e.g. ``near the same-bytes copy floor: 2.40x the
    same-bytes copy floor 12.00 us; 26% of the bandwidth roof 3000 GB/s; 6.10x the launch floor
    4.70 us``.
    """
    achieved = roofline_pct(achieved_gbps(bytes_moved, time_us), roof_gbps)
    roof_text = f"{achieved:.0f}% of the bandwidth roof {roof_gbps:.0f} GB/s"
    copy_text = _above(time_us, copy_floor_us, COPY_FLOOR) if copy_floor_us else ""
    launch_text = _above(time_us, launch_floor_us, LAUNCH_FLOOR) if launch_floor_us else ""
    bandwidth_floor = floor_us(bytes_moved, roof_gbps)
    if not copy_floor_us or copy_floor_us < COPY_BOUND_FACTOR * bandwidth_floor:
        parts = [f"bandwidth-bound at {roof_text}", copy_text, launch_text]
        return Limit("bandwidth", achieved, "; ".join(p for p in parts if p))
    if launch_floor_us and copy_floor_us <= LAUNCH_BOUND_FACTOR * launch_floor_us:
        over = 100.0 * (time_us / launch_floor_us - 1.0)
        parts = [f"near the launch floor: {launch_text}", copy_text, roof_text]
        return Limit("launch", over, "; ".join(parts))
    over = 100.0 * (time_us / copy_floor_us - 1.0)
    parts = [f"near the {COPY_FLOOR}: {copy_text}", roof_text, launch_text]
    return Limit("copy", over, "; ".join(p for p in parts if p))


# --- the device: cache ---------------------------------------------------------------------------


def cache_path() -> Path:
    return cache_dir().parent / CACHE_FILE


def device_key() -> tuple[str, str]:
    """(a key unique to this physical GPU, its marketing name)."""
    import cupy

    device = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    uuid = props.get("uuid", b"")
    uuid_text = uuid.hex() if isinstance(uuid, bytes) else str(uuid)
    return f"{name}|{uuid_text or device.pci_bus_id}", name


def gpu_info() -> GpuInfo:
    """The current GPU's name, compute capability, SM count and L2 size."""
    import cupy

    device = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(device.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return GpuInfo(
        name=name,
        compute_capability=f"{props['major']}.{props['minor']}",
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
    )


def _read_table() -> dict[str, Any]:
    path = cache_path()
    if path.is_file():
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return table if isinstance(table, dict) else {}
    return {}


def _write_table(table: dict[str, Any]) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=2))
    tmp.replace(path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def copy_bandwidth_gbps(*, refresh: bool = False) -> tuple[float, bool]:
    """(copy bandwidth of the current GPU in GB/s, whether it came from the cache)."""
    key, name = device_key()
    table = _read_table()
    entry = table.get(key)
    if not refresh and isinstance(entry, dict) and entry.get("copy_gbps", 0) > 0:
        return float(entry["copy_gbps"]), True
    gbps = measure_copy_gbps()
    entry = entry if isinstance(entry, dict) else {}
    entry.update(device=name, copy_gbps=gbps, bytes=2 * COPY_BYTES, measured_at=_now())
    table[key] = entry
    _write_table(table)
    return gbps, False


def achievable_gbps(mix: Traffic, *, refresh: bool = False) -> tuple[float, bool]:
    """(achievable bandwidth of the current GPU for ``mix``'s read:write ratio, from the cache)."""
    key, name = device_key()
    table = _read_table()
    entry = table.get(key)
    entry = entry if isinstance(entry, dict) else {"device": name}
    mixes = entry.get("mix")
    mixes = mixes if isinstance(mixes, dict) else {}
    cached = mixes.get(mix.mix)
    fresh = isinstance(cached, dict) and cached.get("method") == ROOF_METHOD
    if not refresh and fresh and isinstance(cached, dict) and cached.get("gbps", 0) > 0:
        return float(cached["gbps"]), True
    gbps = max(measure_mix_gbps(mix, size) for size in ROOF_SIZES)
    mixes[mix.mix] = {"gbps": gbps, "method": ROOF_METHOD, "measured_at": _now()}
    entry["mix"] = mixes
    table = _read_table()  # measuring took a while: keep what others wrote meanwhile
    table[key] = {**(table.get(key) or {}), **entry}
    _write_table(table)
    return gbps, False


# --- the device: measurements --------------------------------------------------------------------


def measure_copy_gbps(nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> float:
    """Median bandwidth (read + write) of device-to-device copies of ``nbytes``."""
    import cupy

    src = cupy.empty(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    src.fill(1)
    stream = cupy.cuda.Stream(non_blocking=True)
    kind = cupy.cuda.runtime.memcpyDeviceToDevice

    def launch() -> None:
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream.ptr)

    return 2 * nbytes / _median_seconds(launch, stream, repeats) / 1e9


def _median_seconds(launch: Callable[[], None], stream: Any, repeats: int) -> float:
    """Median seconds of ``launch`` on ``stream`` (an event pair around each), timed after
    :data:`ROOF_WARMUP_S` of untimed launches (the first of them also pays for page mapping and
    module load)."""
    import cupy

    warm_until = time.perf_counter() + ROOF_WARMUP_S
    while time.perf_counter() < warm_until:
        launch()
        stream.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        launch()
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    times.sort()
    return times[len(times) // 2]


@cache
def _mix_module(reads: int) -> Any:
    import cupy

    options = (f"-DREADS={reads}", f"-DSTREAM_HINT_MAX_BLOCKS={STREAM_HINT_MAX_BLOCKS}")
    return cupy.RawModule(code=MIX_COPY_SOURCE, options=options)


class MinimalCopies:
    """``copies`` independent source/destination buffer pairs for the minimal kernel moving
    ``mix``'s bytes; :meth:`subject` makes it a timing subject like any implementation (the
    same-bytes copy floor), :meth:`launch_subject` the empty kernel on the same grid (the
    launch-and-latency floor), launched as many times per graph as the copies."""

    def __init__(self, mix: Traffic, copies: int = 1) -> None:
        import cupy

        self.mix = mix
        n_read, n_write, threads, reads = mix.vectors
        if not mix.fits_minimal_kernel:
            raise ValueError(f"the minimal kernel moves under {MAX_VECTORS} vectors each way")
        module = _mix_module(max(reads, 1))
        self.function = module.get_function("mix_copy")
        self.empty = module.get_function("empty_launch")
        self.grid = (math.ceil(threads / FLOOR_BLOCK),)
        self.block = (FLOOR_BLOCK,)
        rng = cupy.random.default_rng(0x5EED)
        self.buffers = []
        for _ in range(copies):
            # random bytes, never zeros: zeros can run faster than real data
            src = rng.integers(1, 2**31, size=max(n_read, 1) * 4, dtype=cupy.int32)
            dst = cupy.empty((n_write + 1) * 4, dtype=cupy.int32)
            self.buffers.append((src, dst))
        self.scalars = (cupy.uint32(n_read), cupy.uint32(n_write), cupy.uint32(threads))

    def launch(self, index: int, stream: Any) -> None:
        src, dst = self.buffers[index]
        self.function(self.grid, self.block, (src, dst, *self.scalars), stream=stream)

    def launch_empty(self, index: int, stream: Any) -> None:
        self.empty(self.grid, self.block, (), stream=stream)

    def subject(self, name: str = COPY_FLOOR) -> Subject:
        from astra_graph.harness.timing import Subject

        return Subject(name=name, launch=self.launch, copies=len(self.buffers))

    def launch_subject(self, name: str = LAUNCH_FLOOR) -> Subject:
        from astra_graph.harness.timing import Subject

        return Subject(name=name, launch=self.launch_empty, copies=len(self.buffers))


def measure_mix_gbps(mix: Traffic, total_bytes: int, repeats: int = ROOF_REPEATS) -> float:
    """Median bandwidth (read + write) of the minimal kernel moving ``total_bytes`` in ``mix``'s
    ratio."""
    import cupy

    large = scaled(mix, total_bytes)
    copies = MinimalCopies(large)
    stream = cupy.cuda.Stream(non_blocking=True)
    seconds = _median_seconds(lambda: copies.launch(0, stream), stream, repeats)
    return (large.read_bytes + large.write_bytes) / seconds / 1e9

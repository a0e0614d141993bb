"""The memory roofline: the fewest bytes a call must move over what the device can copy.

The ceiling is the device's measured copy bandwidth: a large device-to-device copy, counting
the bytes read plus the bytes written. It is measured once per device and cached as JSON beside
the compile cache (``<cache root>/copy_bandwidth.json``). A kernel cannot move its bytes much
faster than that: a time implying more than :data:`IMPOSSIBLE_MARGIN` times the copy bandwidth
is not a fast kernel but a broken measurement or a kernel skipping work, and is flagged.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from astra_graph.harness.compile import cache_dir
from astra_graph.models import GpuInfo

IMPOSSIBLE_MARGIN = 1.2
"""Achieved bandwidth above this multiple of the copy bandwidth is impossible. The copy itself
reaches ~90% of the HBM peak, so a well-made kernel may beat it by a few percent, not by 20%."""
COPY_BYTES = 1 << 30
"""Size of each of the copy's two buffers."""
COPY_REPEATS = 10
CACHE_FILE = "copy_bandwidth.json"


def achieved_gbps(bytes_moved: int, time_us: float) -> float:
    """Bytes per call over time per call, in GB/s (10^9 bytes per second)."""
    if time_us <= 0:
        return float("inf")
    return bytes_moved / (time_us * 1e-6) / 1e9


def roofline_pct(achieved: float, copy_gbps: float) -> float:
    return 100.0 * achieved / copy_gbps


def floor_us(bytes_moved: int, copy_gbps: float) -> float:
    """The shortest time the bytes can take at the copy bandwidth."""
    return bytes_moved / (copy_gbps * 1e9) * 1e6


def impossible(achieved: float, copy_gbps: float, margin: float = IMPOSSIBLE_MARGIN) -> bool:
    return achieved > margin * copy_gbps


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


def measure_copy_gbps(nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> float:
    """Median bandwidth (read + write) of device-to-device copies of ``nbytes``."""
    import cupy

    src = cupy.empty(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    src.fill(1)
    stream = cupy.cuda.Stream(non_blocking=True)
    kind = cupy.cuda.runtime.memcpyDeviceToDevice
    times = []
    for i in range(repeats + 1):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream.ptr)
        end.record(stream)
        end.synchronize()
        if i:  # the first copy pays for page mapping
            times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    del src, dst
    times.sort()
    return 2 * nbytes / times[len(times) // 2] / 1e9


def copy_bandwidth_gbps(*, refresh: bool = False) -> tuple[float, bool]:
    """(copy bandwidth of the current GPU in GB/s, whether it came from the cache)."""
    key, name = device_key()
    path = cache_path()
    table: dict[str, Any] = {}
    if path.is_file():
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            table = {}
    entry = table.get(key)
    if not refresh and isinstance(entry, dict) and entry.get("copy_gbps", 0) > 0:
        return float(entry["copy_gbps"]), True
    gbps = measure_copy_gbps()
    table[key] = {
        "device": name,
        "copy_gbps": gbps,
        "bytes": 2 * COPY_BYTES,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=2))
    tmp.replace(path)
    return gbps, False

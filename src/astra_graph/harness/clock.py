"""The GPU's SM clock around each timed block, so that timing notices a throttling machine.

A sample taken while the GPU throttles (power cap, thermal slowdown, a hardware slowdown) or
while its SM clock moves is a sample of another machine: nvbench, the benchmark harness of
CUDA's own libraries, discards such samples. The timing loop (``harness.timing.Timer``) reads
the clock here before and after every round of samples; :meth:`ClockGuard.disturbed` says
whether the round must be discarded and taken again (at most :data:`MAX_REPEATS` times per
timed block, after which the round is kept and the report says so), and
:meth:`ClockGuard.report` gives the clock range and every throttle event for the BenchReport.

The clock is read through NVML by ctypes on ``libnvidia-ml.so.1``, which the NVIDIA driver
always installs, so no Python package is needed (nvidia-ml-py wraps the same library). NVML
numbers devices physically, ignoring ``CUDA_VISIBLE_DEVICES``; the device is found by the PCI
bus id of the CUDA device the worker uses. Where NVML cannot be loaded or read (no driver, a
container without the library, a GPU NVML does not manage) the guard keeps every sample and
the report says, in one line, why the clock was not read.

Tests give a fake :class:`ClockSource`; nothing here imports CuPy.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Protocol

from astra_graph.harness.results import ClockReport

NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_CLOCK_SM = 1
"""``nvmlClockType_t``: NVML_CLOCK_SM."""
NVML_SUCCESS = 0

THROTTLE_REASONS: dict[int, str] = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
"""The ``nvmlClocksEventReasons`` bits that mean the GPU runs slower than it was set to (nvml.h).
Not in the list, as they are no throttling: GPU idle (0x1, set between launches), application
clocks setting (0x2), sync boost (0x10) and display clock setting (0x100)."""
THROTTLED = sum(THROTTLE_REASONS)

CLOCK_CHANGE_TOLERANCE = 0.02
"""A round whose SM clock after differs from before by more than this fraction is discarded.
The H100's SM clock moves in steps of about 15 MHz around 1980 MHz (under 1%); a change beyond
2% is a clock switch, not jitter. Not yet measured here: benchmarks/clock_guard.py records the
readings on the H100 so that this can be checked."""
MAX_REPEATS = 5
"""At most this many rounds of one timed block are discarded and taken again: a GPU that
throttles for good must still get a measurement, marked as taken while throttled."""


@dataclass(frozen=True)
class ClockReading:
    """One look at the GPU: its SM clock and the active throttle-reason bits."""

    sm_mhz: int
    reasons: int

    @property
    def throttled(self) -> list[str]:
        return [name for bit, name in THROTTLE_REASONS.items() if self.reasons & bit]


class ClockSource(Protocol):
    """Where readings come from: NVML on a GPU, a script in tests."""

    def read(self) -> ClockReading | None:
        """The current reading; None when it cannot be read right now."""
        ...


class Unreadable(Exception):
    """NVML cannot give this device's clock; the message says why, in one line."""


class NvmlClock:
    """NVML through ctypes, for the device on the given PCI bus (``0000:65:00.0``)."""

    def __init__(self, pci_bus_id: str) -> None:
        try:
            self._lib = ctypes.CDLL(NVML_LIBRARY)
        except OSError as exc:
            raise Unreadable(f"{NVML_LIBRARY} not found ({exc})") from None
        self._call("nvmlInit_v2")
        self._handle = ctypes.c_void_p()
        self._call(
            "nvmlDeviceGetHandleByPciBusId_v2", pci_bus_id.encode(), ctypes.byref(self._handle)
        )
        # the name since driver 535; the older name stays exported for older drivers
        self._reasons_name = next(
            name
            for name in (
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
            )
            if hasattr(self._lib, name)
        )
        if self.read() is None:
            raise Unreadable(f"NVML gives no SM clock for the GPU at {pci_bus_id}")

    def _call(self, name: str, *args: object) -> None:
        status = getattr(self._lib, name)(*args)
        if status != NVML_SUCCESS:
            self._lib.nvmlErrorString.restype = ctypes.c_char_p
            message = self._lib.nvmlErrorString(status).decode(errors="replace")
            raise Unreadable(f"NVML {name} failed: {message}")

    def read(self) -> ClockReading | None:
        mhz, reasons = ctypes.c_uint(), ctypes.c_ulonglong()
        try:
            self._call("nvmlDeviceGetClockInfo", self._handle, NVML_CLOCK_SM, ctypes.byref(mhz))
            self._call(self._reasons_name, self._handle, ctypes.byref(reasons))
        except Unreadable:
            return None
        return ClockReading(sm_mhz=mhz.value, reasons=reasons.value)


def nvml_source(pci_bus_id: str) -> ClockSource | str:
    """The NVML clock of that device, or one line saying why it cannot be read."""
    try:
        return NvmlClock(pci_bus_id)
    except Unreadable as exc:
        return str(exc)
    except (AttributeError, StopIteration):  # a library without the functions we call
        return f"{NVML_LIBRARY} lacks the clock functions (driver too old)"


@dataclass
class ClockGuard:
    """Readings around each timed round; what was discarded and why, for the BenchReport."""

    source: ClockSource | str
    """The clock, or why there is none."""
    readings: list[int] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    discarded: int = 0
    repeats_left: int = MAX_REPEATS

    def reset(self) -> None:
        """Start a new report (one per timing job)."""
        self.readings, self.events, self.discarded = [], [], 0

    def start_block(self) -> None:
        """A new timed block (one shape): its own budget of repeats."""
        self.repeats_left = MAX_REPEATS

    def read(self) -> ClockReading | None:
        if isinstance(self.source, str):
            return None
        reading = self.source.read()
        if reading is not None:
            self.readings.append(reading.sm_mhz)
        return reading

    def disturbed(self, before: ClockReading | None, after: ClockReading | None) -> bool:
        """Whether the round between these readings must be taken again: the GPU throttled
        at either end or its SM clock changed beyond :data:`CLOCK_CHANGE_TOLERANCE`. Every such
        round is an event in the report, whether or not repeats were left."""
        if before is None or after is None:
            return False
        reasons = sorted(set(before.throttled + after.throttled))
        changed = abs(after.sm_mhz - before.sm_mhz) > CLOCK_CHANGE_TOLERANCE * before.sm_mhz
        if not reasons and not changed:
            return False
        what = ", ".join(reasons) if reasons else "SM clock changed"
        clocks = f"{before.sm_mhz} -> {after.sm_mhz} MHz"
        if self.repeats_left <= 0:
            self.events.append(f"{what} ({clocks}): kept, no repeats left for this shape")
            return False
        self.repeats_left -= 1
        self.discarded += 1
        self.events.append(f"{what} ({clocks}): round discarded and taken again")
        return True

    def report(self) -> ClockReport:
        if isinstance(self.source, str):
            return ClockReport(readable=False, unreadable_because=self.source)
        return ClockReport(
            readable=bool(self.readings),
            unreadable_because=None if self.readings else "NVML gave no reading while timing",
            sm_mhz_min=min(self.readings, default=None),
            sm_mhz_max=max(self.readings, default=None),
            rounds_discarded=self.discarded,
            events=self.events,
        )

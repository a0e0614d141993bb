"""The clock guard of the timing loop (issue 26, item 3), with a scripted clock in place of
NVML: a round of samples taken while the GPU throttles or changes its SM clock is discarded and
taken again, a bounded number of times; every such event and the clock range reach the report;
an unreadable clock discards nothing and says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from astra_graph.harness import clock as clock_module
from astra_graph.harness.clock import (
    CLOCK_CHANGE_TOLERANCE,
    MAX_REPEATS,
    ClockGuard,
    ClockReading,
    nvml_source,
)
from astra_graph.harness.timing import MIN_SAMPLES, SAMPLES_PER_ROUND
from test_timing import _ScriptedTimer, _subject

NOMINAL_MHZ = 1980
THERMAL = 0x20
IDLE = 0x1


class ScriptedClock:
    """Readings in the order given (two per round: before, after), then the last one forever."""

    def __init__(self, readings: list[ClockReading]) -> None:
        self._readings: Iterator[ClockReading] = iter(readings)
        self._last = readings[-1]
        self.reads = 0

    def read(self) -> ClockReading | None:
        self.reads += 1
        self._last = next(self._readings, self._last)
        return self._last


STEADY = ClockReading(NOMINAL_MHZ, 0)


def _timer(readings: list[ClockReading]) -> _ScriptedTimer:
    timer = _ScriptedTimer({"base": 100.0, "cand": 50.0}, jitter=0.02)
    timer.clock = ClockGuard(ScriptedClock(readings))
    return timer


def test_a_throttled_round_is_discarded_and_taken_again() -> None:
    throttled = ClockReading(1500, THERMAL)
    timer = _timer([STEADY, STEADY, STEADY, throttled, STEADY, STEADY])
    base, cand = timer.device_mode([_subject("base"), _subject("cand")], budget_s=10.0)
    report = timer.clock.report()
    assert report.rounds_discarded == 1
    assert report.events == [
        "software thermal slowdown (1980 -> 1500 MHz): round discarded and taken again"
    ]
    assert (report.sm_mhz_min, report.sm_mhz_max) == (1500, NOMINAL_MHZ)
    rounds_run = len(timer.calls) // 2 // SAMPLES_PER_ROUND
    assert base.samples == cand.samples == (rounds_run - 1) * SAMPLES_PER_ROUND


def test_a_changed_clock_is_a_disturbance_and_idle_is_not() -> None:
    guard = ClockGuard(ScriptedClock([STEADY]))
    moved = int(NOMINAL_MHZ * (1 - 2 * CLOCK_CHANGE_TOLERANCE))
    assert guard.disturbed(STEADY, ClockReading(moved, 0))
    within = int(NOMINAL_MHZ * (1 - CLOCK_CHANGE_TOLERANCE / 2))
    assert not guard.disturbed(STEADY, ClockReading(within, IDLE))
    assert guard.discarded == 1 and "SM clock changed" in guard.events[0]


def test_repeats_are_bounded_and_a_throttled_gpu_still_gets_a_measurement() -> None:
    timer = _timer([ClockReading(1400, 0x4)])  # power-capped for good
    base, _ = timer.device_mode([_subject("base"), _subject("cand")], budget_s=10.0)
    report = timer.clock.report()
    assert report.rounds_discarded == MAX_REPEATS
    assert base.samples > 0
    assert any("kept, no repeats left" in e for e in report.events)
    assert all("software power cap" in e for e in report.events)


def test_an_unreadable_clock_discards_nothing_and_says_why() -> None:
    timer = _ScriptedTimer({"base": 100.0}, jitter=0.02)
    timer.clock = ClockGuard("libnvidia-ml.so.1 not found (no driver)")
    (base,) = timer.device_mode([_subject("base")], budget_s=10.0)
    report = timer.clock.report()
    assert not report.readable and report.unreadable_because == timer.clock.source
    assert report.rounds_discarded == 0 and base.samples >= MIN_SAMPLES


def test_nvml_missing_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock_module, "NVML_LIBRARY", "libnvidia-ml-absent.so.1")
    found = nvml_source("0000:00:00.0")
    assert isinstance(found, str) and "libnvidia-ml-absent.so.1 not found" in found
    assert "\n" not in found

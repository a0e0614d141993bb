"""The one selection rule, on both sides of each of its thresholds."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from astra_graph.harness import selection
from astra_graph.harness.selection import (
    TIE_SIGMAS,
    TIE_THRESHOLD,
    beats_baseline,
    best_of,
    call,
    final_pick,
    replaces_best,
)


@dataclass
class Timed:
    geomean_speedup: float
    geomean_speedup_err: float | None = None
    name: str = ""


def test_the_tie_threshold_is_the_measured_two_percent() -> None:
    assert TIE_THRESHOLD == 0.02 and TIE_SIGMAS == 2.0


@pytest.mark.parametrize(
    ("ratio", "err", "expected"),
    [
        (1 + TIE_THRESHOLD * 0.99, 0.0, "tie"),  # just inside the threshold
        (1 + TIE_THRESHOLD * 1.01, 0.0, "faster"),  # just outside it
        (1 - TIE_THRESHOLD * 0.99, 0.0, "tie"),
        (1 - TIE_THRESHOLD * 1.01, 0.0, "slower"),
        (1.05, 0.05 / TIE_SIGMAS * 1.01, "tie"),  # inside two standard errors
        (1.05, 0.05 / TIE_SIGMAS * 0.99, "faster"),
        (1.30, None, "faster"),
    ],
)
def test_call_on_both_sides_of_each_threshold(
    ratio: float, err: float | None, expected: str
) -> None:
    assert call(ratio, err) == expected


def test_beating_the_baseline_is_being_faster() -> None:
    assert beats_baseline(1.021, 0.0) and not beats_baseline(1.019, 0.0)
    assert not beats_baseline(None, None) and not beats_baseline(0.5, 0.0)


def test_the_best_so_far_is_replaced_only_by_something_faster_than_it() -> None:
    baseline = Timed(1.0)
    first = Timed(1.30, 0.001)
    assert replaces_best(first, baseline) and replaces_best(first, None)
    assert not replaces_best(Timed(1.30 * 1.019, 0.001), first)  # a tie with the best
    assert replaces_best(Timed(1.30 * 1.03, 0.001), first)
    assert not replaces_best(Timed(1.01), None)  # does not beat the baseline


def test_best_of_keeps_the_earlier_of_two_tied_contenders() -> None:
    a, b, c = Timed(1.20, name="a"), Timed(1.21, name="b"), Timed(1.10, name="c")
    assert best_of([a, b, c]) is a
    assert best_of([c, b, a]) is b  # b beats c by 10%, then a ties with b


def test_final_pick_asks_only_about_the_pick_and_falls_back_in_rule_order() -> None:
    a, b, c = Timed(1.2, name="a"), Timed(1.5, name="b"), Timed(1.35, name="c")
    asked: list[str] = []

    def passes(x: Timed) -> bool:
        asked.append(x.name)
        return x.name != "b"

    assert final_pick([a, b, c], passes) is c
    assert asked == ["b", "c"]
    assert final_pick([a, b], lambda x: False) is None
    assert final_pick([], lambda x: True) is None


def test_the_profiler_tuner_and_finalize_use_this_module() -> None:
    from astra_graph.harness import bench, tuning
    from astra_graph.loop import best, records
    from astra_graph.loop.agents import finalize, profiling
    from astra_graph.loop.agents import tuning as tuning_agent

    assert finalize.final_pick is selection.final_pick
    assert tuning.final_pick is selection.final_pick
    # the best so far is the rule over the records, computed in one place
    assert profiling.best_so_far is tuning_agent.best_so_far is best.best_so_far
    assert best.selection is selection and records.selection is selection
    assert bench.selection is selection

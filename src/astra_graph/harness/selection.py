"""The one selection rule: what counts as faster, a tie, the best so far, and the final pick.

Every speedup here is a ratio of times (baseline over candidate, > 1 is faster) with one standard
error. The profiler (a round's candidate against the baseline and the best so far), the tuner
(a setting against the default, and a dispatch table against the best so far) and finalize (the
result) all decide with these functions, so they cannot drift apart.

* **tie**: ``|ratio - 1| <= max(TIE_SIGMAS * error, TIE_THRESHOLD)``; otherwise ``faster`` or
  ``slower``. The threshold is measured (see :data:`TIE_THRESHOLD`), the sigma term covers noisy
  measurements beyond it.
* **beats the baseline**: the speedup over the baseline is ``faster``.
* **replaces the best so far**: beats the baseline *and* is ``faster`` than the best so far
  (the ratio of the two speedups, errors combined). A candidate within a tie of the best leaves
  the earlier one in place: it is not shown to be faster, and the earlier one has had more
  scrutiny.
* **a round's carried candidate**: of its accepted candidates, those faster than the baseline
  are contenders; the best of them by the rule above (in branch order) is carried forward.
* **final pick**: among contenders in the order they arrived, the best so far by the rule above;
  if it fails the final checks (held-out suite, sanitizer), it is set aside and the rule is
  applied again to the rest. With no contender left, the baseline stays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from astra_graph.harness.results import SpeedCall

TIE_SIGMAS = 2.0
"""A speedup within this many standard errors of 1 is a tie (about 95% confidence)."""
TIE_THRESHOLD = 0.02
"""A speedup within 2% of 1 is a tie however small the noise: timing a kernel against itself on
the H100 (2026-11-22, benchmarks/results/) gave per-shape ratios up to 1.020 with errors near
0.1%, a systematic difference between the two sides' buffers that the statistics cannot see."""


class Ranked(Protocol):
    """Anything with a geometric-mean speedup over the baseline and its standard error."""

    @property
    def geomean_speedup(self) -> float: ...

    @property
    def geomean_speedup_err(self) -> float | None: ...


R = TypeVar("R", bound=Ranked)
T = TypeVar("T")


def call(ratio: float, err: float | None) -> SpeedCall:
    """``faster``/``slower``, or ``tie`` when the difference from 1 is inside the noise."""
    if abs(ratio - 1.0) <= max(TIE_SIGMAS * (err or 0.0), TIE_THRESHOLD):
        return "tie"
    return "faster" if ratio > 1.0 else "slower"


def beats_baseline(speedup: float | None, err: float | None) -> bool:
    """The speedup over the baseline is ``faster`` (not a tie, not slower)."""
    return speedup is not None and speedup > 0 and call(speedup, err) == "faster"


def faster_than(candidate: Ranked, other: Ranked) -> bool:
    """``candidate``'s speedup is ``faster`` than ``other``'s (both over the same baseline)."""
    ratio = candidate.geomean_speedup / other.geomean_speedup
    err = ratio * math.hypot(
        (candidate.geomean_speedup_err or 0.0) / candidate.geomean_speedup,
        (other.geomean_speedup_err or 0.0) / other.geomean_speedup,
    )
    return call(ratio, err) == "faster"


def replaces_best(candidate: Ranked, best: Ranked | None) -> bool:
    """``candidate`` becomes the best so far: it beats the baseline and is faster than ``best``
    (None, or the baseline itself at speedup 1, is beaten by anything that beats the baseline)."""
    if not beats_baseline(candidate.geomean_speedup, candidate.geomean_speedup_err):
        return False
    return best is None or faster_than(candidate, best)


def best_of(contenders: Sequence[R]) -> R | None:
    """The best so far after seeing ``contenders`` in order (None if none beats the baseline)."""
    return best_by(contenders, lambda c: Speed(c.geomean_speedup, c.geomean_speedup_err))


class Speed(NamedTuple):
    """A speedup over the baseline with its standard error (satisfies :class:`Ranked`)."""

    geomean_speedup: float
    geomean_speedup_err: float | None


def best_by(items: Sequence[T], speed: Callable[[T], Speed | None]) -> T | None:
    """:func:`best_of` for items that carry their speedup elsewhere (``speed``; None: untimed):
    the best beyond the baseline, in order, the earlier kept on a tie."""
    best: tuple[T, Speed] | None = None
    for item in items:
        measured = speed(item)
        if measured is not None and replaces_best(measured, best[1] if best else None):
            best = (item, measured)
    return best[0] if best is not None else None


def prevailing(items: Sequence[T], speed: Callable[[T], Speed | None]) -> T | None:
    """The rule without the baseline: the first timed item, replaced only by a later one that is
    ``faster`` than it (so of tied items the earlier stays). For choosing among items none of
    which beats the baseline (which of a round's ties to sweep); None when none is timed."""
    best: tuple[T, Speed] | None = None
    for item in items:
        measured = speed(item)
        if measured is not None and (best is None or faster_than(measured, best[1])):
            best = (item, measured)
    return best[0] if best is not None else None


def final_pick(contenders: Sequence[R], passes: Callable[[R], bool]) -> R | None:
    """The best contender (in arrival order) that ``passes`` the final checks, or None.

    ``passes`` is called only on the contender the rule would pick, one at a time, so expensive
    checks run only where they can change the answer.
    """
    remaining = list(contenders)
    while (best := best_of(remaining)) is not None:
        if passes(best):
            return best
        remaining = [c for c in remaining if c is not best]
    return None

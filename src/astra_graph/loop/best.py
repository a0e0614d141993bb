"""What follows from the records: the contenders for the best implementation, the best so far
(the selection rule of :mod:`astra_graph.harness.selection` over them) and the best speedup after
each round. Computed from the records, never stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from astra_graph.harness import selection
from astra_graph.harness.results import BenchReport, TuningReport
from astra_graph.loop.records import RoundRecord, Tuned


class Best(BaseModel):
    """An implementation with its speedup over the baseline: a contender for the best so far
    (computed from the records, never stored); round 0 is the baseline."""

    round: int = 0
    path: str
    geomean_speedup: float = 1.0
    geomean_speedup_err: float | None = None
    bench: BenchReport | None = None
    dispatch: TuningReport | None = None
    """The per-bucket tunables this result is timed with (None: the header's defaults)."""

    def describe(self) -> str:
        who = "the baseline" if self.round == 0 else f"round {self.round}'s candidate"
        return who + (" with its per-bucket dispatch table" if self.dispatch is not None else "")


def tuned_contender(tuned: Tuned | None) -> list[Best]:
    """A sweep's dispatch table as a contender, if it beat the baseline."""
    if tuned is None or not tuned.faster or tuned.bench is None:
        return []
    return [
        Best(
            round=tuned.round,
            path=tuned.path,
            geomean_speedup=tuned.bench.geomean_speedup or 1.0,
            geomean_speedup_err=tuned.bench.geomean_speedup_err,
            bench=tuned.bench,
            dispatch=tuned.report,
        )
    ]


def candidate_contenders(record: RoundRecord) -> list[Best]:
    """A round's contenders (accepted and faster than the baseline), in branch order; the
    carried one's file is its copy in the round's folder, the others' their branch files."""
    carried = record.carried
    found = []
    for c in record.contenders:
        path = record.candidate_path if c is carried else c.candidate_path
        if path is None:
            continue
        found.append(
            Best(
                round=record.round,
                path=path,
                geomean_speedup=c.geomean_speedup or 1.0,
                geomean_speedup_err=c.geomean_speedup_err,
                bench=c.timed,
            )
        )
    return found


def contenders(rounds: Sequence[RoundRecord], baseline_tuning: Tuned | None = None) -> list[Best]:
    """Everything that beat the baseline, in the order it arrived: the baseline's dispatch
    table, then each round's contenders and its dispatch table (``selection`` chooses)."""
    found = tuned_contender(baseline_tuning)
    for record in rounds:
        found += candidate_contenders(record) + tuned_contender(record.tuning)
    return found


def best_so_far(
    kernel: str,
    baseline: BenchReport | None,
    rounds: Sequence[RoundRecord],
    baseline_tuning: Tuned | None = None,
) -> Best:
    """The best implementation after these rounds by the selection rule; the baseline (speedup
    1.0 with its header's defaults) when nothing beat it."""
    best = selection.best_of(contenders(rounds, baseline_tuning))
    return best if best is not None else Best(round=0, path=kernel, bench=baseline)


def best_speedups(
    kernel: str,
    baseline: BenchReport | None,
    rounds: Sequence[RoundRecord],
    baseline_tuning: Tuned | None = None,
) -> list[float]:
    """The best speedup so far once each round's candidate was timed (before its tuning)."""
    found = []
    for i, record in enumerate(rounds):
        before = [*rounds[:i], record.model_copy(update={"tuning": None})]
        found.append(best_so_far(kernel, baseline, before, baseline_tuning).geomean_speedup)
    return found

"""The one record of each round that every reader uses, and its reducer.

**Each fact once.** A round's :class:`RoundRecord` holds what happened in it: its candidates
(:class:`CandidateRecord`: the plan, each coding :class:`Attempt` with its verdict, the timing)
and its tuning (:class:`Tuned`). The nodes write into it as the round goes on; ``run.json``, the
round's files, the CLI table, the report and its plots all read it. Whatever follows from those
facts is computed, never stored: a candidate's verdict and speedup, the round's contenders and
the candidate it carries forward (the selection rule, :mod:`astra_graph.harness.selection`), and
the repair feedback. The computed fields a reader of ``run.json`` wants are ``computed_field`` s:
written to the file, ignored when read.

**Reducer.** :func:`merge_rounds` merges the per-round log by round and candidate, so the K
candidate branches of a round, running at once, each land in the round's record.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, computed_field

from astra_graph.harness import selection
from astra_graph.harness.results import BenchReport, TuningReport, Verdict
from astra_graph.loop.plans import Plan
from astra_graph.store.rundir import carried_copy


class Attempt(BaseModel):
    """One coding attempt: the code taken from the reply and what became of it."""

    number: int
    """1 for the first try, one more for each repair."""
    file: str | None = None
    """The code as the reply gave it (``attempt-<n>.cu``); None: no code came out of it."""
    problem: str | None = None
    """Why it was not compiled or checked: the reply's problem (no code, cut off, a diff that
    does not apply), a failed request, or the interface check's finding."""
    repair: str = ""
    """The reply pipeline's own repair prompt, when no code came out of the reply."""
    verdict: Verdict | None = None
    """interface_mismatch or compile_error before the check, else the check on the visible
    suites; None until checked."""

    @property
    def usable(self) -> bool:
        """Code that passed the interface check: it goes on to compile and check."""
        return self.file is not None and self.problem is None

    @property
    def feedback(self) -> str:
        """What the next attempt is told: the reply's repair prompt when no code came out (our
        own text), the interface or checker's finding otherwise, nothing after a failed request
        (the same request is made again) or an accepted attempt."""
        if self.file is None:
            return self.repair
        if self.verdict is not None and not self.verdict.accepted:
            return "\n".join(filter(None, [self.verdict.message, self.verdict.log]))
        return ""

    @property
    def note(self) -> str | None:
        """The attempt's line in the round's notes, when it failed."""
        if self.problem:
            return f"attempt {self.number}: {self.problem}"
        if self.verdict is not None and not self.verdict.accepted:
            return (
                f"attempt {self.number}: rejected ({self.verdict.reason}): {self.verdict.message}"
            )
        return None


class CandidateRecord(BaseModel):
    """One of a round's candidates: its plan, its coding attempts, its timing.

    Its verdict, speedup and notes are computed from those (and written to ``run.json``)."""

    branch: int = 1
    """1..K: which of the round's plans it implements."""
    plan: Plan | None = None
    path: str
    """Where its file is written once an attempt passes the interface check (``candidate.cu``)."""
    tries: list[Attempt] = []
    timing: BenchReport | None = None
    """The timing against the baseline; kept when it rejected the candidate (``rejection``)."""
    timing_error: Verdict | None = None
    """Why timing gave no report at all (the worker hung or died while timing it)."""
    finished: bool = False
    """The branch has ended: its candidate was timed, or there was nothing to time."""

    @property
    def last(self) -> Attempt | None:
        return self.tries[-1] if self.tries else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def attempts(self) -> int:
        """Coding attempts: 1 + repairs."""
        return len(self.tries)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def candidate_path(self) -> str | None:
        """The file that was checked (and timed), or None when the last attempt gave none."""
        return self.path if self.last is not None and self.last.usable else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> Verdict | None:
        """The last attempt's verdict, unless timing rejected the candidate: then the timing's
        rejection, with what the check covered."""
        checked = self.last.verdict if self.last is not None else None
        rejection = self.timing.rejection if self.timing is not None else self.timing_error
        if rejection is None or checked is None:
            return checked
        return rejection.model_copy(
            update={"cases_checked": checked.cases_checked, "suites": checked.suites}
        )

    @property
    def timed(self) -> BenchReport | None:
        """The timing that counts: of an accepted candidate, and not rejected by timing."""
        verdict = self.verdict
        accepted = verdict is not None and verdict.accepted
        return self.timing if accepted and self.timing is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def geomean_speedup(self) -> float | None:
        return self.timed.geomean_speedup if self.timed is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def geomean_speedup_err(self) -> float | None:
        return self.timed.geomean_speedup_err if self.timed is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def faster(self) -> bool:
        """Beat the baseline beyond the noise (the selection rule)."""
        return selection.beats_baseline(self.geomean_speedup, self.geomean_speedup_err)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def notes(self) -> list[str]:
        """What went wrong with each failed attempt."""
        return [note for attempt in self.tries if (note := attempt.note)]


class Tuned(BaseModel):
    """One tunable sweep: the implementation, its dispatch table and its timing with that table."""

    round: int
    """0: the baseline; k: round k's accepted candidate."""
    path: str
    report: TuningReport
    bench: BenchReport | None = None
    """The implementation with its dispatch table against the baseline's defaults; None when the
    table keeps the defaults everywhere (nothing to time) or timing rejected it."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def faster(self) -> bool:
        """The tuned implementation beat the baseline beyond the noise."""
        bench = self.bench
        return bench is not None and selection.beats_baseline(
            bench.geomean_speedup, bench.geomean_speedup_err
        )


def _speed(candidate: CandidateRecord) -> selection.Speed | None:
    """A candidate's speedup as the selection rule reads it; None when it has no timing."""
    speedup = candidate.geomean_speedup
    return None if speedup is None else selection.Speed(speedup, candidate.geomean_speedup_err)


class RoundRecord(BaseModel):
    """What one round did: its candidates (one, or K in a best-of-K round) and its tuning.

    The round's plan, attempts, verdict and speedup are those of the candidate it carries
    forward (:attr:`chosen`), computed, and written to ``run.json`` with the record."""

    round: int
    candidates: list[CandidateRecord] = []
    """Every candidate of the round, in plan order."""
    round_notes: list[str] = []
    """Notes about the round itself: a planner's reply that could not be used, shapes the
    single agent proposed that could not be read."""
    tuning: Tuned | None = None
    """The sweep of the carried candidate's tunables, when it was accepted and timed."""

    @property
    def contenders(self) -> list[CandidateRecord]:
        """The accepted candidates faster than the baseline beyond the noise, in branch order."""
        return [c for c in self.candidates if c.faster]

    @property
    def carried(self) -> CandidateRecord | None:
        """The candidate the round carries forward: the best contender by the selection rule;
        with no contender, the timed one the rule prefers among the ties and slower ones (its
        tunables are still swept), else the first (whose verdict says why nothing was timed)."""
        carried = selection.best_by(self.contenders, _speed) or selection.prevailing(
            self.candidates, _speed
        )
        return carried or (self.candidates[0] if self.candidates else None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def contender_branches(self) -> list[int]:
        """The branches of :attr:`contenders` (for run.json, the report and Studio)."""
        return [c.branch for c in self.contenders]

    @property
    def complete(self) -> bool:
        """Every candidate branch has ended (the round's tuning may still be to come)."""
        return bool(self.candidates) and all(c.finished for c in self.candidates)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def chosen(self) -> int | None:
        """The branch of the carried candidate; None: no candidate."""
        return self.carried.branch if self.carried is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def plan(self) -> Plan | None:
        return self.carried.plan if self.carried is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def attempts(self) -> int:
        return self.carried.attempts if self.carried is not None else 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def candidate_path(self) -> str | None:
        """The carried candidate's file; in a best-of-K round, its copy in the round's folder."""
        path = self.carried.candidate_path if self.carried is not None else None
        if path is None or len(self.candidates) == 1:
            return path
        return str(carried_copy(path))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> Verdict | None:
        return self.carried.verdict if self.carried is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def geomean_speedup(self) -> float | None:
        return self.carried.geomean_speedup if self.carried is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def geomean_speedup_err(self) -> float | None:
        return self.carried.geomean_speedup_err if self.carried is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def faster(self) -> bool:
        return self.carried is not None and self.carried.faster

    @computed_field  # type: ignore[prop-decorator]
    @property
    def notes(self) -> list[str]:
        """The round's own notes, then each candidate's (named when there are several)."""
        several = len(self.candidates) > 1
        found = [*self.round_notes]
        for c in self.candidates:  # once each: an earlier run.json's notes are round notes
            found += [
                note
                for n in c.notes
                if (note := f"candidate {c.branch}: {n}" if several else n) not in found
            ]
        return found

    def merged(self, update: RoundRecord) -> RoundRecord:
        """This record with a node's update: its candidates replace those of the same branch,
        its notes are added, its tuning is set."""
        by_branch = {c.branch: c for c in self.candidates}
        by_branch.update({c.branch: c for c in update.candidates})
        notes = [*self.round_notes, *(n for n in update.round_notes if n not in self.round_notes)]
        return RoundRecord(
            round=self.round,
            candidates=[by_branch[b] for b in sorted(by_branch)],
            round_notes=notes,
            tuning=update.tuning if update.tuning is not None else self.tuning,
        )


def merge_rounds(log: Sequence[RoundRecord], updates: Sequence[RoundRecord]) -> list[RoundRecord]:
    """The reducer of the per-round log: each update merges into its round's record (a new
    round is added). Merging is by round and branch, so the K branches of a best-of-K round,
    which finish at once and each send the round with its own candidate, all land, in any
    order, and a branch that also sends the earlier rounds unchanged changes nothing."""
    by_round = {r.round: r for r in log}
    for update in updates:
        known = by_round.get(update.round)
        by_round[update.round] = known.merged(update) if known is not None else update
    return [by_round[k] for k in sorted(by_round)]

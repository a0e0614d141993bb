"""The graph's state, and the one record of each round that every reader uses.

Everything here is a Pydantic model, so it checkpoints (SqliteSaver), serialises to
``run.json`` and validates what the LLM returns. The harness's models (``Verdict``,
``BenchReport``, ...) come from :mod:`astra_graph.models` and are reused as they are.

**Each fact once.** A round's :class:`RoundRecord` holds what happened in it: its candidates
(:class:`CandidateRecord`: the plan, each coding :class:`Attempt` with its verdict, the timing)
and its tuning. The nodes write into it as the round goes on; ``run.json``, the round's files,
the CLI table, the report and its plots all read it. Whatever follows from those facts is
computed, never stored: a candidate's verdict and speedup, the carried candidate, the current
round and attempt, the repair feedback, the best implementation so far (the selection rule over
the records, :func:`best_so_far`) and the best speedup after each round. The computed fields a
reader of ``run.json`` wants are ``computed_field`` s: written to the file, ignored when read.

**Reducers.** Every list the nodes add to has one: the per-round log merges by round and
candidate (:func:`merge_rounds`, so the K candidate branches of a round, running at once, each
land in the round's record), token usage adds up (``operator.add``).

**Schemas.** :class:`RunInput` is what a caller sets (``optimize()`` passes exactly these;
Studio's input form shows them); :class:`RunOutput` is what the graph hands back, the run's
:class:`OptimizationResult`; :class:`State` is everything the nodes share.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field, computed_field

from astra_graph import selection
from astra_graph.external import Exchange
from astra_graph.models import BenchReport, ShapeTiming, TuningReport, Verdict
from astra_graph.rundir import carried_copy
from astra_graph.usage import Usage

AgentMode = Literal["multi", "single", "offline"]
"""``offline``: no LLM; the contract's suites, the baseline profile, tuning and finalize."""
RunStatus = Literal["running", "waiting", "finished", "failed", "interrupted"]
"""``waiting``: stopped at an external agent's request until it is answered (``astra reply``);
``interrupted``: stopped by Ctrl-C or SIGTERM at ``stopped_at``, to be resumed there."""


class StoppedAt(BaseModel):
    """Where an interrupted run stopped: the node that was running (inside a candidate branch,
    ``candidate/<node>``), the round (0: before the first) and the candidate branch, if any."""

    node: str
    round: int = 0
    candidate: int | None = None
    signal: str = "SIGINT"

    def describe(self) -> str:
        branch = f", candidate {self.candidate}" if self.candidate is not None else ""
        return f"{self.node} (round {self.round}{branch}) on {self.signal}"


# --- what the LLM agents return (structured output) -------------------------------------------


class DimValue(BaseModel):
    """One dimension of a shape. A list of these (not a dict) keeps the JSON schema strict-safe."""

    name: str
    value: int


class ProposedShape(BaseModel):
    dims: list[DimValue] = Field(description="a value for every dim of the contract")
    why: str = Field(description="what this shape exercises: a real model size, or an edge")


class ShapeProposals(BaseModel):
    """The testing agent's reply."""

    shapes: list[ProposedShape]


class PlannedChange(BaseModel):
    change: str = Field(description="what to change in the code")
    why: str = Field(description="the evidence from the profile or the verdicts")
    expected_effect: str = Field(description="what should improve, and roughly by how much")


class Plan(BaseModel):
    """The planning agent's reply: ordered changes for the coding agent."""

    summary: str = Field(description="one line: the idea of this round")
    changes: list[PlannedChange]


class PlanSet(BaseModel):
    """The planning agent's reply in a best-of-K round: K distinct plans, one per candidate."""

    plans: list[Plan] = Field(description="distinct plans, each a different idea")


# --- the record of a round ---------------------------------------------------------------------


class TestSuite(BaseModel):
    """The testing agent's extra shapes; the agents also see the contract's tuning and edge
    suites (read from the contract, not copied here)."""

    __test__ = False  # not a pytest class

    extra: list[dict[str, int]] = []
    rejected: list[str] = []
    """Proposed shapes that were dropped, each with the reason."""
    problem: str | None = None
    """Why the testing agent's reply could not be used (LLM error, malformed reply), if so."""


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
    def carried(self) -> CandidateRecord | None:
        """The candidate the round carries forward: the fastest accepted and timed one, else
        the first (whose verdict then says why the round gained nothing)."""
        timed = [c for c in self.candidates if c.geomean_speedup is not None]
        if timed:
            return max(timed, key=lambda c: c.geomean_speedup or 0.0)
        return self.candidates[0] if self.candidates else None

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


# --- what follows from the records --------------------------------------------------------------


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


def candidate_contender(record: RoundRecord) -> list[Best]:
    """A round's carried candidate as a contender, if it was accepted and beat the baseline."""
    chosen = record.carried
    if chosen is None or not chosen.faster or record.candidate_path is None:
        return []
    return [
        Best(
            round=record.round,
            path=record.candidate_path,
            geomean_speedup=chosen.geomean_speedup or 1.0,
            geomean_speedup_err=chosen.geomean_speedup_err,
            bench=chosen.timed,
        )
    ]


def contenders(rounds: Sequence[RoundRecord], baseline_tuning: Tuned | None = None) -> list[Best]:
    """Everything that beat the baseline, in the order it arrived: the baseline's dispatch
    table, then each round's candidate and its dispatch table (``selection`` chooses)."""
    found = tuned_contender(baseline_tuning)
    for record in rounds:
        found += candidate_contender(record) + tuned_contender(record.tuning)
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


class OptimizationResult(BaseModel):
    """What a run produced; written to ``run.json`` after every node (see docs/RUNS.md)."""

    run_id: str
    run_dir: str
    op: str
    kernel: str
    status: RunStatus = "running"
    error: str | None = None
    stopped_at: StoppedAt | None = None
    """Where an ``interrupted`` run stopped (``--resume`` continues there)."""
    agents: AgentMode = "multi"
    models: dict[str, str] = {}
    rounds_requested: int
    candidates_per_round: int = 1
    rounds_completed: int = 0
    test_suite: TestSuite | None = None
    baseline: BenchReport | None = None
    baseline_tuning: Tuned | None = None
    """The sweep of the starting kernel's tunables (each round's is in its record)."""
    best_round: int = 0
    best_path: str
    best_source: str = ""
    improved: bool = False
    geomean_speedup: float = 1.0
    geomean_speedup_err: float | None = None
    shapes: list[ShapeTiming] = []
    heldout: Verdict | None = None
    dispatch: TuningReport | None = None
    """The winner's dispatch table (bucket -> tunables), also written as ``best.dispatch.json``."""
    message: str = ""
    rounds: list[RoundRecord] = []
    usage: list[Usage] = []
    external: list[Exchange] = []
    """Every request to an external agent and its answer (the files of ``external/``)."""
    total_tokens: int = 0
    total_cost_usd: float | None = 0.0
    started_at: str = ""
    updated_at: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def best_speedups(self) -> list[float]:
        """The best speedup so far after each round's candidate (``rounds`` order)."""
        return best_speedups(self.kernel, self.baseline, self.rounds, self.baseline_tuning)


# --- the graph's state --------------------------------------------------------------------------


class RunInput(BaseModel):
    """What a caller sets: the graph's input schema (Studio's input form).

    ``kernel`` is the starting implementation's path, ``run_dir`` where the round files go,
    ``rounds`` R, ``max_repairs`` per round, ``candidates`` K per round; ``agents``, ``models``
    and ``started_at`` are for the record. The held-out suite is not in the state and never
    reaches a prompt: the harness reads it from the contract when finalize checks the winner
    and when the tuner verifies a setting before it counts."""

    kernel: str
    run_dir: str
    rounds: int = Field(5, ge=0)
    max_repairs: int = Field(2, ge=0)
    candidates: int = Field(1, ge=1)
    """K: candidates per round, each from its own plan, verified and timed concurrently."""
    agents: AgentMode = "multi"
    models: dict[str, str] = {}
    """Model name per agent, for the record."""
    started_at: str = ""


class RunOutput(BaseModel):
    """What the graph hands back: the run's result, set by finalize (``run.json`` during the
    run is computed from the state by ``agents.finalize.result_from_state``)."""

    result: OptimizationResult | None = None


class State(RunInput, RunOutput):
    """The state every node reads; each node returns only the fields it changes."""

    suite: TestSuite | None = None
    baseline: BenchReport | None = None
    """The starting kernel timed on the tuning suite."""
    baseline_tuning: Tuned | None = None
    history: Annotated[list[RoundRecord], merge_rounds] = []
    """One record per round, written as the round goes (see :func:`merge_rounds`)."""
    usage: Annotated[list[Usage], operator.add] = []
    branch: int = 0
    """Inside a candidate branch: which plan (1..K); 0 outside one (the single-agent graph)."""

    @property
    def round(self) -> int:
        """The current round, 1-based; 0 before the first plan."""
        return self.history[-1].round if self.history else 0

    @property
    def completed_rounds(self) -> int:
        return sum(1 for r in self.history if r.complete)

    @property
    def current(self) -> RoundRecord | None:
        return self.history[-1] if self.history else None

    @property
    def work(self) -> CandidateRecord | None:
        """The candidate this branch works on (the round's only one outside a branch)."""
        if self.current is None:
            return None
        wanted = self.branch or 1
        return next((c for c in self.current.candidates if c.branch == wanted), None)

    @property
    def attempt(self) -> int:
        """Coding attempts of the current candidate so far."""
        return self.work.attempts if self.work is not None else 0

    @property
    def last_attempt(self) -> Attempt | None:
        return self.work.last if self.work is not None else None

    @property
    def verdict(self) -> Verdict | None:
        """The current candidate's verdict on the visible suites."""
        return self.work.verdict if self.work is not None else None

    @property
    def feedback(self) -> str:
        """What went wrong with the last attempt, for a repair."""
        return self.last_attempt.feedback if self.last_attempt is not None else ""

    @property
    def best(self) -> Best | None:
        """The best implementation so far (None before the baseline is timed)."""
        if self.baseline is None:
            return None
        return best_so_far(self.kernel, self.baseline, self.history, self.baseline_tuning)

    @property
    def tuned(self) -> list[Tuned]:
        """Every sweep so far: the baseline's, then each round's."""
        found = [self.baseline_tuning] + [r.tuning for r in self.history]
        return [t for t in found if t is not None]

    @property
    def branch_folder(self) -> int:
        """The folder number of this branch's files (``rundir.branch_dir``): 0, the round's own
        folder, unless the round has more than one candidate."""
        return self.branch if self.candidates > 1 else 0

    def with_candidate(
        self, candidate: CandidateRecord, notes: Sequence[str] = ()
    ) -> dict[str, list[RoundRecord]]:
        """The update that puts ``candidate`` (and ``notes`` about the round) into the current
        round's record."""
        record = RoundRecord(round=self.round, candidates=[candidate], round_notes=list(notes))
        return {"history": [record]}

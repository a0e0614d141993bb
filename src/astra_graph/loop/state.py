"""The graph's state and the run's result (``run.json``).

Everything here is a Pydantic model, so it checkpoints (SqliteSaver) and serialises to
``run.json``. The round records are :mod:`astra_graph.loop.records`, the agents' replies
:mod:`astra_graph.loop.plans`, the best so far :mod:`astra_graph.loop.best`; the harness's models
(``Verdict``, ``BenchReport``, ...) come from :mod:`astra_graph.harness.results` as they are.

**Reducers.** Every list the nodes add to has one: the per-round log merges by round and
candidate (:func:`~astra_graph.loop.records.merge_rounds`), token usage adds up
(``operator.add``).

**Schemas.** :class:`RunInput` is what a caller sets (``optimize()`` passes exactly these;
Studio's input form shows them); :class:`RunOutput` is what the graph hands back, the run's
:class:`OptimizationResult`; :class:`State` is everything the nodes share. What follows from the
state (the current round and attempt, the repair feedback, the best so far) is computed.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field, computed_field

from astra_graph.harness.results import BenchReport, ShapeTiming, TuningReport, Verdict
from astra_graph.llm.external import Exchange
from astra_graph.llm.usage import Usage
from astra_graph.loop.best import Best, best_so_far, best_speedups
from astra_graph.loop.plans import TestSuite
from astra_graph.loop.records import Attempt, CandidateRecord, RoundRecord, Tuned, merge_rounds

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

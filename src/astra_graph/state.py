"""The graph's shared state and the artifacts the agents pass each other.

Everything here is a Pydantic model, so it checkpoints (SqliteSaver), serialises to
``run.json`` and validates what the LLM returns. The harness's models (``Verdict``,
``BenchReport``, ...) come from :mod:`astra_graph.models` and are reused as they are.

Lists that grow during a run (the per-round log, token usage) use ``operator.add`` reducers:
a node returns only the new entries.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from astra_graph.external import Exchange
from astra_graph.models import BenchReport, ShapeTiming, TuningReport, Verdict

AgentName = Literal["testing", "planning", "coding", "single"]
AgentMode = Literal["multi", "single", "offline"]
"""``offline``: no LLM; the contract's suites, the baseline profile, tuning and finalize."""
RunStatus = Literal["running", "waiting", "finished", "failed"]
"""``waiting``: stopped at an external agent's request until it is answered (``astra reply``)."""


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


# --- artifacts the graph keeps ------------------------------------------------------------------


class TestSuite(BaseModel):
    """Shapes the agents may see: the contract's tuning suite plus the testing agent's extras."""

    __test__ = False  # not a pytest class

    tuning: list[dict[str, int]]
    extra: list[dict[str, int]] = []
    rejected: list[str] = []
    """Proposed shapes that were dropped, each with the reason."""
    problem: str | None = None
    """Why the testing agent's reply could not be used (LLM error, malformed reply), if so."""


class Candidate(BaseModel):
    """One coding attempt."""

    round: int
    attempt: int
    path: str
    source: str
    problem: str | None = None
    """Why it cannot be compiled or checked (no code in the reply, wrong interface), else None."""


class Usage(BaseModel):
    """Tokens and estimated cost of one agent's LLM calls in one round (round 0: before any)."""

    agent: AgentName
    round: int
    model: str
    calls: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    """None when the model's price is unknown."""
    requests: int = 1
    """HTTP requests behind these calls: a re-ask or a method refused by the server adds one."""
    method: str | None = None
    """The structured-output method the endpoint ended up with (json_schema, function_calling,
    json_mode, text); None for free-text calls."""
    failure: str | None = None
    """Why the call gave nothing usable (the server's error, or the reply's problem)."""
    failed_calls: int = 0
    notes: list[str] = []
    """How the call went: methods the server refused, re-asks."""


class CandidateRecord(BaseModel):
    """One of a round's K candidates: its plan, attempts, verdict and timing."""

    round: int
    branch: int
    """1..K: which of the round's plans it implements."""
    plan: Plan | None = None
    attempts: int = 0
    candidate_path: str | None = None
    verdict: Verdict | None = None
    geomean_speedup: float | None = None
    geomean_speedup_err: float | None = None
    faster: bool = False
    profile: str = ""
    notes: list[str] = []


class RoundRecord(BaseModel):
    """What one round did: the plan, the candidate, its verdict and timing.

    In a best-of-K round the top-level fields describe the candidate carried forward (the
    fastest accepted one, else the first) and ``candidates`` holds all K."""

    round: int
    plan: Plan | None = None
    attempts: int = 0
    """Coding attempts: 1 + repairs."""
    candidate_path: str | None = None
    verdict: Verdict | None = None
    geomean_speedup: float | None = None
    geomean_speedup_err: float | None = None
    faster: bool = False
    """Beat the baseline beyond the noise."""
    best_speedup: float = 1.0
    """Best geometric-mean speedup so far, after this round."""
    profile: str = ""
    """The profiling summary of this round's candidate (accepted candidates only)."""
    notes: list[str] = []
    candidates: list[CandidateRecord] = []
    """Every candidate of the round, in plan order (one in a round of one candidate)."""
    chosen: int | None = None
    """The branch whose candidate the top-level fields describe; None: no candidate."""


class Tuned(BaseModel):
    """One tunable sweep: the implementation, its dispatch table and its timing with that table."""

    round: int
    """0: the baseline; k: round k's accepted candidate."""
    path: str
    report: TuningReport
    bench: BenchReport | None = None
    """The implementation with its dispatch table against the baseline's defaults; None when the
    table keeps the defaults everywhere (nothing to time) or timing rejected it."""
    faster: bool = False
    """The tuned implementation beat the baseline beyond the noise."""


class Best(BaseModel):
    """The best implementation so far; round 0 is the baseline."""

    round: int = 0
    path: str
    geomean_speedup: float = 1.0
    geomean_speedup_err: float | None = None
    bench: BenchReport | None = None
    profile: str = ""
    """The profiling summary the planner reads for this implementation."""
    dispatch: TuningReport | None = None
    """The per-bucket tunables this result is timed with (None: the header's defaults)."""


class OptimizationResult(BaseModel):
    """What a run produced; written to ``run.json`` after every node (see docs/RUNS.md)."""

    run_id: str
    run_dir: str
    op: str
    kernel: str
    status: RunStatus = "running"
    error: str | None = None
    agents: AgentMode = "multi"
    models: dict[str, str] = {}
    rounds_requested: int
    candidates_per_round: int = 1
    rounds_completed: int = 0
    test_suite: TestSuite | None = None
    baseline: BenchReport | None = None
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
    tuning: list[Tuned] = []
    usage: list[Usage] = []
    external: list[Exchange] = []
    """Every request to an external agent and its answer (the files of ``external/``)."""
    total_tokens: int = 0
    total_cost_usd: float | None = 0.0
    started_at: str = ""
    updated_at: str = ""


# --- the graph's state --------------------------------------------------------------------------


class State(BaseModel):
    """The state every node reads; each node returns only the fields it changes.

    Inputs: ``kernel`` (the starting implementation's path), ``run_dir``, ``rounds`` (R),
    ``max_repairs`` and, for the record, ``agents``, ``models`` and ``started_at``. The held-out
    suite is not in here and never reaches a prompt: the harness reads it from the contract when
    finalize checks the winner and when the tuner verifies a setting before it counts.
    """

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

    suite: TestSuite | None = None
    baseline: BenchReport | None = None
    best: Best | None = None

    round: int = 0
    """The current round, 1-based; 0 before the first plan."""
    plan: Plan | None = None
    plans: list[Plan] = []
    """The round's K plans (best-of-K); ``plan`` is the one a branch implements."""
    branch: int = 0
    """Inside a candidate branch: which plan (1..K); 0 outside one."""
    candidate: Candidate | None = None
    attempt: int = 0
    """Coding attempts in the current round."""
    verdict: Verdict | None = None
    """The current candidate's verdict on the visible suites."""
    feedback: str = ""
    """What went wrong with the last attempt (compiler log, interface problem), for a repair."""
    round_notes: list[str] = []
    """Notes gathered during the current round; cleared by planning."""

    branches: Annotated[list[CandidateRecord], operator.add] = []
    """Every candidate branch's record, as the branches finish; the join reads its round's."""
    history: Annotated[list[RoundRecord], operator.add] = []
    tuned: Annotated[list[Tuned], operator.add] = []
    usage: Annotated[list[Usage], operator.add] = []
    result: OptimizationResult | None = None

    @property
    def branch_folder(self) -> int:
        """The folder number of this branch's files (``rundir.branch_dir``): 0, the round's own
        folder, unless the round has more than one candidate."""
        return self.branch if self.candidates > 1 else 0

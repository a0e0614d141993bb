"""Best-of-K rounds: K candidates per round, each in its own branch, and a join that keeps the best.

    planning --Send x K--> candidate [coding -> verify -> measure, repair edges] --> join

Where the K candidates come from: **K plans**, asked of the planner in one reply, one plan per
coding branch. Not K coder replies to one plan, because

* the point of K candidates is to test K hypotheses at once; replies to one prompt differ only
  by sampling, and reasoning models (o-series, gpt-5) take no temperature, so K replies to one
  plan tend to be K versions of the same change, costing K evaluations for one idea;
* the planner sees its K plans together, so it can make them differ on purpose (vector width
  vs. work per thread vs. block shape), and the next round's planner reads which idea won;
* one planning call instead of K keeps the planner's cost flat in K; the K coder calls are
  what runs in parallel, with the K evaluations.

Each branch (``candidate``, a subgraph, so Studio shows the branches and their repair edges)
runs on its own copy of the state with ``branch`` set and the round's record narrowed to its own
:class:`~astra_graph.loop.state.CandidateRecord`; it hands back the round's log and its token usage,
whose reducers merge the K (``state.merge_rounds`` by round and branch). The evaluations go
through the shared evaluator, which with a GPU pool runs them on idle GPUs at once. The branch
ends with the same ``measure`` step as a lone candidate (``agents/profiling.py``). The round's
record then carries the best contender forward by the selection rule (``RoundRecord.carried``:
of the accepted candidates faster than the baseline beyond the noise, the best), and
:func:`join` tells the round's outcome and copies the carried candidate's files into the
round's folder.
"""

from __future__ import annotations

import operator
import shutil
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel

from astra_graph.llm.usage import Usage
from astra_graph.loop.agents import coding, profiling, repair, testing
from astra_graph.loop.agents.common import emit
from astra_graph.loop.agents.profiling import round_outcome
from astra_graph.loop.context import Context
from astra_graph.loop.records import CandidateRecord, RoundRecord, merge_rounds
from astra_graph.loop.state import State
from astra_graph.store.rundir import BENCH, VERDICT, carried_copy, round_dir, write_model

BRANCH_NODE = "candidate"


class BranchOutput(BaseModel):
    """What a branch hands back to the round: the round's log with its candidate and its tokens,
    nothing else (the K branches run at once, so only fields with reducers may leave them)."""

    history: Annotated[list[RoundRecord], merge_rounds] = []
    usage: Annotated[list[Usage], operator.add] = []


def fan_out(state: State) -> list[Send]:
    """One branch per candidate of the round (one branch when K is 1)."""
    current = state.current
    assert current is not None
    return [
        Send(
            BRANCH_NODE,
            state.model_copy(
                update={
                    "branch": candidate.branch,
                    "history": [
                        *state.history[:-1],
                        current.model_copy(update={"candidates": [candidate]}),
                    ],
                    "usage": [],  # the branch hands back only its own usage
                }
            ),
        )
        for candidate in current.candidates
    ]


def _promote(state: State, record: CandidateRecord) -> None:
    """Put a best-of-K winner's files in the round's folder, where a reader of the run directory
    looks for the round's candidate: its file, and its verdict and timing from its record."""
    if record.candidate_path is None or state.candidates == 1:
        return
    target = round_dir(state.run_dir, state.round)
    shutil.copyfile(record.candidate_path, carried_copy(record.candidate_path))
    if record.verdict is not None:
        write_model(target / VERDICT, record.verdict)
    if record.timing is not None:
        write_model(target / BENCH, record.timing)


def join(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Tell the round's outcome once its K candidates have ended; the record carries the best."""
    current, best = state.current, state.best
    assert current is not None and best is not None
    chosen = current.carried
    if chosen is not None:
        _promote(state, chosen)
    accepted = sum(1 for c in current.candidates if c.verdict is not None and c.verdict.accepted)
    emit(
        runtime,
        agent="profiling",
        round=current.round,
        message=f"{len(current.candidates)} candidate(s), {accepted} accepted; "
        f"carried: {round_outcome(current)}",
        speedup=current.geomean_speedup,
        best=best.geomean_speedup,
    )
    return {}


def after_coding(state: State) -> Literal["verify", "coding", "measure"]:
    """Check a usable candidate; otherwise repair it while allowed, else end the branch."""
    if repair.written(state):
        return "verify"
    return "coding" if repair.can_repair(state) else "measure"


def after_verify(state: State) -> Literal["coding", "measure"]:
    """Repair a candidate that failed to compile or launch while allowed; else time it."""
    return "coding" if repair.failed_to_run(state) and repair.can_repair(state) else "measure"


_builder = StateGraph(State, context_schema=Context, output_schema=BranchOutput)
_builder.add_node("coding", coding.coding)
_builder.add_node("verify", testing.verify)
_builder.add_node("measure", profiling.measure)
_builder.add_edge(START, "coding")
_builder.add_conditional_edges("coding", after_coding)
_builder.add_conditional_edges("verify", after_verify)
_builder.add_edge("measure", END)
branch = _builder.compile(name=BRANCH_NODE)
"""One candidate: coding -> verify -> measure, with the repair edges back to coding."""

"""The Astra loop, the paper's Algorithm 1, as a LangGraph graph.

    T <- testing agent (contract, baseline)        testing
    P <- profile the baseline on T                 profile_baseline, tuning
    for r in 1..R:                                 route_round
        plans <- planning agent (P, the log)       planning
        for each plan, at once:                    candidate (subgraph, agents/candidates.py)
            code <- coding agent (plan)                coding   (repair edges back to it)
            test code on T                             verify
            profile code                               measure
        log the round, keep the best               join, tuning
    return the best, checked on held-out shapes    finalize

``tuning`` sweeps the tunables of the baseline and of each round's carried candidate per shape
bucket (no LLM). The paper's single-agent baseline is its own graph (:mod:`single_graph`);
:data:`offline` (no model endpoint) has no LLM node at all. Each graph is compiled once, here,
without a checkpointer (LangGraph Studio serves ``graph``); the runner compiles the same
builder with its SqliteSaver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph

from astra_graph.loop.agents import candidates, finalize, planning, profiling, testing, tuning
from astra_graph.loop.context import Context
from astra_graph.loop.state import RunInput, RunOutput, State

Builder = StateGraph[State, Context, RunInput, RunOutput]


def frame(testing_step: Callable[..., dict[str, Any]]) -> Builder:
    """What every mode shares: the test suite, the baseline's profile and tuning, and the final
    choice. It takes what a caller sets (:class:`RunInput`) and hands back the result."""
    builder = StateGraph(
        State, context_schema=Context, input_schema=RunInput, output_schema=RunOutput
    )
    builder.add_node("testing", testing_step)
    builder.add_node("profile_baseline", profiling.profile_baseline)
    builder.add_node("tuning", tuning.tuning)
    builder.add_node("finalize", finalize.finalize)
    builder.add_edge(START, "testing")
    builder.add_edge("testing", "profile_baseline")
    builder.add_edge("profile_baseline", "tuning")
    builder.add_edge("finalize", END)
    return builder


def rounds_left(state: State) -> bool:
    """The round cap: R rounds. A round is tuned after its candidates have ended, so every
    round opened is complete when this is asked."""
    return len(state.history) < state.rounds


def route_round(state: State) -> Literal["planning", "finalize"]:
    return "planning" if rounds_left(state) else "finalize"


def recursion_limit(rounds: int, max_repairs: int) -> int:
    """Enough graph steps for R rounds with every repair used, plus the fixed nodes."""
    per_round = 2 + 2 * (max_repairs + 1) + 2
    return 10 + rounds * per_round


_astra = frame(testing.testing)
_astra.add_node("planning", planning.planning)
_astra.add_node(candidates.BRANCH_NODE, candidates.branch)
_astra.add_node("join", candidates.join)
_astra.add_conditional_edges("tuning", route_round)
_astra.add_conditional_edges("planning", candidates.fan_out, [candidates.BRANCH_NODE])
_astra.add_edge(candidates.BRANCH_NODE, "join")
_astra.add_edge("join", "tuning")
graph = _astra.compile(name="astra")
"""The multi-agent graph (``--agents multi``)."""

_offline = frame(testing.contract_suite)
_offline.add_edge("tuning", "finalize")
offline = _offline.compile(name="astra-offline")
"""No LLM: the contract's suites, the baseline's profile, tuning and finalize (zero rounds)."""

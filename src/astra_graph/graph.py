"""The Astra loop as a LangGraph graph, built in one place.

    START -> testing -> profile_baseline -> tuning
          -> [planning -> candidate x K -> join -> tuning] x R -> finalize -> END

    candidate (one branch per plan, run at once, a subgraph):
          coding -> verify -> measure      (+ repair edges back to coding)

``tuning`` sweeps the tunables of the baseline and of each accepted candidate per shape bucket
(no LLM); the round cap is the conditional edge after it.

``planning`` fans out with LangGraph's ``Send``: one ``candidate`` branch per plan (K plans with
``--candidates K``, one by default); ``join`` records every candidate in the round and carries
the fastest accepted one forward (``agents/candidates.py``).

``coding`` and ``verify`` have a repair edge back to ``coding`` for failures that say nothing
about speed (no usable code, an interface that differs from the contract, compile and launch
errors), at most ``max_repairs`` times per round. A correctness failure ends the round (it is
logged, and the planner sees it next round). ``--agents single`` (one candidate per round)
replaces planning and the branches by the chain single -> verify -> profiling -> tuning, with the
same repair edges.
``offline`` (no model endpoint) has no LLM node at all: the contract's suites, the baseline's
profile, tuning and finalize.

``graph`` is the multi-agent graph compiled without a checkpointer, for LangGraph Studio;
``optimize()`` compiles its own with a SqliteSaver.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph

from astra_graph.agents import (
    candidates,
    finalize,
    planning,
    profiling,
    single,
    testing,
    tuning,
)
from astra_graph.context import Context
from astra_graph.state import AgentMode, RunInput, RunOutput, State

REPAIRABLE = frozenset({"compile_error", "launch_error", "interface_mismatch"})
"""Rejections that go back to the coding agent with the log instead of ending the round."""


def can_repair(state: State) -> bool:
    """Whether the round has a repair left: ``attempt`` counts the first try too."""
    return state.attempt - 1 < state.max_repairs


def route_after_coding(state: State) -> Literal["verify", "coding", "profiling"]:
    """Verify a usable candidate; otherwise repair while allowed, else log the round."""
    if state.last_attempt is not None and state.last_attempt.usable:
        return "verify"
    return "coding" if can_repair(state) else "profiling"


def route_after_verify(state: State) -> Literal["coding", "profiling"]:
    verdict = state.verdict
    failed_to_run = verdict is not None and not verdict.accepted and verdict.reason in REPAIRABLE
    return "coding" if failed_to_run and can_repair(state) else "profiling"


def route_after_tuning(state: State) -> Literal["planning", "finalize"]:
    """The round cap: another round until R rounds have been opened (a round is tuned after
    its candidates have ended, so every opened round is complete here)."""
    return "planning" if len(state.history) < state.rounds else "finalize"


def build_graph(agents: AgentMode = "multi") -> StateGraph[State, Context, RunInput, RunOutput]:
    """The uncompiled graph; ``agents="single"`` is the paper's single-agent baseline and
    ``agents="offline"`` the loop without any LLM (zero rounds). It takes what a caller sets
    (:class:`RunInput`) and hands back the run's result (:class:`RunOutput`)."""
    builder = StateGraph(
        State, context_schema=Context, input_schema=RunInput, output_schema=RunOutput
    )
    builder.add_node("testing", testing.testing if agents == "multi" else testing.contract_suite)
    builder.add_node("profile_baseline", profiling.profile_baseline)
    builder.add_node("tuning", tuning.tuning)
    builder.add_node("finalize", finalize.finalize)
    builder.add_edge(START, "testing")
    builder.add_edge("testing", "profile_baseline")
    builder.add_edge("profile_baseline", "tuning")
    builder.add_edge("finalize", END)
    if agents == "offline":
        builder.add_edge("tuning", "finalize")
        return builder

    if agents == "multi":
        builder.add_node("planning", planning.planning)
        builder.add_node(
            candidates.BRANCH_NODE,
            candidates.branch_graph(route_after_coding, route_after_verify),
        )
        builder.add_node("join", candidates.join)
        builder.add_conditional_edges(
            "tuning", route_after_tuning, {"planning": "planning", "finalize": "finalize"}
        )
        builder.add_conditional_edges("planning", candidates.fan_out, [candidates.BRANCH_NODE])
        builder.add_edge(candidates.BRANCH_NODE, "join")
        builder.add_edge("join", "tuning")
        return builder

    builder.add_node("single", single.single)
    builder.add_node("verify", testing.verify)
    builder.add_node("profiling", profiling.measure)
    builder.add_conditional_edges(
        "tuning", route_after_tuning, {"planning": "single", "finalize": "finalize"}
    )
    builder.add_conditional_edges(
        "single",
        route_after_coding,
        {"verify": "verify", "coding": "single", "profiling": "profiling"},
    )
    builder.add_conditional_edges(
        "verify", route_after_verify, {"coding": "single", "profiling": "profiling"}
    )
    builder.add_edge("profiling", "tuning")
    return builder


def recursion_limit(rounds: int, max_repairs: int) -> int:
    """Enough graph steps for R rounds with every repair used, plus the fixed nodes."""
    per_round = 2 + 2 * (max_repairs + 1) + 2
    return 10 + rounds * per_round


graph = build_graph().compile(name="astra")

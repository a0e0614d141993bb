"""The repair rule: which failed attempts go back to the agent that wrote them.

A failure that says nothing about speed (no usable code in the reply, an interface that differs
from the contract, compile and launch errors) goes back to the writing agent with the log, at
most ``max_repairs`` times per round. A correctness failure ends the candidate: it is recorded,
and the planner sees it next round. The candidate branch (the coding agent) and the
single-agent graph both route by these predicates, each with its own node names.
"""

from __future__ import annotations

from astra_graph.loop.state import State

REPAIRABLE = frozenset({"compile_error", "launch_error", "interface_mismatch"})
"""Rejections that go back to the writing agent with the log instead of ending the candidate."""


def can_repair(state: State) -> bool:
    """Whether the candidate has a repair left: ``attempt`` counts the first try too."""
    return state.attempt - 1 < state.max_repairs


def written(state: State) -> bool:
    """The last attempt gave a file that can be compiled and checked."""
    return state.last_attempt is not None and state.last_attempt.usable


def failed_to_run(state: State) -> bool:
    """The check rejected the candidate before its results could say anything."""
    verdict = state.verdict
    return verdict is not None and not verdict.accepted and verdict.reason in REPAIRABLE

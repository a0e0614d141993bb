"""What the CLI is told when a node of the graphs finishes: round, agent, verdict, best speedup.

The agents' own messages go out on the ``custom`` stream as they work (``agents.common.emit``);
these events follow each step of the graph once its state is saved. They name the nodes of
:mod:`astra_graph.loop.graph` and :mod:`astra_graph.loop.single_graph`, so they live beside them.
"""

from __future__ import annotations

from typing import Any

from astra_graph.loop.agents.candidates import BRANCH_NODE
from astra_graph.loop.state import State


def progress_event(node: str, state: State, update: Any = None) -> dict[str, Any]:
    """What the CLI shows when a node finishes: round, agent, verdict, best speedup so far.

    ``update`` is what the node returned: a candidate branch's is the round's log with its own
    candidate (the K branches of a round finish one by one, and the state holds them all)."""
    event: dict[str, Any] = {"event": "node_finished", "node": node, "round": state.round}
    if node in ("verify", "coding", "single") and state.verdict is not None:
        event["verdict"] = "accepted" if state.verdict.accepted else state.verdict.reason
    if node == BRANCH_NODE and isinstance(update, dict) and update.get("history"):
        (candidate,) = update["history"][-1].candidates
        event["branch"] = candidate.branch
        if candidate.verdict is not None:
            event["verdict"] = (
                "accepted" if candidate.verdict.accepted else candidate.verdict.reason
            )
        event["speedup"] = candidate.geomean_speedup
    if node in ("profiling", "join") and state.current is not None:
        event["speedup"] = state.current.geomean_speedup
    if state.best is not None:
        event["best_speedup"] = state.best.geomean_speedup
    if node == "finalize" and state.result is not None:
        event["message"] = state.result.message
    return event

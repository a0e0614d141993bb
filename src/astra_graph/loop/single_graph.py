"""The paper's single-agent baseline (Table 3) as its own graph, ``--agents single``.

    suite <- the contract's (no testing agent)      testing
    P <- profile the baseline                       profile_baseline, tuning
    for r in 1..R:                                  route_round
        code <- the one agent (tests, plan, code)       single   (repair edges back to it)
        test code; profile code                         verify, profiling
    return the best, checked on held-out shapes     finalize

One LLM call per attempt does the testing (extra shapes), the planning and the coding
(``agents/single.py``). Verification, profiling, tuning, the repair rule
(``agents/repair.py``) and the final choice are the multi-agent graph's, so the comparison
isolates the agents' division of labour. One candidate per round.
"""

from __future__ import annotations

from typing import Literal

from astra_graph.loop.agents import profiling, repair, single, testing
from astra_graph.loop.graph import frame, rounds_left
from astra_graph.loop.state import State


def route_round(state: State) -> Literal["single", "finalize"]:
    return "single" if rounds_left(state) else "finalize"


def after_single(state: State) -> Literal["verify", "single", "profiling"]:
    """Check a usable candidate; otherwise ask again while allowed, else log the round."""
    if repair.written(state):
        return "verify"
    return "single" if repair.can_repair(state) else "profiling"


def after_verify(state: State) -> Literal["single", "profiling"]:
    """Repair a candidate that failed to compile or launch while allowed; else time it."""
    return "single" if repair.failed_to_run(state) and repair.can_repair(state) else "profiling"


_single = frame(testing.contract_suite)
_single.add_node("single", single.single)
_single.add_node("verify", testing.verify)
_single.add_node("profiling", profiling.measure)
_single.add_conditional_edges("tuning", route_round)
_single.add_conditional_edges("single", after_single)
_single.add_conditional_edges("verify", after_verify)
_single.add_edge("profiling", "tuning")
graph = _single.compile(name="astra-single")

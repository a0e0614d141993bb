"""The planning agent: opens a round with an ordered, reasoned plan for the coding agent.

It reads the current best implementation, its profile and the log of earlier rounds. A reply
that cannot be used is recorded in the round's notes and the round goes on with an empty plan
(the coding agent then works from the profile alone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph import prompts
from astra_graph.agents.common import (
    context_of,
    contract_text,
    emit,
    history_text,
    load_baseline,
    system_prompt,
)
from astra_graph.agents.profiling import profile_for_prompt
from astra_graph.context import Context
from astra_graph.state import Plan, State


def new_round_fields(round_number: int) -> dict[str, Any]:
    """State fields reset at the start of a round."""
    return {
        "round": round_number,
        "attempt": 0,
        "candidate": None,
        "verdict": None,
        "feedback": "",
        "round_notes": [],
    }


def planning(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    assert state.best is not None
    spec, _ = load_baseline(state)
    k = state.round + 1
    emit(agent="planning", round=k, message="planning the round")
    best_source = Path(state.best.path).read_text()
    user = prompts.render(
        "planning",
        op=spec.name,
        summary=spec.contract.summary,
        contract=contract_text(spec),
        round=k,
        rounds=state.rounds,
        source=prompts.quote("The current best implementation", best_source, "cuda"),
        profile=profile_for_prompt(state.best.profile),
        history=history_text(state.history),
    )
    reply = (
        context_of(runtime)
        .get_llm()
        .ask_structured("planning", Plan, system_prompt("planning"), user)
    )
    update = new_round_fields(k)
    if reply.value is None:
        plan = Plan(summary="(no plan: the planner's reply was unusable)", changes=[])
        update["round_notes"] = [f"planning: {reply.problem}"]
    else:
        plan = reply.value
    emit(agent="planning", round=k, message=plan.summary)
    return {**update, "plan": plan, "usage": [reply.usage("planning", k)]}

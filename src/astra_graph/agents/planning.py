"""The planning agent: opens a round with an ordered, reasoned plan for the coding agent.

It reads the current best implementation and the kernel brief (reference, GPU, visible shapes,
profile, dispatch table, earlier rounds with their evidence). A reply that cannot be used even
after the re-ask is recorded, with the reason, in the round's notes, the usage record, and the
progress stream, and the round goes on with an empty plan (the coder works from the brief).
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
    kernel_brief,
    load_baseline,
    system_prompt,
)
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
        brief=kernel_brief(spec, state),
        source=prompts.quote("The current best implementation", best_source, "cuda"),
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
        emit(agent="planning", round=k, message=f"no plan: {reply.problem}", failure=reply.problem)
    else:
        plan = reply.value
        emit(agent="planning", round=k, message=plan.summary, method=reply.method)
    return {**update, "plan": plan, "usage": [reply.usage("planning", k)]}

"""The planning agent: opens a round with an ordered, reasoned plan for the coding agent.

It reads the current best implementation and the kernel brief (reference, GPU, visible shapes,
profile, dispatch table, earlier rounds with their evidence). A reply that cannot be used even
after the re-ask is recorded, with the reason, in the round's notes, the usage record, and the
progress stream, and the round goes on with an empty plan (the coder works from the brief).
In a best-of-K round (K > 1) it gives K distinct plans in one reply, one per candidate branch
(``agents/candidates.py`` says why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.llm import prompts
from astra_graph.loop.agents.common import (
    context_of,
    contract_text,
    emit,
    kernel_brief,
    load_baseline,
    new_candidate,
    system_prompt,
)
from astra_graph.loop.context import Context
from astra_graph.loop.plans import Plan, PlanSet
from astra_graph.loop.records import RoundRecord
from astra_graph.loop.state import State


def planning(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Open round k: its record with one candidate per plan (the branches fill them in)."""
    assert state.best is not None
    spec, _ = load_baseline(state)
    k = state.round + 1
    emit(runtime, agent="planning", round=k, message="planning the round")
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
    llm = context_of(runtime).get_llm()
    if state.candidates > 1:
        user += "\n\n" + prompts.render("alternatives", k=state.candidates)
        several = llm.ask_structured("planning", PlanSet, system_prompt("planning"), user)
        plans, problem = plans_for_round(several.value, several.problem, state.candidates)
        usage, method = several.usage("planning", k), several.method
    else:
        reply = llm.ask_structured("planning", Plan, system_prompt("planning"), user)
        plans = [reply.value] if reply.value is not None else [no_plan(reply.problem)]
        problem = f"planning: {reply.problem}" if reply.value is None else None
        usage, method = reply.usage("planning", k), reply.method
    if problem:
        emit(runtime, agent="planning", round=k, message=f"no plan: {problem}", failure=problem)
    else:
        emit(
            runtime,
            agent="planning",
            round=k,
            message=" | ".join(p.summary for p in plans),
            method=method,
        )
    record = RoundRecord(
        round=k,
        candidates=[new_candidate(state, k, i, plan) for i, plan in enumerate(plans, 1)],
        round_notes=[problem] if problem else [],
    )
    return {"history": [record], "usage": [usage]}


def no_plan(problem: str | None = None) -> Plan:
    """The empty plan of a round whose planner gave none, saying why in the reply's own words:
    a failed request (HTTP 429, a timeout) is not an unusable reply."""
    return Plan(summary=f"(no plan: {problem or 'the planner gave no plan'})", changes=[])


def plans_for_round(
    reply: PlanSet | None, problem: str | None, k: int
) -> tuple[list[Plan], str | None]:
    """Exactly K plans for a best-of-K round, and a note when the reply did not give K.

    Missing plans become empty ones (their coding branches work from the brief alone, as a
    round with an unusable plan does); extra plans are dropped."""
    given = list(reply.plans[:k]) if reply is not None else []
    note = None
    if reply is None:
        note = f"planning: {problem}"
    elif len(reply.plans) != k:
        note = f"planning: {len(reply.plans)} plans given, {k} asked for"
    return given + [no_plan(problem) for _ in range(k - len(given))], note

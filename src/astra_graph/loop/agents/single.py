"""The single-agent baseline of the paper's Table 3: one LLM call per attempt does the testing
(extra shapes), the planning and the coding. Verification, profiling and the final choice are
the same as in the multi-agent graph, so the comparison isolates the agents' division of labour.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.llm import prompts
from astra_graph.llm.replies import fenced_blocks
from astra_graph.loop.agents.coding import repair_text, take_candidate
from astra_graph.loop.agents.common import (
    MAX_EXTRA_SHAPES,
    check_shapes,
    context_of,
    contract_text,
    emit,
    kernel_brief,
    load_baseline,
    new_candidate,
    parameters_text,
    shapes_text,
    system_prompt,
)
from astra_graph.loop.context import Context
from astra_graph.loop.plans import Plan
from astra_graph.loop.records import RoundRecord, merge_rounds
from astra_graph.loop.state import State

PLAN_CHARS = 400


def proposed_shapes(reply: str) -> tuple[list[dict[str, Any]], str | None]:
    """Shapes from the reply's ```json blocks, and a problem if one could not be read."""
    shapes: list[dict[str, Any]] = []
    for language, body, _ in fenced_blocks(reply):
        if language != "json":
            continue
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            return shapes, f"shapes: invalid JSON ({exc.msg} at line {exc.lineno})"
        if not isinstance(data, list) or not all(isinstance(s, dict) for s in data):
            return shapes, "shapes: expected a JSON list of objects"
        shapes.extend(data)
    return shapes, None


def plan_from_prose(reply: str) -> Plan:
    """The reply's text before its first code block, as the round's plan summary."""
    prose = reply.split("```", 1)[0].split("~~~", 1)[0]
    summary = " ".join(prose.split())[:PLAN_CHARS]
    return Plan(summary=summary or "(no plan given)", changes=[])


def single(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """One attempt: opens a round (its plan is the reply's prose) unless repairing its candidate."""
    assert state.best is not None and state.suite is not None
    spec, baseline = load_baseline(state)
    current = state.current
    starts_round = current is None or current.complete
    now = state  # the state as the coding step sees it: with the round this call opens
    if starts_round:
        opened = RoundRecord(
            round=state.round + 1, candidates=[new_candidate(state, state.round + 1, 1, None)]
        )
        now = state.model_copy(update={"history": merge_rounds(state.history, [opened])})
    k = now.round
    emit(runtime, agent="single", round=k, message=f"writing attempt {now.attempt + 1}")
    user = prompts.render(
        "single",
        op=spec.name,
        summary=spec.contract.summary,
        contract=contract_text(spec),
        tuning=shapes_text(spec.contract.suite("tuning")),
        round=k,
        rounds=state.rounds,
        max_shapes=MAX_EXTRA_SHAPES,
        parameters=parameters_text(spec),
        dtypes=", ".join(spec.contract.dtypes),
        source=prompts.quote(
            "The current best implementation", Path(state.best.path).read_text(), "cuda"
        ),
        brief=kernel_brief(spec, state),
        repair=repair_text(now),
    )
    reply = context_of(runtime).get_llm().ask_text("single", system_prompt("single"), user)
    text = reply.value.text if reply.value else ""
    notes = []
    suite = state.suite
    work = now.work
    assert work is not None
    if text:
        shapes, problem = proposed_shapes(text)
        room = MAX_EXTRA_SHAPES - len(suite.extra)
        known = [*spec.contract.suite("tuning"), *suite.extra, *spec.contract.suite("edge")]
        extra, rejected = check_shapes(spec, baseline, shapes, known, limit=max(room, 0))
        suite = suite.model_copy(
            update={"extra": [*suite.extra, *extra], "rejected": [*suite.rejected, *rejected]}
        )
        if problem:
            notes.append(problem)
        if starts_round:
            work = work.model_copy(update={"plan": plan_from_prose(text)})
    elif starts_round:
        work = work.model_copy(update={"plan": Plan(summary="(no reply)", changes=[])})
    planned = merge_rounds(now.history, now.with_candidate(work)["history"])
    now = now.model_copy(update={"suite": suite, "history": planned})
    record = take_candidate(spec, now, reply.value, reply.problem, runtime)
    usage = [reply.usage("single", k)]
    return {**now.with_candidate(record, notes), "suite": suite, "usage": usage}

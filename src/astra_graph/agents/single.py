"""The single-agent baseline of the paper's Table 3: one LLM call per attempt does the testing
(extra shapes), the planning and the coding. Verification, profiling and the final choice are
the same as in the multi-agent graph, so the comparison isolates the agents' division of labour.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph import prompts
from astra_graph.agents.coding import repair_text, take_candidate
from astra_graph.agents.common import (
    MAX_EXTRA_SHAPES,
    check_shapes,
    context_of,
    contract_text,
    emit,
    kernel_brief,
    load_baseline,
    parameters_text,
    shapes_text,
    system_prompt,
)
from astra_graph.agents.planning import new_round_fields
from astra_graph.context import Context
from astra_graph.replies import fenced_blocks
from astra_graph.state import Plan, State

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
    assert state.best is not None and state.suite is not None
    spec, baseline = load_baseline(state)
    starts_round = state.round == 0 or (
        bool(state.history) and state.history[-1].round == state.round
    )
    update: dict[str, Any] = new_round_fields(state.round + 1) if starts_round else {}
    current = state.model_copy(update=update)
    k = current.round
    emit(agent="single", round=k, message=f"writing attempt {current.attempt + 1}")
    user = prompts.render(
        "single",
        op=spec.name,
        summary=spec.contract.summary,
        contract=contract_text(spec),
        tuning=shapes_text(state.suite.tuning),
        round=k,
        rounds=state.rounds,
        max_shapes=MAX_EXTRA_SHAPES,
        parameters=parameters_text(spec),
        dtypes=", ".join(spec.contract.dtypes),
        source=prompts.quote(
            "The current best implementation", Path(state.best.path).read_text(), "cuda"
        ),
        brief=kernel_brief(spec, state),
        repair=repair_text(current),
    )
    reply = context_of(runtime).get_llm().ask_text("single", system_prompt("single"), user)
    text = reply.value.text if reply.value else ""
    notes = list(current.round_notes)
    suite = state.suite
    if text:
        shapes, problem = proposed_shapes(text)
        room = MAX_EXTRA_SHAPES - len(suite.extra)
        known = [*suite.tuning, *suite.extra, *spec.contract.suite("edge")]
        extra, rejected = check_shapes(spec, baseline, shapes, known, limit=max(room, 0))
        suite = suite.model_copy(
            update={"extra": [*suite.extra, *extra], "rejected": [*suite.rejected, *rejected]}
        )
        if problem:
            notes.append(problem)
        if starts_round:
            update["plan"] = plan_from_prose(text)
    elif starts_round:
        update["plan"] = Plan(summary="(no reply)", changes=[])
    current = current.model_copy(update={"round_notes": notes, "suite": suite})
    candidate_update = take_candidate(spec, current, reply.value, reply.problem)
    return {**update, **candidate_update, "suite": suite, "usage": [reply.usage("single", k)]}

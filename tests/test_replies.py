"""The reply pipeline on plain strings: no model, no server (the path external answers take)."""

from __future__ import annotations

import json

import pytest

from astra_graph.llm.replies import (
    CodeReply,
    RawReply,
    ReplyProblem,
    apply_diff,
    read_code,
    read_structured,
    strip_thinking,
)
from astra_graph.loop.plans import Plan, ShapeProposals
from kernel_sources import VECTORIZED, fenced

PLAN = {"summary": "vectorize", "changes": [{"change": "a", "why": "b", "expected_effect": "c"}]}
PLAN_JSON = json.dumps(PLAN)


@pytest.mark.parametrize(
    "text",
    [
        PLAN_JSON,
        f"Here is the plan:\n```json\n{PLAN_JSON}\n```\nGood luck.",
        f"After reading the profile, my plan is {PLAN_JSON}. That is all.",
        f"<think>The roofline {{is low}}; [maybe] vectorize.</think>\n{PLAN_JSON}",
        f"The model's thinking ended here.</think>{PLAN_JSON}",
        f'{{"Plan": {PLAN_JSON}}}',
        f'{{"a": 1}} is not it; {PLAN_JSON} is.',
    ],
    ids=["bare", "fenced", "prose", "think", "lone-close", "wrapped", "second-object"],
)
def test_structured_json_is_found_wherever_the_model_put_it(text: str) -> None:
    assert read_structured(RawReply(text), Plan) == Plan.model_validate(PLAN)


def test_reasoning_content_is_searched_when_the_content_has_no_answer() -> None:
    reply = RawReply("", reasoning=f"Let me think. The answer: {PLAN_JSON}")
    assert read_structured(reply, Plan) == Plan.model_validate(PLAN)
    # an answer in the content wins over JSON-like text in the reasoning
    other = {**PLAN, "summary": "from content"}
    both = RawReply(json.dumps(other), reasoning=PLAN_JSON)
    parsed = read_structured(both, Plan)
    assert isinstance(parsed, Plan) and parsed.summary == "from content"


def test_a_bare_list_fills_a_schema_whose_only_field_is_a_list() -> None:
    parsed = read_structured(RawReply("[]"), ShapeProposals)
    assert parsed == ShapeProposals(shapes=[])


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (RawReply(""), "empty", "empty"),
        (RawReply("I would vectorize the loads."), "no_json", "no JSON Plan"),
        (RawReply('{"summary": "x", "changes": [}'), "invalid_json", "no valid JSON"),
        (RawReply('{"summary": 3}'), "invalid_schema", "changes: Field required"),
        (RawReply(PLAN_JSON[:30], finish_reason="length"), "truncated", "cut off"),
    ],
)
def test_unusable_replies_get_a_typed_problem_and_a_repair_prompt(
    reply: RawReply, kind: str, words: str
) -> None:
    problem = read_structured(reply, Plan)
    assert isinstance(problem, ReplyProblem)
    assert problem.kind == kind and words in problem.message
    assert problem.message in problem.repair and '"required"' in problem.repair  # the schema


def test_a_truncated_reply_whose_json_is_complete_is_used() -> None:
    reply = RawReply(f"{PLAN_JSON}\n\nIn more detail, the first change is", "length")
    assert read_structured(reply, Plan) == Plan.model_validate(PLAN)


def test_strip_thinking_drops_unfinished_thoughts() -> None:
    assert strip_thinking("<think>a</think>b<think>c") == "b"
    assert strip_thinking("no thoughts") == "no thoughts"


# --- code replies -------------------------------------------------------------------------------


def diff_of(old: str, new: str) -> str:
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), "a/kernel.cu", "b/kernel.cu", lineterm=""
    )
    return "\n".join(lines) + "\n"


CHANGED = VECTORIZED.replace("expf(-a)", "__expf(-a)")


def test_a_whole_file_is_taken_even_with_thinking_and_prose() -> None:
    code = read_code(RawReply("<think>use {braces}</think>" + fenced(VECTORIZED)))
    assert code == CodeReply(VECTORIZED)


def test_a_clean_diff_is_applied_to_the_source_it_was_made_against() -> None:
    reply = RawReply(f"Change the exponential:\n```diff\n{diff_of(VECTORIZED, CHANGED)}```\n")
    code = read_code(reply, ["unrelated source\n", VECTORIZED])
    assert code == CodeReply(CHANGED, from_diff=True)


def test_a_diff_without_line_numbers_or_fence_still_applies() -> None:
    bare = "@@ @@\n-            store(rs + j, a / (1.0f + expf(-a)) * as_float(us[j]));\n"
    bare += "+            store(rs + j, a / (1.0f + __expf(-a)) * as_float(us[j]));\n"
    assert read_code(RawReply(bare), [VECTORIZED]) == CodeReply(CHANGED, from_diff=True)


def test_a_diff_that_does_not_apply_asks_for_the_whole_file() -> None:
    stale = diff_of(VECTORIZED.replace("uint4 g", "uint4 gg"), CHANGED)
    problem = read_code(RawReply(f"```diff\n{stale}```"), [VECTORIZED])
    assert isinstance(problem, ReplyProblem) and problem.kind == "diff_failed"
    assert "WHOLE" in problem.repair


def test_a_truncated_file_is_never_taken_as_whole() -> None:
    cut = fenced(VECTORIZED)[: len(fenced(VECTORIZED)) // 2]
    problem = read_code(RawReply(cut, finish_reason="length"), [VECTORIZED])
    assert isinstance(problem, ReplyProblem) and problem.kind == "truncated"
    assert "output-token limit" in problem.repair
    # without the flag the same text passes for a file (an unclosed last fence): the flag decides
    assert isinstance(read_code(RawReply(cut)), CodeReply)
    # a file whose fence closed before the cut is complete
    closed = fenced(VECTORIZED) + "\n\nNow, in more detail, the loop"
    assert read_code(RawReply(closed, finish_reason="length")) == CodeReply(VECTORIZED)


def test_no_code_and_empty_replies() -> None:
    for text, kind in (("I would use wider loads.", "no_code"), ("  ", "empty")):
        problem = read_code(RawReply(text))
        assert isinstance(problem, ReplyProblem) and problem.kind == kind


def test_apply_diff_keeps_hunks_in_order_and_refuses_a_mismatch() -> None:
    source = "a\nb\nc\nd\ne\n"
    diff = "@@ -1,2 +1,2 @@\n a\n-b\n+B\n@@ -4,2 +4,2 @@\n d\n-e\n+E\n"
    assert apply_diff(source, diff) == "a\nB\nc\nd\nE\n"
    assert apply_diff(source, "@@ -1 +1 @@\n-x\n+y\n") is None

"""The state's records and reducers: one record per round, merged from every branch.

The K candidate branches of a best-of-K round run at once and each hands back the round with
its own candidate; the per-round log's reducer (``merge_rounds``) must keep every one of them,
in whichever order they finish. Checked through LangGraph itself: a ``Send`` fan-out of two
branches over the real ``State``, the real ``fan_out`` and the real reducer.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

from langgraph.graph import END, START, StateGraph

from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.usage import Usage
from astra_graph.loop.agents.candidates import fan_out
from astra_graph.loop.plans import Plan
from astra_graph.loop.records import Attempt, CandidateRecord, RoundRecord, merge_rounds
from astra_graph.loop.state import State

KERNEL = str(kernels_root() / "silu_and_mul" / "naive.cu")


def candidate(branch: int, **fields: Any) -> CandidateRecord:
    plan = Plan(summary=f"idea {branch}", changes=[])
    return CandidateRecord(branch=branch, plan=plan, path=f"{branch}.cu", **fields)


def opened_round(state: State) -> dict[str, Any]:
    """As planning does: round 1 with two candidates, nothing tried yet."""
    record = RoundRecord(round=1, candidates=[candidate(1), candidate(2)], round_notes=["note"])
    return {"history": [record]}


def branch(state: State) -> dict[str, Any]:
    """As a branch does: one attempt on its own candidate, finished; and its tokens."""
    work = state.work
    assert work is not None and [c.branch for c in state.history[-1].candidates] == [work.branch]
    tried = work.model_copy(
        update={"tries": [Attempt(number=1, file=f"{work.branch}.cu")], "finished": True}
    )
    usage = Usage(agent="coding", round=1, model="m", input_tokens=work.branch)
    return {**state.with_candidate(tried), "usage": [usage]}


def test_both_branches_of_a_fan_out_land_in_the_round_record() -> None:
    builder = StateGraph(State)
    builder.add_node("open", opened_round)
    builder.add_node("candidate", branch)
    builder.add_edge(START, "open")
    builder.add_conditional_edges("open", fan_out, ["candidate"])
    builder.add_edge("candidate", END)
    out = builder.compile().invoke(State(kernel=KERNEL, run_dir="/nonexistent", candidates=2))

    (record,) = out["history"]
    assert [c.branch for c in record.candidates] == [1, 2]
    assert all(c.finished and c.attempts == 1 for c in record.candidates)
    assert [c.plan.summary for c in record.candidates if c.plan] == ["idea 1", "idea 2"]
    assert record.round_notes == ["note"] and record.complete
    assert sorted(u.input_tokens for u in out["usage"]) == [1, 2]  # each branch's tokens once


def test_merging_is_by_round_and_branch_in_any_order() -> None:
    opened = [RoundRecord(round=1, candidates=[candidate(1), candidate(2), candidate(3)])]
    updates = [
        RoundRecord(round=1, candidates=[candidate(b, finished=True)], round_notes=[f"n{b}"])
        for b in (1, 2, 3)
    ]
    results = set()
    for order in permutations(updates):
        log = opened
        for update in order:
            log = merge_rounds(log, [update])
        (merged,) = log
        assert [c.branch for c in merged.candidates] == [1, 2, 3] and merged.complete
        results.add(tuple(sorted(merged.round_notes)))
    assert results == {("n1", "n2", "n3")}
    # an update that repeats the earlier rounds unchanged changes nothing; a new round is added
    again = merge_rounds(log, [*log, RoundRecord(round=2)])
    assert again[0] == log[0] and [r.round for r in again] == [1, 2]

"""Best-of-K rounds: K candidates per round, each in its own branch, and a join that keeps the best.

    planning --Send x K--> candidate [coding -> verify -> measure, repair edges] --> join

Where the K candidates come from: **K plans**, asked of the planner in one reply, one plan per
coding branch. Not K coder replies to one plan, because

* the point of K candidates is to test K hypotheses at once; replies to one prompt differ only
  by sampling, and reasoning models (o-series, gpt-5) take no temperature, so K replies to one
  plan tend to be K versions of the same change, costing K evaluations for one idea;
* the planner sees its K plans together, so it can make them differ on purpose (vector width
  vs. work per thread vs. block shape), and the next round's planner reads which idea won;
* one planning call instead of K keeps the planner's cost flat in K; the K coder calls are
  what runs in parallel, with the K evaluations.

Each branch (``candidate``, a subgraph, so Studio shows the branches and their repair edges)
runs on its own copy of the state with ``branch`` and ``plan`` set; its only outputs are its
:class:`~astra_graph.state.CandidateRecord` and its token usage (reducers merge the K). The
evaluations go through the shared evaluator, which with a GPU pool runs them on idle GPUs at
once. :func:`join` then records all K in the round and carries the fastest accepted candidate
forward with the same rule ``profiling`` applies to a lone candidate.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel

from astra_graph.agents import coding, testing
from astra_graph.agents.common import context_of, emit, load_baseline
from astra_graph.agents.profiling import beats_baseline, round_outcome, summarize, time_candidate
from astra_graph.context import Context
from astra_graph.models import BenchReport
from astra_graph.rundir import BENCH, CANDIDATE, VERDICT, branch_dir, round_dir, write_model
from astra_graph.state import Best, CandidateRecord, Plan, RoundRecord, State, Usage

BRANCH_NODE = "candidate"


class BranchOutput(BaseModel):
    """What a branch hands back to the round: its record and its tokens, nothing else (the K
    branches run at once, so only fields with reducers may leave them)."""

    branches: list[CandidateRecord] = []
    usage: list[Usage] = []


def fan_out(state: State) -> list[Send]:
    """One branch per plan of the round (one branch when K is 1)."""
    plans: list[Plan | None] = [*state.plans] or [state.plan]  # K = 1: the one plan, or None
    return [
        Send(
            BRANCH_NODE,
            state.model_copy(
                update={"branch": i, "plan": plan, "branches": [], "usage": [], "history": []}
            ),
        )
        for i, plan in enumerate(plans, 1)
    ]


def measure(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The branch's last step: time its candidate if it was accepted, and record it."""
    assert state.suite is not None
    k, i = state.round, state.branch
    candidate = state.candidate if state.candidate and state.candidate.problem is None else None
    record = CandidateRecord(
        round=k,
        branch=i,
        plan=state.plan,
        attempts=state.attempt,
        candidate_path=candidate.path if candidate else None,
        verdict=state.verdict,
        notes=state.round_notes,
    )
    if candidate and state.verdict and state.verdict.accepted:
        spec, _ = load_baseline(state)
        emit(agent="profiling", round=k, message=f"timing candidate {i} against the baseline")
        bench, rejection = time_candidate(spec, state, Path(candidate.path), context_of(runtime))
        if rejection is not None:
            record.verdict = rejection.model_copy(
                update={
                    "cases_checked": state.verdict.cases_checked,
                    "suites": state.verdict.suites,
                }
            )
            # the candidate's verdict file says what its record says: rejected by timing
            write_model(branch_dir(state.run_dir, k, state.branch_folder) / VERDICT, record.verdict)
        if bench is not None:  # kept as evidence, even when timing rejected the candidate
            write_model(branch_dir(state.run_dir, k, state.branch_folder) / BENCH, bench)
        if bench is not None and rejection is None:
            record.geomean_speedup = bench.geomean_speedup
            record.geomean_speedup_err = bench.geomean_speedup_err
            record.profile = summarize(bench, f"Profile of round {k}'s candidate {i}")
            record.faster = beats_baseline(bench)
    return {"branches": [record]}


def carried(records: list[CandidateRecord]) -> CandidateRecord | None:
    """The candidate a round carries forward: the fastest accepted and timed one, else the
    first (whose verdict then says why the round gained nothing)."""
    timed = [
        r
        for r in records
        if r.verdict is not None and r.verdict.accepted and r.geomean_speedup is not None
    ]
    if timed:
        return max(timed, key=lambda r: r.geomean_speedup or 0.0)
    return records[0] if records else None


def _promote(state: State, record: CandidateRecord) -> str | None:
    """Copy a best-of-K winner's files into the round's folder (where finalize, tuning and the
    report look for the round's candidate); its path there, or None without a candidate."""
    if record.candidate_path is None or state.candidates == 1:
        return record.candidate_path
    source = branch_dir(state.run_dir, record.round, record.branch)
    target = round_dir(state.run_dir, record.round)
    for name in (CANDIDATE, VERDICT, BENCH):
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    return str(target / CANDIDATE)


def join(state: State) -> dict[str, Any]:
    """Record the round's K candidates and carry the best forward (the round's log entry)."""
    assert state.best is not None
    k = state.round
    records = sorted((r for r in state.branches if r.round == k), key=lambda r: r.branch)
    chosen = carried(records)
    record = RoundRecord(round=k, plan=state.plan, candidates=records)
    best = state.best
    if chosen is not None:
        record = record.model_copy(
            update={
                "plan": chosen.plan,
                "attempts": chosen.attempts,
                "candidate_path": _promote(state, chosen),
                "verdict": chosen.verdict,
                "geomean_speedup": chosen.geomean_speedup,
                "geomean_speedup_err": chosen.geomean_speedup_err,
                "faster": chosen.faster,
                "profile": chosen.profile,
                "notes": [
                    f"candidate {r.branch}: {n}" if len(records) > 1 else n
                    for r in records
                    for n in r.notes
                ],
                "chosen": chosen.branch,
            }
        )
    if record.faster and (record.geomean_speedup or 0.0) > best.geomean_speedup:
        assert record.candidate_path is not None
        bench_file = round_dir(state.run_dir, k) / BENCH
        best = Best(
            round=k,
            path=record.candidate_path,
            geomean_speedup=record.geomean_speedup or 1.0,
            geomean_speedup_err=record.geomean_speedup_err,
            bench=BenchReport.model_validate_json(bench_file.read_text()),
            profile=record.profile,
        )
    record.best_speedup = best.geomean_speedup
    accepted = sum(1 for r in records if r.verdict is not None and r.verdict.accepted)
    carried_text = round_outcome(record)
    emit(
        agent="profiling",
        round=k,
        message=f"{len(records)} candidate(s), {accepted} accepted; carried: {carried_text}",
        speedup=record.geomean_speedup,
        best=best.geomean_speedup,
    )
    return {"history": [record], "best": best}


def branch_graph(
    route_after_coding: Callable[[State], str], route_after_verify: Callable[[State], str]
) -> CompiledStateGraph:
    """One candidate: coding -> verify -> measure, with the graph's repair edges to coding."""
    builder = StateGraph(State, context_schema=Context, output_schema=BranchOutput)
    builder.add_node("coding", coding.coding)
    builder.add_node("verify", testing.verify)
    builder.add_node("measure", measure)
    builder.add_edge(START, "coding")
    builder.add_conditional_edges(
        "coding",
        route_after_coding,
        {"verify": "verify", "coding": "coding", "profiling": "measure"},
    )
    builder.add_conditional_edges(
        "verify", route_after_verify, {"coding": "coding", "profiling": "measure"}
    )
    builder.add_edge("measure", END)
    return builder.compile(name=BRANCH_NODE)

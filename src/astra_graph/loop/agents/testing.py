"""The testing agent: extra test shapes at the start, and the verification of every candidate.

The testing agent sees the contract and its tuning suite, never the held-out suite. Its
proposals are checked against the contract (``shape_problem``) and the starting kernel's
requirements before they join the suite. ``verify`` compiles the candidate locally (NVRTC,
no GPU needed), so compile errors come back quickly with the compiler's log, then has the
harness check it on the visible suites: tuning, the agent's extra shapes, and edge cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.harness.compile import CompileFailed, compile_implementation
from astra_graph.harness.nvrtc import NvrtcUnavailable
from astra_graph.harness.results import Verdict
from astra_graph.harness.validation import suite_builds
from astra_graph.kernel import loaded
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.llm import prompts
from astra_graph.loop.agents.common import (
    MAX_EXTRA_SHAPES,
    check_shapes,
    context_of,
    contract_text,
    emit,
    load_baseline,
    reference_text,
    shapes_text,
    system_prompt,
    write_candidate_files,
)
from astra_graph.loop.context import Context
from astra_graph.loop.plans import ShapeProposals, TestSuite
from astra_graph.loop.state import State

VISIBLE_SUITES = ("tuning", "edge")
"""The contract suites a candidate is checked on during the rounds; held-out comes at the end."""


def testing(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask the LLM for extra realistic and adversarial shapes; keep the valid ones. With no
    rounds to test candidates in (rounds=0), the contract's suites alone, with no LLM call."""
    if state.rounds == 0:
        return contract_suite(state, runtime)
    spec, baseline = load_baseline(state)
    tuning = spec.contract.suite("tuning")
    emit(runtime, agent="testing", round=0, message="proposing extra test shapes")
    user = prompts.render(
        "testing",
        op=spec.name,
        summary=spec.contract.summary,
        contract=contract_text(spec),
        reference=reference_text(spec),
        tuning=shapes_text(tuning),
        max_shapes=MAX_EXTRA_SHAPES,
        source=prompts.quote("The starting implementation", baseline.source, "cuda"),
    )
    reply = (
        context_of(runtime)
        .get_llm()
        .ask_structured("testing", ShapeProposals, system_prompt("testing"), user)
    )
    proposed = (
        [{d.name: d.value for d in s.dims} for s in reply.value.shapes] if reply.value else []
    )
    known = [*tuning, *spec.contract.suite("edge")]
    extra, rejected = check_shapes(spec, baseline, proposed, known)
    suite = TestSuite(extra=extra, rejected=rejected, problem=reply.problem)
    emit(
        runtime,
        agent="testing",
        round=0,
        message=f"{len(extra)} extra shapes, {len(rejected)} dropped"
        + (f"; {reply.problem}" if reply.problem else ""),
    )
    return {"suite": suite, "usage": [reply.usage("testing", 0)]}


def contract_suite(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The testing step without the testing agent: the contract's suites alone, no LLM call."""
    return {"suite": TestSuite()}


def compile_problem(spec: OperationSpec, path: Path, arch: str) -> Verdict | None:
    """A compile_error verdict with the log if some dtype's instantiation fails, else None."""
    impl = loaded.implementation(spec, path)  # parsed by the coding step already
    # a kernel specialized on the shape is built here at the first suite shape's values
    first = suite_builds(spec, impl)[0]
    for name in spec.contract.dtypes:
        try:
            compile_implementation(
                impl, DTYPES[name], first, arch=arch, include_dirs=spec.include_paths
            )
        except CompileFailed as exc:
            return Verdict.reject("compile_error", f"{exc} ({name})", log=exc.log)
        except NvrtcUnavailable:
            return None  # no local NVRTC: the harness compiles it and reports errors itself
    return None


def verify(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Compile the candidate, then check it against the baseline on the visible suites."""
    work, last = state.work, state.last_attempt
    assert work is not None and last is not None and state.suite is not None
    spec, _ = load_baseline(state)
    candidate = Path(work.path)
    verdict = compile_problem(spec, candidate, context_of(runtime).compile_arch())
    if verdict is None:
        verdict = (
            context_of(runtime)
            .get_evaluator()
            .check(
                spec,
                Path(state.kernel),
                candidate,
                suites=VISIBLE_SUITES,
                extra_shapes=state.suite.extra,
            )
        )
    checked = last.model_copy(update={"verdict": verdict})
    record = work.model_copy(update={"tries": [*work.tries[:-1], checked]})
    write_candidate_files(state, record)
    outcome = "accepted" if verdict.accepted else f"rejected: {verdict.reason}"
    emit(runtime, agent="testing", round=state.round, message=f"verify: {outcome}", verdict=outcome)
    return state.with_candidate(record)

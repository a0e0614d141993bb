"""The coding agent: writes the whole new implementation file for the round's plan.

The reply is free text, read by :func:`astra_graph.llm.replies.read_code`: the whole ``.cu`` file
(a fenced block, or bare code with prose around it), or a unified diff applied to the source
the agent was shown. A reply cut off by the output limit, a diff that does not apply or a reply
with no code is never compiled: its repair prompt goes back to the agent. Before anything is
compiled, :func:`read_candidate` checks that the file's header parses against the contract and
applies the one interface rule (:func:`astra_graph.harness.validation.interface_check`: the
kernel's parameter list, the requirements and the launch geometry on every visible shape, at the
evaluator's GPU's architecture, sm_90 when it cannot say). A problem is fed back to the coding
agent (the repair edge), as are compile and launch failures found by ``verify``. Each attempt
lands in the candidate's record (``state.Attempt``); what the next attempt is told is computed
from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.harness.results import Verdict
from astra_graph.harness.validation import Arch, interface_check
from astra_graph.kernel import loaded
from astra_graph.kernel.contract import ContractError, OperationSpec
from astra_graph.kernel.header import Implementation, load_implementation
from astra_graph.llm import prompts
from astra_graph.llm.replies import RawReply, ReplyProblem, read_code
from astra_graph.loop.agents.common import (
    context_of,
    contract_text,
    emit,
    kernel_brief,
    load_baseline,
    parameters_text,
    system_prompt,
    visible_shapes,
)
from astra_graph.loop.context import Context
from astra_graph.loop.plans import Plan
from astra_graph.loop.records import Attempt, CandidateRecord
from astra_graph.loop.state import State
from astra_graph.store.rundir import attempt_file, write_text


def read_candidate(
    spec: OperationSpec, path: Path, source: str, shapes: list[dict[str, int]], arch: Arch
) -> tuple[Implementation | None, str | None]:
    """The file parsed (None if its header does not), and why it cannot implement the contract
    on the visible shapes at ``arch`` (None if it can): the interface rule of
    :func:`astra_graph.harness.validation.interface_check`. The parse is handed on, so the file
    is parsed once."""
    try:
        impl = load_implementation(path, spec.contract, source)
    except ContractError as exc:
        return None, str(exc)
    problems = interface_check(spec, impl, arch, shapes)
    return impl, problems[0].message if problems else None


def repair_text(state: State) -> str:
    """The repair section of a coding prompt: the failed attempt and what went wrong.

    An attempt without a file means no code came out of the reply: its feedback is then the
    reply pipeline's own repair prompt and is used as it is. Otherwise it is compiler or
    checker output about the file, quoted as data.
    """
    last = state.last_attempt
    if last is None or not last.feedback:
        return ""
    if last.file is None:
        return "\n" + last.feedback
    return prompts.render(
        "repair",
        attempt=state.attempt,
        problem=prompts.quote("What went wrong", last.feedback[-6000:]),
        previous=prompts.quote("Your previous attempt", Path(last.file).read_text(), "cuda"),
    )


def plan_text(plan: Plan | None) -> str:
    if plan is None:
        return "(no plan)"
    steps = [
        f"{i}. {c.change} -- why: {c.why}; expected: {c.expected_effect}"
        for i, c in enumerate(plan.changes, 1)
    ]
    return "\n".join([plan.summary, *steps])


def diff_bases(state: State) -> list[str]:
    """Sources a diff reply may be against, most recent first: the failed attempt the repair
    prompt showed, then the current best that the coding prompt showed."""
    bases = []
    last = state.last_attempt
    if last is not None and last.file is not None and last.feedback:
        bases.append(Path(last.file).read_text())
    if state.best is not None:
        bases.append(Path(state.best.path).read_text())
    return bases


def take_candidate(
    spec: OperationSpec,
    state: State,
    reply: RawReply | None,
    call_problem: str | None,
    runtime: Runtime[Context],
) -> CandidateRecord:
    """The current candidate with one more attempt: the reply read, the code saved, its
    interface checked (a failed request is simply made again)."""
    work = state.work
    assert work is not None
    k, n = state.round, work.attempts + 1
    path = Path(work.path)
    source: str | None = None
    problem, repair = call_problem, ""
    if reply is not None:
        code = read_code(reply, diff_bases(state))
        if isinstance(code, ReplyProblem):
            problem, repair = code.message, code.repair
        else:
            source = code.source
    file, verdict = None, None
    if source is not None:
        file = attempt_file(state.run_dir, k, n, state.branch_folder)
        write_text(file, source)
        arch = context_of(runtime).compile_arch  # the evaluator's GPU's; asked if needed
        impl, problem = read_candidate(spec, path, source, visible_shapes(spec, state), arch)
        if problem:
            verdict = Verdict.reject("interface_mismatch", problem)
        else:
            write_text(path, source)
            assert impl is not None
            loaded.remember(spec, impl)  # verify and tuning read this parse, not the file again
    emit(runtime, agent="coding", round=k, message=f"attempt {n}: {problem or 'candidate written'}")
    attempt = Attempt(
        number=n,
        file=str(file) if file is not None else None,
        problem=problem,
        repair=repair,
        verdict=verdict,
    )
    return work.model_copy(update={"tries": [*work.tries, attempt]})


def coding(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    assert state.best is not None
    spec, _ = load_baseline(state)
    k = state.round
    emit(runtime, agent="coding", round=k, message=f"writing attempt {state.attempt + 1}")
    user = prompts.render(
        "coding",
        op=spec.name,
        summary=spec.contract.summary,
        contract=contract_text(spec),
        parameters=parameters_text(spec),
        dtypes=", ".join(spec.contract.dtypes),
        brief=kernel_brief(spec, state),
        plan=prompts.quote(
            "The plan for this round", plan_text(state.work.plan if state.work else None)
        ),
        source=prompts.quote(
            "The current best implementation", Path(state.best.path).read_text(), "cuda"
        ),
        repair=repair_text(state),
    )
    reply = context_of(runtime).get_llm().ask_text("coding", system_prompt("coding"), user)
    record = take_candidate(spec, state, reply.value, reply.problem, runtime)
    last = record.last
    if last is not None and last.file is None and reply.problem is None:
        reply.problem = last.problem  # no code in the reply: a failed call
    return {**state.with_candidate(record), "usage": [reply.usage("coding", k)]}

"""The coding agent: writes the whole new implementation file for the round's plan.

The reply is free text; :func:`extract_source` finds the ``.cu`` file in it (a fenced block,
or bare code with prose around it). Before anything is compiled, :func:`interface_problem`
checks that the file's header parses against the contract, that the kernel's parameter list
matches the contract's arguments, and that the launch geometry and requirements work for every
visible shape. A problem is fed back to the coding agent (the repair edge), as are compile and
launch failures found by ``verify``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from astra_graph import expr, prompts
from astra_graph.agents.common import (
    context_of,
    contract_text,
    emit,
    load_baseline,
    parameters_text,
    system_prompt,
    visible_shapes,
)
from astra_graph.context import Context
from astra_graph.contract import ContractError, OperationSpec, load_implementation
from astra_graph.dtypes import DTYPES
from astra_graph.harness.launch import interface_problem as parameters_problem
from astra_graph.models import Verdict
from astra_graph.rundir import CANDIDATE, attempt_file, round_dir, write_text
from astra_graph.state import Candidate, Plan, State

MAX_THREADS_PER_BLOCK = 1024

_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$")
_HEADER = re.compile(r"^\s*//\s*astra:\s*entry\b", re.MULTILINE)
_ANY_HEADER = re.compile(r"^\s*//\s*astra:", re.MULTILINE)
_CODE_LANGUAGES = {"", "cuda", "cu", "c++", "cpp", "c", "cxx", "cc", "h", "hpp"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block; an unclosed last fence runs to the end."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language = match[1], match[2].lower()
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        blocks.append((language, "\n".join(body) + "\n"))
        i += 1
    return blocks


def _unfenced_code(text: str) -> str | None:
    """Bare code with prose around it: from the header's comment block to the last ``}``."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if _ANY_HEADER.match(line)), None)
    if first is None:
        return None
    while first > 0 and lines[first - 1].strip().startswith("//"):
        first -= 1
    last = max(
        (i for i in range(first, len(lines)) if lines[i].rstrip().endswith(("}", "};"))),
        default=None,
    )
    if last is None:
        return None
    return "\n".join(lines[first : last + 1]) + "\n"


def extract_source(reply: str) -> str | None:
    """The implementation file inside an LLM reply, or None if there is none.

    Prefers the last fenced block that has an ``// astra: entry`` header (models often revise
    within one reply), then any code block with some ``// astra:`` line, then bare code.
    """
    blocks = [body for lang, body in fenced_blocks(reply) if lang in _CODE_LANGUAGES]
    with_entry = [b for b in blocks if _HEADER.search(b)]
    if with_entry:
        return with_entry[-1]
    with_header = [b for b in blocks if _ANY_HEADER.search(b)]
    if with_header:
        return max(with_header, key=len)
    if blocks and not _ANY_HEADER.search(reply):
        longest = max(blocks, key=len)
        return longest if "__global__" in longest else None
    return _unfenced_code(reply)


def interface_problem(
    spec: OperationSpec, path: Path, source: str, shapes: list[dict[str, int]]
) -> str | None:
    """Why this file cannot implement the contract on the visible shapes, or None."""
    try:
        impl = load_implementation(path, spec.contract, source)
    except ContractError as exc:
        return str(exc)
    for dtype_name in spec.contract.dtypes:
        problem = parameters_problem(spec, impl, dtype_name)
        if problem:
            return problem
        dtype = DTYPES[dtype_name]
        for tunables in impl.header.configurations():
            for dims in shapes:
                label = spec.contract.label(dims)
                try:
                    unmet = impl.header.unmet_requirement(dims, dtype, tunables)
                    if unmet:
                        return (
                            f"header.requires: {unmet!r} excludes shape {label} ({dtype_name}); "
                            "every tuning and edge shape must be supported"
                        )
                    _, block, smem = impl.header.launch(dims, dtype, tunables)
                except (expr.ExprError, ArithmeticError, ValueError) as exc:
                    return f"header: launch geometry fails for shape {label} {tunables}: {exc}"
                threads = block[0] * block[1] * block[2]
                if not 0 < threads <= MAX_THREADS_PER_BLOCK:
                    return (
                        f"header.block: {threads} threads per block for shape {label} "
                        f"{tunables}; expected 1 to {MAX_THREADS_PER_BLOCK}"
                    )
                if smem < 0:
                    return f"header.smem: negative ({smem}) for shape {label}"
    return None


def repair_text(state: State) -> str:
    """The repair section of a coding prompt: the failed attempt and what went wrong."""
    if not state.feedback or state.candidate is None:
        return ""
    previous = (
        prompts.quote("Your previous attempt", state.candidate.source, "cuda")
        if state.candidate.source
        else "(no code could be taken from your previous reply)"
    )
    return prompts.render(
        "repair",
        attempt=state.attempt,
        problem=prompts.quote("What went wrong", state.feedback[-6000:]),
        previous=previous,
    )


def plan_text(plan: Plan | None) -> str:
    if plan is None:
        return "(no plan)"
    steps = [
        f"{i}. {c.change} -- why: {c.why}; expected: {c.expected_effect}"
        for i, c in enumerate(plan.changes, 1)
    ]
    return "\n".join([plan.summary, *steps])


def take_candidate(
    spec: OperationSpec, state: State, reply_text: str | None, reply_problem: str | None
) -> dict[str, Any]:
    """Turn a coding reply into the state's candidate: extract, check the interface, save."""
    k, n = state.round, state.attempt + 1
    path = round_dir(state.run_dir, k) / CANDIDATE
    source = extract_source(reply_text) if reply_text else None
    problem = reply_problem
    if reply_text and source is None:
        problem = "no CUDA source with an '// astra:' header found in the reply"
    verdict = None
    if source is not None:
        write_text(attempt_file(state.run_dir, k, n), source)
        problem = interface_problem(spec, path, source, visible_shapes(spec, state))
        if problem:
            verdict = Verdict.reject("interface_mismatch", problem)
        else:
            write_text(path, source)
    candidate = Candidate(round=k, attempt=n, path=str(path), source=source or "", problem=problem)
    notes = [*state.round_notes]
    if problem:
        notes.append(f"attempt {n}: {problem}")
    emit(agent="coding", round=k, message=f"attempt {n}: {problem or 'candidate written'}")
    return {
        "attempt": n,
        "candidate": candidate,
        "verdict": verdict,
        "feedback": problem or "",
        "round_notes": notes,
    }


def coding(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    assert state.best is not None
    spec, _ = load_baseline(state)
    k = state.round
    emit(agent="coding", round=k, message=f"writing attempt {state.attempt + 1}")
    user = prompts.render(
        "coding",
        op=spec.name,
        summary=spec.contract.summary,
        contract=contract_text(spec),
        parameters=parameters_text(spec),
        dtypes=", ".join(spec.contract.dtypes),
        plan=prompts.quote("The plan for this round", plan_text(state.plan)),
        source=prompts.quote(
            "The current best implementation", Path(state.best.path).read_text(), "cuda"
        ),
        repair=repair_text(state),
    )
    reply = context_of(runtime).get_llm().ask_text("coding", system_prompt("coding"), user)
    update = take_candidate(spec, state, reply.value, reply.problem)
    return {**update, "usage": [reply.usage("coding", k)]}

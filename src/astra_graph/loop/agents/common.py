"""Helpers shared by the agents: the kernel under work, prompt material, shape checks, progress."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.runtime import Runtime

from astra_graph.harness.results import BenchReport, TuningReport, Verdict
from astra_graph.kernel import loaded
from astra_graph.kernel.contract import OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation
from astra_graph.llm import prompts
from astra_graph.loop.agents.summary import summarize
from astra_graph.loop.context import Context
from astra_graph.loop.plans import Plan
from astra_graph.loop.records import CandidateRecord, RoundRecord
from astra_graph.loop.state import State
from astra_graph.store.rundir import BENCH, CANDIDATE, VERDICT, branch_dir, write_model

MAX_EXTRA_SHAPES = 8
MAX_REFERENCE_CHARS = 4000
"""A reference file longer than this is cut to its reference function alone."""
MAX_SHAPE_BYTES = 512 * 2**20
"""An agent-proposed shape may move at most this much memory per call (keeps checks quick)."""

DEFAULT_CONTEXT = Context()

ROLES = {
    "testing": "the testing agent",
    "planning": "the planning agent",
    "coding": "the coding agent",
    "single": "the only agent (testing, planning and coding)",
}


def context_of(runtime: Runtime[Context]) -> Context:
    """The run's context, or the defaults when none was given (a run started from Studio)."""
    return runtime.context if runtime.context is not None else DEFAULT_CONTEXT


def load_baseline(state: State) -> tuple[OperationSpec, Implementation]:
    """The run's contract and starting kernel; ``state.kernel`` is the loader's key."""
    return loaded.kernel(state.kernel)


def system_prompt(agent: str) -> str:
    return prompts.render("system", role=ROLES[agent])


def parameters_text(spec: OperationSpec) -> str:
    """The kernel's parameter list as the contract fixes it, for the coding prompts."""
    c = spec.contract
    items = []
    for arg in c.args:
        const = "const " if arg.role == "input" else ""
        ctype = "T" if arg.dtype == "T" else DTYPES[arg.dtype].ctype
        shape = ", ".join(str(s) for s in arg.shape)
        items.append(f"`{const}{ctype}* {arg.name}` ({arg.role}, [{shape}])")
    scalar_types = {
        "int32": "int",
        "int64": "long long",
        "float32": "float",
        "float64": "double",
        "bool": "bool",
    }
    for scalar in c.scalars:
        source = f"= {scalar.value}" if scalar.value is not None else "a parameter"
        items.append(f"`{scalar_types[scalar.dtype]} {scalar.name}` ({source})")
    return ", ".join(items)


def contract_text(spec: OperationSpec) -> str:
    """What the contract says, compactly: dims, types, parameters, traffic, tolerance, notes
    (the sentences are ``prompts/contract.md`` and the files it names)."""
    c = spec.contract
    dims = []
    for name, dim in c.dims.items():
        limits = [f"min {dim.min}"]
        if dim.max is not None:
            limits.append(f"max {dim.max}")
        if dim.multiple_of > 1:
            limits.append(f"multiple of {dim.multiple_of}")
        dims.append(f"- {name}: {', '.join(limits)}. {dim.description}".rstrip())
    specials = [
        _prompt(
            "special",
            special=special.name,
            values="; ".join(f"{arg} set to {vals}" for arg, vals in special.values.items()),
            fraction=f"{special.fraction:.0%}",
            description=special.description,
        ).rstrip()
        for special in c.specials
    ]
    notes = [f"Notes: {' '.join(c.notes.split())}"] if c.notes.strip() else []
    return _prompt(
        "contract",
        dims="\n".join(dims),
        dtypes=", ".join(c.dtypes),
        parameters=parameters_text(spec),
        bytes_moved=c.bytes_moved,
        tolerances=", ".join(f"{k}: atol {t.atol}, rtol {t.rtol}" for k, t in c.tolerance.items()),
        error_ratio=c.error_ratio,
        alignment=", ".join(f"{a.name} {a.align} B" for a in c.args),
        determinism=_prompt("deterministic" if c.deterministic else "atomics_allowed"),
        specials="".join(f"\n{line}" for line in specials),
        notes="".join(f"\n{line}" for line in notes),
    )


def _prompt(prompt: str, **values: object) -> str:
    """``prompts/<name>.md`` filled in, without the file's final newline (these are pieces of
    a prompt, joined by the caller)."""
    return prompts.render(prompt, **values).removesuffix("\n")


def shapes_text(shapes: Iterable[Mapping[str, int]]) -> str:
    return json.dumps([dict(s) for s in shapes])


def visible_shapes(spec: OperationSpec, state: State) -> list[dict[str, int]]:
    """Every shape an agent may see: tuning, the testing agent's extras, and the edge suite."""
    extra = state.suite.extra if state.suite else []
    return [*spec.contract.suite("tuning"), *extra, *spec.contract.suite("edge")]


def reference_text(spec: OperationSpec) -> str:
    """The contract's float64 reference function, quoted: the exact meaning of the operation."""
    file_name, function = spec.contract.reference.split(":")
    source = (spec.folder / file_name).read_text()
    if len(source) > MAX_REFERENCE_CHARS:
        tree = ast.parse(source)
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
        source = ast.get_source_segment(source, node) or source[:MAX_REFERENCE_CHARS]
    return prompts.quote(
        f"The reference ({file_name}:{function}, float64; xp is numpy or cupy)", source, "python"
    )


def gpu_text(bench: BenchReport | None) -> str:
    """The GPU the kernel is timed on: name, compute capability, SMs, L2, copy bandwidth."""
    if bench is None:
        return "GPU: not measured yet"
    parts = [bench.device]
    if bench.gpu is not None:
        g = bench.gpu
        parts += [
            f"compute capability {g.compute_capability}",
            f"{g.sm_count} SMs",
            f"L2 {g.l2_bytes / 2**20:.0f} MiB",
        ]
    parts.append(f"measured copy bandwidth {bench.copy_bandwidth_gbps:.0f} GB/s (the roofline)")
    return "GPU: " + ", ".join(parts)


def dispatch_text(report: TuningReport | None) -> str:
    """The best implementation's per-bucket tunables, as the tuner chose them."""
    if report is None or not report.dispatch:
        return "Dispatch table: none (the header's default tunables on every shape)"
    lines = [f"Dispatch table of the current best (defaults {report.default_tunables}):"]
    for entry in report.dispatch:
        tunables = ", ".join(f"{k}={v}" for k, v in entry.tunables.items())
        lines.append(
            f"- {entry.bucket}: {tunables} ({entry.speedup_vs_default:.3f}x vs default on "
            f"{', '.join(entry.shapes)})"
        )
    return "\n".join(lines)


def evidence_text(verdict: Verdict) -> str:
    """Where a rejection was seen: shape, dtype, suite or scenario, element, got, expected."""
    e = verdict.evidence
    if e is None:
        return ""
    parts = []
    if e.dims:
        parts.append("shape " + json.dumps(e.dims))
    if e.dtype:
        parts.append(e.dtype)
    if e.suite:
        parts.append(f"suite/scenario {e.suite}")
    if e.arg:
        where = f"{e.arg}{list(e.index)}" if e.index is not None else e.arg
        parts.append(f"at {where}")
    if e.got is not None or e.expected is not None:
        parts.append(f"got {e.got!r}, expected {e.expected!r}")
    if e.error is not None:
        allowed = f" (allowed {e.allowed:.3g})" if e.allowed is not None else ""
        parts.append(f"error {e.error:.3g}{allowed}")
    if e.detail:
        parts.append(e.detail)
    return "; ".join(parts)


def history_text(history: list[RoundRecord]) -> str:
    """Each earlier round (the ones whose candidates have all ended): its plan, its outcome and
    the evidence behind a rejection."""
    earlier = [record for record in history if record.complete]
    if not earlier:
        return prompts.quote("Earlier rounds", "none yet")
    lines = []
    for record in earlier:
        plan = record.plan.summary if record.plan else "(no plan)"
        if record.verdict is None:
            outcome = "no candidate: " + ("; ".join(record.notes) or "nothing usable")
        elif not record.verdict.accepted:
            outcome = f"rejected ({record.verdict.reason}): {record.verdict.message}"
            evidence = evidence_text(record.verdict)
            if evidence:
                outcome += f" [evidence: {evidence}]"
        elif record.geomean_speedup is None:
            outcome = "accepted, not timed"
        else:
            gain = "faster" if record.faster else "no gain"
            outcome = f"accepted, geomean speedup {record.geomean_speedup:.3f}x ({gain})"
        lines.append(f"round {record.round}: {plan} -> {outcome}")
    return prompts.quote("Earlier rounds", "\n".join(lines))


def kernel_brief(spec: OperationSpec, state: State) -> str:
    """What a kernel engineer wants before changing the kernel, for the planner and the coder:
    the reference, the GPU, the visible shapes, the current profile (every dtype), the
    dispatch table and each earlier round with its evidence. Held-out shapes never appear."""
    best = state.best
    profile = "not measured yet"
    if best is not None and best.bench is not None:
        profile = summarize(best.bench, f"Profile of {best.describe()}")
    return _prompt(
        "brief",
        reference=reference_text(spec),
        gpu=gpu_text(best.bench if best is not None and best.bench else state.baseline),
        shapes=shapes_text(visible_shapes(spec, state)),
        profile=prompts.quote("Profile of the current best implementation", profile),
        dispatch=dispatch_text(best.dispatch if best is not None else None),
        history=history_text(state.history),
    )


def check_shapes(
    spec: OperationSpec,
    baseline: Implementation,
    proposed: Iterable[Mapping[str, Any]],
    known: Iterable[Mapping[str, int]],
    limit: int = MAX_EXTRA_SHAPES,
) -> tuple[list[dict[str, int]], list[str]]:
    """Keep the proposed shapes the contract and the baseline allow; say why others were dropped.

    Dropped: shapes the contract forbids, ones the starting kernel does not support, ones that
    move more than :data:`MAX_SHAPE_BYTES`, duplicates, and any beyond ``limit``.
    """
    c = spec.contract
    seen = {tuple(sorted(s.items())) for s in known}
    accepted: list[dict[str, int]] = []
    rejected: list[str] = []
    for raw in proposed:
        label = json.dumps(dict(raw), sort_keys=True)
        dims = dict(raw)
        problem = c.shape_problem(dims)
        if problem is None:
            key = tuple(sorted(dims.items()))
            dtypes = [DTYPES[d] for d in c.dtypes]
            if key in seen:
                problem = "already in the suite"
            elif len(accepted) >= limit:
                problem = f"more than {limit} extra shapes"
            elif max(c.bytes_for(dims, d.name) for d in dtypes) > MAX_SHAPE_BYTES:
                problem = f"moves more than {MAX_SHAPE_BYTES >> 20} MiB"
            else:
                for dtype in dtypes:
                    unmet = baseline.header.unmet_requirement(dims, dtype, {})
                    if unmet:
                        problem = f"the starting kernel requires {unmet}"
                        break
        if problem:
            rejected.append(f"{label}: {problem}")
            continue
        seen.add(tuple(sorted(dims.items())))
        accepted.append(dims)
    return accepted, rejected


def new_candidate(
    state: State, round_number: int, branch: int, plan: Plan | None
) -> CandidateRecord:
    """A round's candidate before its first attempt: its plan and where its file will be
    (the round's folder, or its own folder in a best-of-K round)."""
    folder = branch_dir(state.run_dir, round_number, branch if state.candidates > 1 else 0)
    return CandidateRecord(branch=branch, plan=plan, path=str(folder / CANDIDATE))


def write_candidate_files(state: State, record: CandidateRecord) -> None:
    """Write a candidate's ``verdict.json`` and ``bench.json`` from its record, so the files
    say what the record says."""
    folder = branch_dir(state.run_dir, state.round, state.branch_folder)
    if record.verdict is not None:
        write_model(folder / VERDICT, record.verdict)
    if record.timing is not None:
        write_model(folder / BENCH, record.timing)


def emit(runtime: Runtime[Context], **event: Any) -> None:
    """Send a progress event on the run's ``custom`` stream. The node's runtime carries the
    writer (LangGraph's no-op writer when nobody streams ``custom``), so a failure to send is
    an error like any other, not swallowed."""
    runtime.stream_writer(event)

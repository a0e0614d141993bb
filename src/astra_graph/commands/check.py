"""``astra check BASELINE CANDIDATE [--json]``: verify a candidate against the contract.

Exit 0 when accepted, 1 when rejected (the reason and its evidence are printed), 2 for bad
input or a machine without a GPU. BASELINE and CANDIDATE are ``.cu`` paths, ``op/impl`` names
or operation names (``contract.resolve``); a candidate file outside ``kernels/`` (no contract
beside it) is checked against the baseline's contract.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from astra_graph.commands import UsageError
from astra_graph.harness.evaluator import Evaluator, HarnessUnavailable
from astra_graph.harness.nvrtc import NvrtcUnavailable
from astra_graph.harness.results import Verdict
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import CONTRACT_FILE, SUITE_NAMES, OperationSpec
from astra_graph.kernel.header import Implementation


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", help="a .cu file, an operation name, or op/impl")
    p.add_argument("candidate", help="a .cu file (anywhere), or op/impl")
    p.add_argument(
        "--suite",
        action="append",
        choices=SUITE_NAMES,
        help="suites to check (repeatable; default: all)",
    )
    p.add_argument(
        "--deadline", type=float, default=300.0, help="seconds before the check is killed"
    )
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(run=run)


def candidate_for(spec: OperationSpec, target: str) -> Path:
    """The candidate's file; it must belong to the baseline's operation when it has a contract."""
    path = Path(target)
    if path.suffix == ".cu":
        if not path.is_file():
            raise UsageError(f"{path}: candidate file not found")
        if (path.resolve().parent / CONTRACT_FILE).is_file():
            other, _ = resolve(path)
            if other.name != spec.name:
                raise UsageError(
                    f"{path}: belongs to operation {other.name!r}, the baseline to {spec.name!r}"
                )
        return path
    other, impl = resolve(target)
    if other.name != spec.name:
        raise UsageError(f"{target}: is operation {other.name!r}, the baseline is {spec.name!r}")
    return impl.path


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def describe(verdict: Verdict, baseline: Implementation, candidate: Path) -> str:
    lines = []
    if verdict.accepted:
        lines.append(f"ACCEPTED {candidate} (baseline {baseline.path})")
        lines.append(f"  {verdict.message}")
        return "\n".join(lines)
    lines.append(f"REJECTED {candidate}: {verdict.reason}")
    lines.append(f"  {verdict.message}")
    ev = verdict.evidence
    if ev is not None:
        where = [f"op {ev.op}"]
        if ev.dims:
            where.append("shape " + ", ".join(f"{k}={v}" for k, v in ev.dims.items()))
        where += [f"{k} {v}" for k, v in (("dtype", ev.dtype), ("suite", ev.suite)) if v]
        lines.append("  case: " + "; ".join(where))
        if ev.arg is not None and ev.index is not None:
            lines.append(
                f"  element: {ev.arg}{ev.index}  got {_number(ev.got)}  "
                f"expected {_number(ev.expected)}  error {_number(ev.error)}  "
                f"allowed {_number(ev.allowed)}"
            )
        elif ev.arg is not None:
            lines.append(f"  argument: {ev.arg}")
        if ev.detail and ev.detail not in verdict.message:
            lines.append(f"  detail: {ev.detail}")
    if verdict.cases_checked:
        lines.append(f"  {verdict.cases_checked} cases passed before this one")
    if verdict.log.strip():
        tail = verdict.log.strip().splitlines()[-15:]
        lines.append("  log:")
        lines += [f"    {line}" for line in tail]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    spec, baseline = resolve(args.baseline)
    candidate = candidate_for(spec, args.candidate)
    if args.deadline <= 0:
        raise UsageError(f"--deadline: expected a positive number of seconds, got {args.deadline}")
    try:
        with Evaluator(deadline_s=args.deadline) as evaluator:
            verdict = evaluator.check(
                spec, baseline.path, candidate, suites=tuple(args.suite or SUITE_NAMES)
            )
    except (HarnessUnavailable, NvrtcUnavailable) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(verdict.model_dump_json(indent=2))
    else:
        print(describe(verdict, baseline, candidate))
    sys.stdout.flush()
    return 0 if verdict.accepted else 1

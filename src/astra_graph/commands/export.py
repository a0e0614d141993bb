"""``astra export RUN_DIR``: a finished run's kernel back into the framework it came from.

``--format torch`` (default) writes a Python package registering the result as a torch custom
op with the framework op's name and signature (``astra_graph.export.torch_package``);
``--format patch --framework-root DIR`` writes a unified diff against the framework file the
kernel was imported from (``astra_graph.export.patch``), and ``--check`` builds the patched
file with nvcc. ``--verify`` and ``--gate`` (GPU, torch) compare the exported op with the
framework-style original built from source as a torch extension, per shape and inside a
model block; both write JSON.

Exit codes: 0 done (with ``--gate``: the verdict is keep), 1 verification failed, the patched
file did not build, or the gate says revert, 2 bad input or a missing GPU/tool.
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING

from astra_graph.commands import UsageError

FIXTURES = Path("tests/fixtures/framework_ops")
"""Framework-style originals the project writes itself, laid out as a framework tree (their
``framework.toml`` ``[source] file`` paths), relative to the repository root."""

if TYPE_CHECKING:
    from astra_graph.export.torch_package import FinishedRun


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, help="a finished run directory (docs/RUNS.md)")
    p.add_argument("--format", choices=["torch", "patch"], default="torch")
    p.add_argument("--out", type=Path, help="where to write (default: RUN_DIR/export)")
    p.add_argument(
        "--arch",
        help="GPU architecture to compile for, e.g. sm_90 (default: the "
        "local GPU's, else sm_90, the H100's)",
    )
    p.add_argument("--name", help="package name (default: astra_<op>)")
    p.add_argument(
        "--framework-root",
        type=Path,
        help="the framework checkout ([source] file is under it; --format patch, and the "
        "original for --verify/--gate)",
    )
    p.add_argument("--check", action="store_true", help="build the patched file with nvcc")
    p.add_argument(
        "--verify",
        action="store_true",
        help="GPU: compare with the original op built from source, write JSON",
    )
    p.add_argument(
        "--gate",
        action="store_true",
        help="GPU: time a model block with the original and the export, keep/revert",
    )
    p.add_argument(
        "--original",
        type=Path,
        help="the framework-style original .cu with a torch launcher (--verify, "
        "--gate; default: tests/fixtures/framework_ops/<framework.toml [source] file>)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from astra_graph.export.dispatch_source import ExportError
    from astra_graph.export.framework import gate_of
    from astra_graph.export.torch_package import check_exportable, export_torch
    from astra_graph.harness.compile import DEFAULT_ARCH, gpu_arch
    from astra_graph.kernel.contract import ContractError

    try:
        finished = check_exportable(args.run_dir)
        out = args.out or args.run_dir / "export"
        arch = args.arch or gpu_arch() or DEFAULT_ARCH
        if args.format == "patch":
            return _patch(finished, out, arch, args)
        if args.check:
            raise UsageError("--check goes with --format patch")
        if args.gate:  # before any export or GPU work: a missing [gate] is bad input
            gate_of(finished.framework, finished.spec.folder)
        if args.framework_root and not (args.verify or args.gate):
            raise UsageError("--framework-root goes with --format patch, --verify or --gate")
        package = export_torch(finished, out, arch=arch, name=args.name)
    except (ExportError, ContractError) as exc:
        raise UsageError(str(exc)) from None
    print(
        f"astra export: wrote {package} ({finished.framework.qualname} as "
        f"astra::{finished.framework.name}, {arch})"
    )
    status = 0
    if args.verify or args.gate:
        status = _on_gpu(finished, package, out, args)
    return status


def _original(finished: FinishedRun, args: argparse.Namespace) -> Path:
    """``--original``, else ``[source] file`` under ``--framework-root``, else under the
    project's framework-style fixtures (the shipped operations' originals)."""
    if args.original:
        if not args.original.is_file():
            raise UsageError(f"--original: {args.original} not found")
        return Path(args.original)
    source = finished.framework.source
    root = args.framework_root or FIXTURES
    default = root / source.file if source else None
    if default is None or not default.is_file():
        raise UsageError(
            f"--original: no default {default}; name the framework-style original "
            "(or its checkout with --framework-root)"
        )
    return default


def _on_gpu(finished: FinishedRun, package: Path, out: Path, args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError:
        raise UsageError("--verify/--gate need torch (a GPU machine)") from None
    if not torch.cuda.is_available():
        raise UsageError("--verify/--gate need a CUDA GPU (torch sees none)")
    if args.verify and "external" not in inspect.signature(torch.cuda.Event).parameters:
        # export.measure.in_graph_us times the op between event nodes of a CUDA graph
        raise UsageError(
            f"--verify needs torch.cuda.Event(external=True) (event nodes in a CUDA graph); "
            f"torch {torch.__version__} has no such argument"
        )
    original = _original(finished, args)
    status = 0
    if args.verify:
        from astra_graph.export.verify import verify

        report = verify(finished, package, original)
        path = out / f"verify-{finished.spec.name}.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"astra export: verify: {report['summary']} ({path})")
        status |= 0 if report["passed"] else 1
    if args.gate:
        from astra_graph.export.gate import gate

        verdict = gate(finished, package, original)
        path = out / f"gate-{finished.spec.name}.json"
        path.write_text(json.dumps(verdict, indent=2) + "\n")
        print(f"astra export: gate: {verdict['summary']} ({path})")
        status |= 0 if verdict["decision"] == "keep" else 1
    return status


def _patch(finished: FinishedRun, out: Path, arch: str, args: argparse.Namespace) -> int:
    from astra_graph.export.patch import check_patch, write_patch

    if args.framework_root is None:
        raise UsageError("--format patch needs --framework-root DIR (the framework checkout)")
    diff_path, patched = write_patch(finished, args.framework_root, out, arch)
    print(f"astra export: wrote {diff_path}")
    if args.check:
        problem = check_patch(finished, args.framework_root, patched, arch)
        if problem:
            print(f"astra export: --check: {problem}")
            return 1
        print("astra export: --check: the patched file builds with nvcc")
    return 0

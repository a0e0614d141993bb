"""A finished run directory for export tests, without a GPU: the shipped production kernel as
``best.cu`` and a dispatch table chosen here (the numbers are made up; only the layout and the
models are real, as in tests/synthetic_run.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from astra_graph.export.patch import write_patch
from astra_graph.export.torch_package import FinishedRun
from astra_graph.harness.buckets import bucket_of
from astra_graph.harness.results import DispatchEntry, TuningReport
from astra_graph.kernel.catalog import resolve
from astra_graph.loop.state import OptimizationResult
from astra_graph.store.rundir import BEST, BEST_DISPATCH, RUN_JSON, write_model

REPO = Path(__file__).resolve().parents[1]


def finished_run(
    root: Path, op: str, *, status: str = "finished", kernel: Path | None = None
) -> Path:
    """``root/<op>-run``: a finished offline run of ``kernels/<op>/production.cu`` (or of
    ``kernel``, an imported operation's ``production.cu``). Where the kernel has tunables, the
    bucket of the first tuning shape gets its last configuration (verified) and the bucket of
    the last tuning shape another one marked unverified, so tests can tell a used setting from
    an ignored one."""
    spec, impl = resolve(kernel or REPO / "kernels" / op / "production.cu")
    run = root / f"{op}-run"
    run.mkdir(parents=True)
    shutil.copyfile(impl.path, run / BEST)
    configs = list(impl.header.configurations())
    default = impl.header.default_tunables()
    entries = []
    tuning = spec.contract.suite("tuning")
    dtype = spec.contract.dtypes[0]
    first, last = bucket_of(spec, tuning[0], dtype), bucket_of(spec, tuning[-1], dtype)
    if len(configs) > 2 and first != last:
        entries = [
            DispatchEntry(
                bucket=first, tunables=configs[-1], shapes=[], speedup_vs_default=1.1, verified=True
            ),
            DispatchEntry(
                bucket=last, tunables=configs[1], shapes=[], speedup_vs_default=1.2, verified=False
            ),
        ]
    report = TuningReport(
        implementation=str(run / BEST), default_tunables=default, dispatch=entries
    )
    write_model(run / BEST_DISPATCH, report)
    result = OptimizationResult(
        run_id=run.name,
        run_dir=str(run),
        op=op,
        kernel=str(impl.path),
        rounds_requested=0,
        best_path=str(run / BEST),
        status=status,
        agents="offline",
        dispatch=report,
    )
    write_model(run / RUN_JSON, result)
    return run


def applied_patch(run: FinishedRun, framework: Path, tmp_path: Path, arch: str) -> tuple[str, Path]:
    """``--format patch`` of ``run`` applied with ``patch -p1`` to a copy of ``framework``: the
    patched file's text (asserted equal to the written patched file) and the diff's path."""
    assert run.framework.source is not None
    diff, patched = write_patch(run, framework, tmp_path / "out", arch)
    tree = tmp_path / "tree"
    shutil.copytree(framework, tree)
    done = subprocess.run(
        ["patch", "-p1", "-i", str(diff)], cwd=tree, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tree / run.framework.source.file).read_text()
    assert text == patched.read_text()
    return text, diff

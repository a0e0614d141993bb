"""``astra export RUN_DIR --format torch``: a run's result as a small importable Python package.

The package (``<out>/<name>/``) holds::

    __init__.py    load(fallback=None), patch(), unpatch(): torch is imported on first call only
    dispatch.py    the run's decisions as data (dispatch_source), pure Python
    _core.py       the shipped planner (export/shipped/core.py), standard library only
    _launch.py     the shipped launcher (export/shipped/launch.py): torch, CuPy
    op.py          the torch.library.custom_op with the framework op's name, arguments and
                   mutations, its register_fake, and the patch targets
    kernels/*.cubin  one per element type and tunable setting the dispatch table uses
    manifest.json  where it came from: run, source hash, arch, NVRTC version, kernels

The cubins are compiled here with NVRTC for the run's GPU architecture, every setting of the
dispatch table (and the default) in every element type of the contract, so loading needs no
compiler and no C++ build. Nothing in the package imports astra-graph, LangGraph or an LLM
client. The op lives in the ``astra`` namespace under the framework op's own name
(``astra::silu_and_mul``): registering into the framework's namespace (``_C``) would clash with
the original, which stays loaded as the fallback.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from astra_graph.export.dispatch_source import ExportError, render
from astra_graph.export.framework import FrameworkOp, load_framework
from astra_graph.harness import nvrtc
from astra_graph.harness.compile import CompileFailed, compile_implementation
from astra_graph.harness.results import TuningReport
from astra_graph.kernel import loaded
from astra_graph.kernel.catalog import resolve
from astra_graph.kernel.contract import ContractError, OperationSpec
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation
from astra_graph.kernel.signature import interface_problem
from astra_graph.loop.state import OptimizationResult
from astra_graph.store.rundir import BEST, BEST_DISPATCH, RUN_JSON

SHIPPED = Path(__file__).parent / "shipped"
EXPORT_NAMESPACE = "astra"
"""torch.library namespace of exported ops (the framework's own stays with the original)."""


@dataclass(frozen=True)
class FinishedRun:
    """A finished run directory's result, read back: contract, implementation, dispatch."""

    run_dir: Path
    result: OptimizationResult
    spec: OperationSpec
    impl: Implementation
    dispatch: TuningReport | None
    framework: FrameworkOp


def read_run(run_dir: Path) -> FinishedRun:
    """Read a finished run; raises ExportError/ContractError naming the file and problem."""
    path = run_dir / RUN_JSON
    if not path.is_file():
        raise ExportError(f"{path}: not found (expected a run directory, docs/RUNS.md)")
    try:
        result = OptimizationResult.model_validate_json(path.read_text())
    except ValueError as exc:
        raise ExportError(f"{path}: not a run.json: {str(exc).splitlines()[0]}") from None
    if result.status != "finished":
        raise ExportError(f"{path}: status is {result.status!r}, expected 'finished'")
    best = run_dir / BEST
    if not best.is_file():
        raise ExportError(f"{best}: not found; a finished run writes its result there")
    spec, _ = resolve(result.kernel)
    if spec.name != result.op:
        raise ExportError(f"{path}: op {result.op!r} but {result.kernel} is {spec.name!r}")
    impl = loaded.implementation(spec, best)
    dispatch_file = run_dir / BEST_DISPATCH
    dispatch = result.dispatch
    if dispatch_file.is_file():
        try:
            dispatch = TuningReport.model_validate_json(dispatch_file.read_text())
        except ValueError as exc:
            raise ExportError(f"{dispatch_file}: {str(exc).splitlines()[0]}") from None
    framework = load_framework(spec.folder, spec.contract)
    return FinishedRun(run_dir, result, spec, impl, dispatch, framework)


def settings_used(run: FinishedRun) -> list[dict[str, int]]:
    """The default setting, then every verified setting of the dispatch table, once each."""
    out = [run.impl.header.default_tunables()]
    for entry in run.dispatch.dispatch if run.dispatch else []:
        setting = {**out[0], **entry.tunables}
        if entry.verified and setting not in out:
            out.append(setting)
    return out


def compile_kernels(run: FinishedRun, arch: str, folder: Path) -> dict[str, tuple[str, str]]:
    """Compile every (dtype, setting) into ``folder``; ``<dtype>:<label>`` -> (file, name)."""
    from astra_graph.export.shipped.core import kernel_key

    folder.mkdir(parents=True, exist_ok=True)
    kernels: dict[str, tuple[str, str]] = {}
    for dtype in run.spec.contract.dtypes:
        for i, setting in enumerate(settings_used(run)):
            problem = interface_problem(run.spec, run.impl, dtype, setting)
            if problem:
                raise ExportError(f"{run.impl.path}: {problem}")
            try:
                compiled = compile_implementation(
                    run.impl,
                    DTYPES[dtype],
                    setting,
                    arch=arch,
                    include_dirs=run.spec.include_paths,
                )
            except CompileFailed as exc:
                raise ExportError(str(exc)) from None
            name = f"{run.spec.name}-{dtype}-{i}.cubin"
            shutil.copyfile(compiled.cubin_file, folder / name)
            kernels[kernel_key(dtype, setting)] = (name, compiled.lowered_name)
    return kernels


def render_op(run: FinishedRun) -> str:
    """``op.py``: the custom op with the framework op's signature, its fake, patch targets."""
    fw = run.framework
    contract = run.spec.contract
    py_types = {"Tensor": "torch.Tensor", "Tensor!": "torch.Tensor", "float": "float", "int": "int"}
    signature = ", ".join(f"{a.name}: {py_types[a.kind]}" for a in fw.args)
    names = ", ".join(a.name for a in fw.args)
    tensors = ", ".join(f"{a.contract_name!r}: {a.name}" for a in fw.args if a.tensor)
    params = ", ".join(f"{a.contract_name!r}: {a.name}" for a in fw.args if not a.tensor)
    targets = [t.model_dump() for t in fw.patch]
    arg_dtypes = {a.name: ("T" if a.dtype == "T" else a.dtype) for a in contract.args}
    qualname = f"{EXPORT_NAMESPACE}::{fw.name}"
    return f'''"""{qualname}: {contract.summary}.

Drop-in for the framework op {fw.qualname}{fw.torch_schema()}: the same argument
order, mutations and dtypes. Generated by astra export from run {run.result.run_id}.
"""

from pathlib import Path

import torch

from . import _launch, dispatch

OP = {qualname!r}
FRAMEWORK_OP = {fw.qualname!r}
RUNTIME = _launch.Runtime(Path(__file__).parent / "kernels", dispatch, OP)
# torch registers an op name once per process: importing another export of this op (a newer
# package, a test) keeps that registration and makes this import's runtime serve it
SLOT = _launch.slot(OP)
SLOT["runtime"] = RUNTIME


def _define():  # type: ignore[no-untyped-def]
    @torch.library.custom_op(OP, mutates_args={tuple(fw.mutated)!r}, device_types="cuda")
    def {fw.name}({signature}) -> None:
        SLOT["runtime"].run({{{tensors}}}, {{{params}}}, ({names},))

    @{fw.name}.register_fake
    def _({signature}) -> None:
        return None

    return {fw.name}


{fw.name} = SLOT.get("op") or _define()
SLOT["op"] = {fw.name}


PATCHER = _launch.Patcher(
    {fw.name},
    RUNTIME,
    {targets!r},
    {[a.name for a in fw.args]!r},
    {{{", ".join(f"{a.name!r}: {a.contract_name!r}" for a in fw.args)}}},
    {arg_dtypes!r},
)
'''


def render_init(run: FinishedRun) -> str:
    fw = run.framework
    return f'''"""{run.spec.name} from run {run.result.run_id}: a drop-in for {fw.qualname}.

    from {{package}} import load, patch, unpatch
    op = load(fallback=torch.ops.{fw.namespace}.{fw.name})  # or: patch() into a running framework

Importing this package needs neither torch nor a GPU (dispatch.plan is pure Python); load(),
patch() and unpatch() import torch and CuPy on first use.
"""

from typing import Any


def load(fallback: Any = None) -> Any:
    """Register astra::{fw.name} and return it; ``fallback`` (the original op, called with the
    same arguments) runs every shape outside the verified domain."""
    from . import op

    if fallback is not None:
        op.RUNTIME.fallback = fallback
    return op.{fw.name}


def patch() -> list[str]:
    """Replace the framework functions that import here; returns the ones replaced."""
    from . import op

    return op.PATCHER.patch()


def unpatch() -> None:
    """Put back every function patch() replaced."""
    from . import op

    op.PATCHER.unpatch()
'''


def export_torch(run: FinishedRun, out: Path, *, arch: str, name: str | None = None) -> Path:
    """Write the package under ``out``; returns its folder."""
    package = out / (name or f"astra_{run.spec.name}")
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    kernels = compile_kernels(run, arch, package / "kernels")
    (package / "dispatch.py").write_text(
        render(
            run.spec, run.impl, run.dispatch, arch=arch, kernels=kernels, run_id=run.result.run_id
        )
    )
    shutil.copyfile(SHIPPED / "core.py", package / "_core.py")
    shutil.copyfile(SHIPPED / "launch.py", package / "_launch.py")
    (package / "op.py").write_text(render_op(run))
    (package / "__init__.py").write_text(render_init(run))
    manifest = {
        "op": run.spec.name,
        "framework_op": run.framework.qualname,
        "exported_op": f"{EXPORT_NAMESPACE}::{run.framework.name}",
        "run_id": run.result.run_id,
        "implementation": str(run.impl.path),
        "source_sha256": hashlib.sha256(run.impl.source.encode()).hexdigest(),
        "arch": arch,
        "nvrtc": ".".join(map(str, nvrtc.version())),
        "dtypes": run.spec.contract.dtypes,
        "kernels": {k: {"cubin": f, "function": n} for k, (f, n) in kernels.items()},
        "dispatch": run.dispatch.model_dump(mode="json") if run.dispatch else None,
    }
    (package / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return package


def check_exportable(run_dir: Path) -> FinishedRun:
    """read_run with every expected failure as one ExportError line."""
    try:
        return read_run(run_dir)
    except ContractError as exc:
        raise ExportError(str(exc)) from None

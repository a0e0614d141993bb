"""Compile an implementation for one element type and tunable setting, with an on-disk cache.

The cache key is the source, the contents of every local header it includes (found in the
include folders, recursively), the name expression, the options (include folders among them),
the architecture and NVRTC's version; a hit skips NVRTC entirely. The cache lives in
``$ASTRA_CACHE_DIR`` or ``~/.cache/astra-graph``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from astra_graph.harness import nvrtc
from astra_graph.kernel.dtypes import DType
from astra_graph.kernel.header import DEFAULT_STD, Implementation
from astra_graph.kernel.signature import include_folders, local_headers

DEFAULT_ARCH = "sm_90"


class CompileFailed(RuntimeError):
    def __init__(self, path: Path, log: str) -> None:
        self.path = path
        self.log = log
        errors = nvrtc.first_errors(log)
        super().__init__(f"{path}: compile failed: {errors[0] if errors else log.strip()[:300]}")


@dataclass
class CompiledKernel:
    path: str
    entry: str
    """The name expression compiled, e.g. ``silu_and_mul_kernel<__half>``."""
    lowered_name: str
    arch: str
    options: list[str]
    cubin_file: str
    resources: nvrtc.Resources
    log: str
    cache_hit: bool = False
    tunables: dict[str, int] = field(default_factory=dict)


def cache_dir() -> Path:
    root = os.environ.get("ASTRA_CACHE_DIR") or Path.home() / ".cache" / "astra-graph"
    path = Path(root) / "nvrtc"
    path.mkdir(parents=True, exist_ok=True)
    return path


def gpu_arch() -> str | None:
    """``sm_XY`` of the local GPU, or None where there is no usable GPU (or no CuPy)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return f"sm_{cupy.cuda.Device().compute_capability}"
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU here"
        return None


def compile_options(tunables: dict[str, int], fast_math: bool = False) -> list[str]:
    options = [f"-D{name}={value}" for name, value in sorted(tunables.items())]
    if fast_math:
        options.append("--use_fast_math")
    return options


def compile_implementation(
    impl: Implementation,
    dtype: DType,
    tunables: dict[str, int] | None = None,
    *,
    arch: str = DEFAULT_ARCH,
    include_dirs: Sequence[Path] = (),
) -> CompiledKernel:
    """Compile (or fetch from the cache) one instantiation of ``impl``; raises CompileFailed.

    ``#include "x.cuh"`` is searched in the file's own folder, then ``include_dirs`` (the
    operation's :attr:`~astra_graph.kernel.contract.OperationSpec.include_paths`), then CUDA and
    CCCL.
    """
    settings = {**impl.header.default_tunables(), **(tunables or {})}
    unset = [name for name in impl.header.specializations if name not in settings]
    if unset:  # a specialization's value is the shape's: a build names the shape's values
        raise CompileFailed(
            impl.path,
            f"header.specialize {unset[0]}: no value given; it follows the shape "
            f"({impl.header.specializations[unset[0]]}), so compile for a shape's values",
        )
    fast_math = bool(settings.get("FAST_MATH", 0))
    entry = impl.header.entry_for(dtype, settings)
    folders = include_folders(impl, include_dirs)
    options = [*compile_options(settings, fast_math), *(f"-I{f}" for f in folders)]
    key_text = json.dumps(
        [
            impl.source,
            local_headers(impl.source, folders),
            entry,
            options,
            arch,
            nvrtc.version(),
            nvrtc.system_include_dirs(),
            dtype.name,
        ],
        sort_keys=True,
    )
    key = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    folder = cache_dir()
    meta_file, cubin_file = folder / f"{key}.json", folder / f"{key}.cubin"
    if meta_file.is_file() and cubin_file.is_file():
        meta = json.loads(meta_file.read_text())
        meta["resources"] = nvrtc.Resources(**meta["resources"])
        return CompiledKernel(**{**meta, "cache_hit": True})
    out = nvrtc.compile_source(
        impl.source,
        filename=impl.path.name,
        arch=arch,
        name_expressions=[entry],
        options=options,
        std=impl.header.std or DEFAULT_STD,
    )
    if not out.ok:
        raise CompileFailed(impl.path, out.log)
    lowered = out.lowered_names[entry]
    kernel = CompiledKernel(
        path=str(impl.path),
        entry=entry,
        lowered_name=lowered,
        arch=arch,
        options=options,
        cubin_file=str(cubin_file),
        resources=out.resources.get(lowered, nvrtc.Resources()),
        log=out.log,
        tunables=settings,
    )
    tmp = cubin_file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(out.cubin)
    tmp.replace(cubin_file)
    meta = asdict(kernel)
    meta.pop("cache_hit")
    tmp = meta_file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(meta))
    tmp.replace(meta_file)
    return kernel

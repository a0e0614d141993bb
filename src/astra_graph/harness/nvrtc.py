"""NVRTC through ctypes: compile CUDA C++ to a cubin for an explicit architecture.

Calling NVRTC directly (rather than through CuPy's compile helper) works on a machine with no
GPU, names the architecture explicitly, and gives ptxas's resource report (registers, shared
memory, stack and spills) from ``-Xptxas=-v``. The library and the CUDA headers are found with
``cuda.pathfinder`` (NVIDIA's wheels, ``CUDA_PATH`` or the system toolkit).

CCCL (cub, thrust, ``cuda::std``) is the ``nvidia-cuda-cccl`` wheel's wherever Python imports
from, else found the same way (the toolkit's ``include/cccl``), else in the copy CuPy ships.
NVRTC has no C++ standard library: ``include/`` beside this module holds small ``<cstdint>``,
``<type_traits>``, ... headers that include libcu++'s and make its names visible as ``std::``,
so kernels written for nvcc compile as they are. Without CCCL those headers are not offered and
such includes fail as usual.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from astra_graph.kernel.header import DEFAULT_STD

PRE_INCLUDES = ("cuda_fp16.h", "cuda_bf16.h")
"""Headers every implementation gets without writing the include (line numbers stay the file's)."""


class NvrtcUnavailable(RuntimeError):
    """NVRTC or the CUDA headers cannot be found on this machine."""


@dataclass(frozen=True)
class Resources:
    """ptxas's report for one kernel, per thread unless named otherwise."""

    registers: int = 0
    static_smem_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


@dataclass
class CompileOutput:
    ok: bool
    log: str
    cubin: bytes = b""
    lowered_names: dict[str, str] = field(default_factory=dict)
    resources: dict[str, Resources] = field(default_factory=dict)
    """Keyed by mangled (lowered) kernel name."""


@cache
def _library() -> tuple[ctypes.CDLL, str]:
    try:
        import cuda.pathfinder as pathfinder
    except ImportError as exc:
        raise NvrtcUnavailable(
            "cuda-pathfinder is not installed (install astra-graph with the cuda12 or cuda13 extra)"
        ) from exc
    try:
        lib = pathfinder.load_nvidia_dynamic_lib("nvrtc")
        include = pathfinder.find_nvidia_header_directory("cudart")
    except Exception as exc:  # pathfinder raises several not-found types
        raise NvrtcUnavailable(
            f"NVRTC not found ({exc}); install the cuda13 or cuda12 extra, or set CUDA_PATH"
        ) from exc
    if include is None:
        raise NvrtcUnavailable("CUDA runtime headers (cuda_fp16.h) not found; install the extra")
    return ctypes.CDLL(lib.abs_path), include


STD_SHIM_DIR = Path(__file__).parent / "include"
_CUPY_CCCL = ("_core/include/cupy/_cccl", ("libcudacxx", "cub", "thrust"))


CCCL_WHEEL_DIRS = ("cu13/include/cccl", "cu12/include/cccl", "cuda_cccl/include")
"""Where the ``nvidia-cuda-cccl`` wheel puts its headers under the ``nvidia`` namespace package
(CUDA 13's layout, CUDA 12's, the older wheels')."""


def _cccl_wheel() -> str | None:
    """The ``nvidia-cuda-cccl`` wheel's include folder wherever Python imports ``nvidia`` from,
    ``PYTHONPATH`` included: pathfinder looks in site-packages only, and a wheel installed with
    ``pip --target`` was passed over for the toolkit's older CCCL (CUDA 13.0's lacks
    ``cuda::fast_mod_div``, which FlashInfer 0.7's headers use)."""
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        for sub in CCCL_WHEEL_DIRS:
            if (Path(location) / sub / "cuda").is_dir():
                return str(Path(location) / sub)
    return None


@cache
def cccl_include_dirs() -> tuple[str, ...]:
    """Include folders for CCCL (cub, thrust, libcu++), or () where none is installed: the wheel
    first (:func:`_cccl_wheel`), then wherever pathfinder finds one, then CuPy's copy."""
    wheel = _cccl_wheel()
    if wheel is not None:
        return (wheel,)
    try:
        import cuda.pathfinder as pathfinder

        found = pathfinder.find_nvidia_header_directory("cccl")
    except Exception:  # not installed or not found: try CuPy's copy
        found = None
    if found:
        return (found,)
    spec = importlib.util.find_spec("cupy")
    for location in (spec.submodule_search_locations or []) if spec else []:
        base = Path(location) / _CUPY_CCCL[0]
        folders = [base / name for name in _CUPY_CCCL[1]]
        if all(f.is_dir() for f in folders):
            return tuple(str(f) for f in folders)
    return ()


def system_include_dirs() -> list[str]:
    """What every compile searches after the implementation's own folders."""
    _, include = _library()
    cccl = cccl_include_dirs()
    return [include, *cccl, *([str(STD_SHIM_DIR)] if cccl else [])]


def cuda_version() -> int:
    """``CUDA_VERSION`` as ``cuda.h`` spells it for this NVRTC (13050 for 13.5)."""
    major, minor = version()
    return major * 1000 + minor * 10


def version() -> tuple[int, int]:
    lib, _ = _library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(status).decode()}")


def compile_source(
    source: str,
    *,
    filename: str,
    arch: str,
    name_expressions: list[str],
    options: list[str] | None = None,
    std: str = DEFAULT_STD,
) -> CompileOutput:
    """Compile ``source`` to a cubin for ``arch`` (e.g. ``sm_90``) and report per-kernel resources.

    ``options`` come before the system include folders, so an ``-I`` there is searched first;
    ``std`` is the C++ standard (a header's ``std``, else :data:`DEFAULT_STD`). A compile error
    is not raised: ``ok`` is False and ``log`` holds NVRTC's messages, whose line numbers are
    the file's own.
    """
    lib, _ = _library()
    prog = ctypes.c_void_p()
    _check(
        lib,
        lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None
        ),
        "create",
    )
    try:
        for name in name_expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, name.encode()), "add name expression")
        opts = [
            f"-arch={arch}",
            f"-std={std}",
            # as cuda_runtime.h, which nvcc includes in every CUDA file, defines it (SGLang's JIT
            # headers read it); NVRTC defines it nowhere, and this is the compiler that runs
            f"-DCUDA_VERSION={cuda_version()}",
            *(options or []),
            *(f"-I{folder}" for folder in system_include_dirs()),
            "-Xptxas=-v",
            "-lineinfo",
            *(f"--pre-include={h}" for h in PRE_INCLUDES),
        ]
        encoded = [o.encode() for o in opts]
        status = lib.nvrtcCompileProgram(
            prog, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded)
        )
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if status != 0:
            return CompileOutput(ok=False, log=log)
        lowered = {}
        for name in name_expressions:
            out = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(out)), "lower")
            lowered[name] = (out.value or b"").decode()  # nvrtcGetLoweredName succeeded: never NULL
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(prog, cubin), "get cubin")
        return CompileOutput(
            ok=True, log=log, cubin=cubin.raw, lowered_names=lowered, resources=parse_ptxas(log)
        )
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


_FUNC = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_FRAME = re.compile(
    r"(?P<frame>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, "
    r"(?P<ld>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per-kernel resources from ptxas's ``-v`` lines in an NVRTC log."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _FUNC.search(line):
            current = m["name"]
            found[current] = {}
        elif current is None:
            continue
        elif m := _FRAME.search(line):
            found[current].update(
                stack_frame_bytes=int(m["frame"]),
                spill_store_bytes=int(m["st"]),
                spill_load_bytes=int(m["ld"]),
            )
        elif m := _USED.search(line):
            found[current]["registers"] = int(m["regs"])
            if s := _SMEM.search(line):
                found[current]["static_smem_bytes"] = int(s["smem"])
    return {name: Resources(**values) for name, values in found.items()}


_ERROR_LINE = re.compile(r"^(?P<file>[^()\s]+)\((?P<line>\d+)\): (?P<kind>error|warning)")


def first_errors(log: str, limit: int = 5) -> list[str]:
    """The first error lines of a log (``file(line): error: ...``), then its warnings, for
    one-line summaries: a framework header's warnings (``unrecognized #pragma``) come before
    the error that failed the compile, and a summary of one line names that error."""
    found = [
        (m["kind"], ln.strip()) for ln in log.splitlines() if (m := _ERROR_LINE.match(ln.strip()))
    ]
    ordered = [ln for kind, ln in found if kind == "error"] + [
        ln for kind, ln in found if kind == "warning"
    ]
    return ordered[:limit] or [ln.strip() for ln in log.splitlines() if "error" in ln][:limit]


@cache
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities this NVRTC compiles for (90 for sm_90), from the library
    itself (``nvrtcGetSupportedArchs``), so that a flag naming another is bad input before any
    compile runs."""
    lib, _ = _library()
    count = ctypes.c_int()
    _check(lib, lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * count.value)()
    _check(lib, lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    return tuple(archs)

"""Compile, load and launch one implementation on the GPU; build test cases from the contract.

This module runs inside the evaluation worker (it touches the CUDA context). CuPy is imported
inside the functions that need it, so that the signature check (:func:`interface_problem`),
which the parent process runs before handing a candidate to a worker, works without a GPU.

Launch errors come in two kinds. A launch the driver refuses (too many threads, too much shared
memory) leaves the context usable: :class:`LaunchError` with ``sticky=False``. A fault while the
kernel runs (illegal or misaligned address, trap) poisons the CUDA context for the rest of the
process: ``sticky=True``, and the worker must be replaced.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from astra_graph.contract import Implementation, OperationSpec, Special, TensorArg
from astra_graph.dtypes import DTYPES, DType
from astra_graph.harness.compile import (
    DEFAULT_ARCH,
    CompiledKernel,
    CompileFailed,
    compile_implementation,
    gpu_arch,
)

if TYPE_CHECKING:
    import cupy

__all__ = [
    "Case",
    "CompileFailed",
    "InterfaceMismatch",
    "LaunchError",
    "LoadedKernel",
    "interface_problem",
    "load_kernel",
    "make_case",
    "synchronize",
]

DEFAULT_SMEM_LIMIT = 48 * 1024
"""Dynamic shared memory a kernel may use without raising its attribute."""

STICKY_CUDA_ERRORS = {
    700: "illegal address",
    710: "device-side assert",
    714: "hardware stack error",
    715: "illegal instruction",
    716: "misaligned address",
    717: "invalid address space",
    718: "invalid program counter",
    719: "launch failed (kernel fault)",
}
"""CUDA error codes after which the context is unusable (driver and runtime share them)."""


class InterfaceMismatch(ValueError):
    """The implementation's kernel does not take the contract's parameters."""


class LaunchError(RuntimeError):
    """A launch was refused or the kernel faulted; ``sticky`` means the context is now dead."""

    def __init__(self, message: str, *, sticky: bool = False, code: int | None = None) -> None:
        super().__init__(message)
        self.sticky = sticky
        self.code = code


# --- test cases ------------------------------------------------------------------------------


@dataclass
class Case:
    """One shape and element type: device buffers in storage dtype (bf16 as uint16), scalars."""

    dims: dict[str, int]
    dtype: str
    arrays: dict[str, cupy.ndarray]
    scalars: dict[str, float | int]
    special: str | None = None
    """Name of the ``[[specials]]`` scenario the inputs were drawn for, if any."""

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


def _array_module(rng: Any) -> Any:
    """The array module a generator draws into: ``cupy`` on the GPU, ``numpy`` in CPU tests."""
    if type(rng).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def _random_values(arg: TensorArg, shape: tuple[int, ...], rng: Any) -> Any:
    """Float32 draws from the argument's ``init`` distribution (float32 keeps memory low)."""
    init = arg.init
    if init.dist == "normal":
        values = rng.standard_normal(shape, dtype=np.float32)
        if init.scale != 1.0:
            values *= np.float32(init.scale)
        if init.mean != 0.0:
            values += np.float32(init.mean)
        return values
    values = rng.random(shape, dtype=np.float32)
    values *= np.float32(init.high - init.low)
    values += np.float32(init.low)
    return values


def _apply_special(values: dict[str, Any], special: Special, rng: Any) -> None:
    """Set a random fraction of the named inputs' elements to the scenario's values."""
    xp = _array_module(rng)
    shared_mask = None
    for name, choices in special.values.items():
        target = values[name]
        if special.paired and shared_mask is not None and shared_mask.shape == target.shape:
            mask = shared_mask
        else:
            mask = rng.random(target.shape, dtype=np.float32) < special.fraction
            shared_mask = mask
        picks = xp.asarray(np.asarray(choices, dtype=np.float64)).astype(target.dtype)
        which = rng.integers(0, len(choices), size=target.shape)
        xp.copyto(target, picks[which], where=mask)


def make_case(
    spec: OperationSpec,
    dims: Mapping[str, int],
    dtype: str,
    rng: cupy.random.Generator,
    params: Mapping[str, float] | None = None,
    special: Special | None = None,
) -> Case:
    """Fresh random inputs (never all zero) and uninitialised outputs for one shape and type.

    A NumPy generator gives NumPy arrays (for CPU tests of the verification logic).
    """
    xp = _array_module(rng)
    contract = spec.contract
    raw: dict[str, Any] = {}
    for arg in contract.args:
        if arg.role != "output":
            raw[arg.name] = _random_values(arg, contract.shape_of(arg, dims), rng)
    if special is not None:
        _apply_special(raw, special, rng)
    arrays: dict[str, Any] = {}
    for arg in contract.args:
        element = contract.dtype_of(arg, dtype)
        shape = contract.shape_of(arg, dims)
        if arg.name in raw:
            arrays[arg.name] = element.from_float64(xp, raw.pop(arg.name))
        else:
            arrays[arg.name] = xp.empty(shape, dtype=element.storage)
    return Case(
        dims=dict(dims),
        dtype=dtype,
        arrays=arrays,
        scalars=contract.scalar_values(dims, params),
        special=special.name if special else None,
    )


# --- kernel signature check ------------------------------------------------------------------

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "typename"}
_TYPE_ALIASES: dict[str, str] = {
    "__half": "float16",
    "half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "signed": "int32",
    "signed int": "int32",
    "unsigned": "int32",
    "unsigned int": "int32",
    "int32_t": "int32",
    "uint32_t": "int32",
    "long": "int64",
    "long int": "int64",
    "long long": "int64",
    "long long int": "int64",
    "unsigned long": "int64",
    "unsigned long long": "int64",
    "int64_t": "int64",
    "uint64_t": "int64",
    "size_t": "int64",
}
"""C++ spellings of the element and scalar types a contract can name (integers by width)."""
_TYPE_WORDS = {"int", "long", "unsigned", "signed", "short", "char", "float", "double"}


@dataclass(frozen=True)
class KernelParam:
    text: str
    pointer: bool
    base_type: str
    """The pointee (or value) type with qualifiers and the parameter name removed."""


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r"//[^\n]*", " ", source)


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    tail = "".join(current)
    if tail.strip():
        parts.append(tail)
    return [p.strip() for p in parts]


def _closing(text: str, start: int, open_char: str, close_char: str) -> int:
    """Index of the bracket that closes the one at ``start``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _parse_param(text: str) -> KernelParam:
    text = text.split("=")[0].strip()
    pointer = "*" in text or "[" in text
    words = [w for w in re.findall(r"[A-Za-z_][\w:]*", text) if w not in _QUALIFIERS]
    if len(words) > 1 and words[-1] not in _TYPE_WORDS:
        words = words[:-1]  # drop the parameter's name
    return KernelParam(text=text, pointer=pointer, base_type=" ".join(words))


def kernel_signature(source: str, kernel_name: str) -> tuple[list[str], list[KernelParam]] | None:
    """(template parameter names, kernel parameters) of a ``__global__`` function, or None.

    A light parser, not a compiler: it finds ``__global__ ... kernel_name(...)`` in the source
    with comments removed. None when the definition cannot be found (e.g. built by a macro).
    """
    text = _strip_comments(source)
    for match in re.finditer(rf"\b{re.escape(kernel_name)}\s*\(", text):
        prefix_start = max(text.rfind(c, 0, match.start()) for c in ";}{")
        prefix = text[prefix_start + 1 : match.start()]
        if "__global__" not in prefix:
            continue
        open_at = match.end() - 1
        close_at = _closing(text, open_at, "(", ")")
        if close_at < 0:
            return None
        template_names: list[str] = []
        template = re.search(r"template\s*<", prefix)
        if template:
            start = prefix_start + 1 + template.end() - 1
            end = _closing(text, start, "<", ">")
            for item in _split_top_level(text[start + 1 : end]):
                names = re.findall(r"[A-Za-z_]\w*", item.split("=")[0])
                if names:
                    template_names.append(names[-1])
        body = text[open_at + 1 : close_at].strip()
        params = [] if body in ("", "void") else [_parse_param(p) for p in _split_top_level(body)]
        return template_names, params
    return None


def _template_arguments(entry: str) -> list[str]:
    if "<" not in entry:
        return []
    return _split_top_level(entry[entry.index("<") + 1 : entry.rindex(">")])


def interface_problem(
    spec: OperationSpec, impl: Implementation, dtype: str, tunables: Mapping[str, int] | None = None
) -> str | None:
    """Why the entry kernel's parameters do not match the contract for ``dtype``, or None.

    Checked: the number of parameters, pointer vs. by-value in each position, and, where the
    source spells a known type, the element type of each tensor and the width of each scalar.
    Unknown spellings (``uint4*``, typedefs) are accepted.
    """
    contract = spec.contract
    found = kernel_signature(impl.source, impl.header.kernel_name)
    if found is None:
        return None
    template_names, params = found
    settings = {**impl.header.default_tunables(), **(tunables or {})}
    entry_args = _template_arguments(impl.header.entry_for(DTYPES[dtype], settings))
    bound = dict(zip(template_names, entry_args, strict=False))
    expected: list[tuple[str, bool, str]] = [
        (a.name, True, contract.dtype_of(a, dtype).name) for a in contract.args
    ] + [(s.name, False, s.dtype) for s in contract.scalars]
    where = f"{impl.path}: kernel {impl.header.kernel_name}"
    if len(params) != len(expected):
        names = ", ".join(name for name, _, _ in expected)
        return (
            f"{where} takes {len(params)} parameters, the contract needs {len(expected)} ({names})"
        )
    for index, (param, (name, pointer, type_name)) in enumerate(zip(params, expected, strict=True)):
        what = "a pointer" if pointer else "a value"
        if param.pointer != pointer:
            return f"{where}: parameter {index + 1} ({param.text!r}) must be {what} for {name!r}"
        spelled = bound.get(param.base_type, param.base_type)
        actual = _TYPE_ALIASES.get(spelled)
        if actual is None:
            continue
        if pointer and DTYPES[type_name].floating and actual != type_name:
            return (
                f"{where}: parameter {index + 1} ({param.text!r}) points to {actual}, "
                f"{name!r} holds {type_name}"
            )
        if not pointer and actual != type_name:
            return (
                f"{where}: parameter {index + 1} ({param.text!r}) is {actual}, "
                f"{name!r} is {type_name}"
            )
    return None


# --- loading and launching -------------------------------------------------------------------


def _as_launch_error(exc: Exception, what: str) -> LaunchError:
    code = getattr(exc, "status", None)
    sticky = code in STICKY_CUDA_ERRORS
    return LaunchError(f"{what}: {exc}", sticky=sticky, code=code)


def synchronize(stream: cupy.cuda.Stream | None = None) -> None:
    """Wait for the stream (default: the device) and turn a CUDA fault into LaunchError."""
    import cupy
    from cupy_backends.cuda.api.driver import CUDADriverError
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    try:
        if stream is None:
            cupy.cuda.Device().synchronize()
        else:
            stream.synchronize()
    except (CUDARuntimeError, CUDADriverError) as exc:
        raise _as_launch_error(exc, "kernel failed") from None


_SCALAR_TYPES: dict[str, type[np.generic]] = {
    "int32": np.int32,
    "int64": np.int64,
    "float32": np.float32,
    "float64": np.float64,
}


@dataclass
class LoadedKernel:
    """One instantiation (element type, tunables) compiled and loaded in this process."""

    spec: OperationSpec
    impl: Implementation
    dtype: DType
    tunables: dict[str, int]
    compiled: CompiledKernel
    function: Any
    """The ``cupy.RawKernel`` of the entry point."""
    _smem_attribute: int = field(default=DEFAULT_SMEM_LIMIT, repr=False)

    def geometry(
        self, dims: Mapping[str, int]
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared memory bytes) from the header, for one shape."""
        return self.impl.header.launch(dims, self.dtype, self.tunables)

    def unsupported(self, dims: Mapping[str, int]) -> str | None:
        """The header's ``requires`` clause that ``dims`` breaks, or None."""
        return self.impl.header.unmet_requirement(dims, self.dtype, self.tunables)

    def arguments(self, case: Case) -> list[Any]:
        contract = self.spec.contract
        args: list[Any] = [case.arrays[a.name] for a in contract.args]
        args += [_SCALAR_TYPES[s.dtype](case.scalars[s.name]) for s in contract.scalars]
        return args

    def launch(self, case: Case, stream: cupy.cuda.Stream | None = None) -> None:
        """Launch once on ``stream`` without waiting; raises LaunchError if the launch is refused.

        Faults while the kernel runs surface at the next :func:`synchronize`.
        """
        from cupy_backends.cuda.api.driver import CUDADriverError
        from cupy_backends.cuda.api.runtime import CUDARuntimeError

        grid, block, smem = self.geometry(case.dims)
        try:
            if smem > self._smem_attribute:
                self.function.max_dynamic_shared_size_bytes = smem
                self._smem_attribute = smem
            self.function(grid, block, self.arguments(case), shared_mem=smem, stream=stream)
        except (CUDARuntimeError, CUDADriverError) as exc:
            raise _as_launch_error(
                exc, f"launch of {self.compiled.entry} grid={grid} block={block} smem={smem}"
            ) from None


_LOADED: OrderedDict[str, LoadedKernel] = OrderedDict()
_LOADED_LIMIT = 64


def load_kernel(
    spec: OperationSpec,
    impl: Implementation,
    dtype: str,
    tunables: Mapping[str, int] | None = None,
) -> LoadedKernel:
    """Compile (NVRTC, on-disk cache) and load one instantiation for the local GPU.

    Raises InterfaceMismatch when the kernel's parameters differ from the contract, and
    CompileFailed (with the compiler log) when NVRTC rejects the source. Loaded kernels are kept
    in a small per-process cache keyed by source, element type and tunables.
    """
    import cupy

    settings = {**impl.header.default_tunables(), **(tunables or {})}
    unknown = set(settings) - set(impl.header.tunables)
    if unknown:
        raise InterfaceMismatch(f"{impl.path}: unknown tunable {sorted(unknown)[0]!r}")
    key = hashlib.sha256(
        repr((spec.name, impl.source, dtype, sorted(settings.items()))).encode()
    ).hexdigest()
    if key in _LOADED:
        _LOADED.move_to_end(key)
        return _LOADED[key]
    problem = interface_problem(spec, impl, dtype, settings)
    if problem:
        raise InterfaceMismatch(problem)
    compiled = compile_implementation(
        impl, DTYPES[dtype], settings, arch=gpu_arch() or DEFAULT_ARCH
    )
    module = cupy.RawModule(path=compiled.cubin_file)
    function = module.get_function(compiled.lowered_name)
    loaded = LoadedKernel(
        spec=spec,
        impl=impl,
        dtype=DTYPES[dtype],
        tunables=settings,
        compiled=compiled,
        function=function,
    )
    _LOADED[key] = loaded
    while len(_LOADED) > _LOADED_LIMIT:
        _LOADED.popitem(last=False)
    return loaded

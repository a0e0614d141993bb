"""Compile, load and launch one implementation on the GPU.

This module runs inside the evaluation worker (it touches the CUDA context); CuPy is imported
inside the functions that need it. Test cases come from :mod:`astra_graph.harness.cases`, the
signature check from :mod:`astra_graph.kernel.signature` (both need no GPU). Each kernel parameter
gets what the implementation's bindings say: a tensor's device pointer, a contract scalar, or a
whole number computed from the shape (a stride), in the kernel's own order. A by-value struct
parameter gets one NumPy structured scalar whose bytes are laid out as the C++ ABI lays out the
struct (:func:`struct_dtype`); CuPy copies its bytes into the kernel's parameter buffer. That
path is byte-checked on the CPU (tests) and run on the H100 (tests/test_import_gpu.py: a
struct's fields read by the kernel).

Launch errors come in two kinds. A launch the driver refuses (too many threads, too much shared
memory) leaves the context usable: :class:`LaunchError` with ``sticky=False``. A fault while the
kernel runs (illegal or misaligned address, trap) poisons the CUDA context for the rest of the
process: ``sticky=True``, and the worker must be replaced.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from astra_graph.harness.cases import Case
from astra_graph.harness.compile import (
    DEFAULT_ARCH,
    CompiledKernel,
    CompileFailed,
    compile_implementation,
    gpu_arch,
)
from astra_graph.harness.module_state import (
    ModuleReadError,
    ModuleState,
    heap_refusal,
    module_memory,
)
from astra_graph.kernel import expr, occupancy
from astra_graph.kernel.contract import ELEM_BYTES, Binding, OperationSpec
from astra_graph.kernel.dtypes import DTYPES, DType
from astra_graph.kernel.header import Implementation
from astra_graph.kernel.param_struct import POINTER, layout
from astra_graph.kernel.signature import interface_problem

if TYPE_CHECKING:
    import cupy

__all__ = [
    "CompileFailed",
    "InterfaceMismatch",
    "LaunchError",
    "LoadedKernel",
    "load_kernel",
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
    "bool": np.bool_,
}
NULL_POINTER_ARGUMENT = np.uint64(0)
"""A null device pointer: 8 bytes, as every pointer parameter of a 64-bit kernel."""


def _by_value(binding: Binding, case: Case) -> np.generic:
    """A null pointer, a contract scalar or a dims expression as the NumPy scalar of its width."""
    if binding.kind == "null":
        return NULL_POINTER_ARGUMENT
    assert binding.dtype is not None
    if binding.kind == "scalar":
        value = case.scalars[binding.name]
    else:
        assert binding.value is not None
        env = {**case.dims, ELEM_BYTES: DTYPES[case.dtype].itemsize}
        value = expr.evaluate_int(binding.value, env)
    return _SCALAR_TYPES[binding.dtype](value)


def struct_dtype(binding: Binding) -> np.dtype[Any]:
    """The NumPy structured type of a struct binding: each field at the offset the C++ ABI
    gives it (:func:`~astra_graph.kernel.param_struct.layout`), the struct's size with its
    tail padding, and its alignment (what CuPy uses to place a structured scalar among the
    kernel's parameters). Pointers are unsigned 64-bit integers."""
    fields = binding.fields or []
    return _struct_dtype(tuple(f.name for f in fields), tuple(f.field_kind() for f in fields))


@lru_cache(maxsize=64)
def _struct_dtype(names: tuple[str, ...], kinds: tuple[str, ...]) -> np.dtype[Any]:
    """:func:`struct_dtype` once per field list: it is asked for on every launch."""
    placed = layout(kinds)
    return np.dtype(
        {
            "names": list(names),
            "formats": [_STRUCT_FIELD_TYPES[kind] for kind in placed.kinds],
            "offsets": list(placed.offsets),
            "itemsize": placed.size,
        },
        align=True,
    )


def struct_argument(binding: Binding, case: Case, address: Callable[[Any], int]) -> np.void:
    """One by-value struct argument: a NumPy structured scalar of :func:`struct_dtype` whose
    bytes are the struct the kernel reads. A tensor field holds ``address(array)`` (a CuPy
    array's ``data.ptr`` on the GPU), a null field 0, a scalar or dims field its value at the
    field's width. CuPy (13 and later) passes a structured scalar's bytes by value."""
    record = np.zeros(1, dtype=struct_dtype(binding))
    for member in binding.fields or []:
        if member.kind == "tensor":
            moved = member.byte_offset(case.dims, DTYPES[case.dtype].itemsize)
            record[member.name] = address(case.arrays[member.name]) + moved
        else:
            record[member.name] = _by_value(member, case)
    scalar: np.void = record[0]
    return scalar


_STRUCT_FIELD_TYPES: dict[str, type[np.generic]] = {POINTER: np.uint64, **_SCALAR_TYPES}
"""The NumPy type of each struct field kind (:data:`.param_struct.FIELD_BYTES`)."""


@cache
def _sm_count() -> int:
    """The current GPU's multiprocessor count (``sm_count`` in launch geometry)."""
    import cupy

    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])


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
    module_state: ModuleState | None = None
    """The module's writable variables as loaded (``harness.module_state``), None if none."""
    heap_refusal: str | None = None
    """Why the module's device-heap calls make it uncheckable, or None."""
    _smem_attribute: int = field(default=DEFAULT_SMEM_LIMIT, repr=False)

    def geometry(
        self, dims: Mapping[str, int]
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared memory bytes) from the header, for one shape; a grid
        sized by ``blocks_per_sm`` reads this kernel's occupancy from CUDA."""
        with occupancy.answered_by(self.blocks_per_sm):
            return self.impl.header.launch(dims, self.dtype, self.tunables, _sm_count())

    def blocks_per_sm(self, threads: int, smem: int) -> int:
        """The driver's occupancy calculator for this kernel (``kernel_resources``); a launch the
        driver cannot size (threads or shared memory over its limits) raises ValueError, which
        the expression evaluator reports as a geometry that cannot be evaluated."""
        from cupy_backends.cuda.api.driver import CUDADriverError

        from astra_graph.harness.kernel_resources import driver_blocks_per_sm

        try:
            return driver_blocks_per_sm(self, threads, smem)
        except CUDADriverError as exc:
            raise ValueError(f"blocks_per_sm({threads}, {smem}): {exc}") from None

    def unsupported(self, dims: Mapping[str, int]) -> str | None:
        """The header's ``requires`` clause that ``dims`` breaks, or None."""
        return self.impl.header.unmet_requirement(dims, self.dtype, self.tunables)

    def arguments(self, case: Case) -> list[Any]:
        """The kernel's arguments in its own order, as the implementation's bindings say."""
        args: list[Any] = []
        for binding in self.impl.bindings:
            if binding.kind == "struct":
                args.append(struct_argument(binding, case, lambda array: array.data.ptr))
            elif binding.kind == "tensor" and binding.value is not None:
                # an address moved off the array (SGLang's pre-offset k): 8 bytes by value
                moved = binding.byte_offset(case.dims, DTYPES[case.dtype].itemsize)
                args.append(np.uint64(case.arrays[binding.name].data.ptr + moved))
            elif binding.kind == "tensor":
                args.append(case.arrays[binding.name])
            else:
                args.append(_by_value(binding, case))
        return args

    def carried_state(self) -> str | None:
        """After a finished launch: how the kernel keeps state from one launch for the next
        (a module variable not back at its value at load, or a device-heap call), or None."""
        if self.heap_refusal is not None:
            return self.heap_refusal
        return None if self.module_state is None else self.module_state.carried()

    def allow_dynamic_smem(self, smem: int) -> None:
        """Raise the kernel's dynamic shared memory attribute to ``smem`` where the default
        (48 KB) is less: the driver refuses larger launches, and counts no block of them in
        its occupancy calculator, until then."""
        if smem > self._smem_attribute:
            self.function.max_dynamic_shared_size_bytes = smem
            self._smem_attribute = smem

    def at(self, dims: Mapping[str, int]) -> LoadedKernel:
        """The instantiation that runs at ``dims``: this one (:class:`SpecializedKernel` picks
        one per shape)."""
        return self

    def launch(self, case: Case, stream: cupy.cuda.Stream | None = None) -> None:
        """Launch once on ``stream`` without waiting; raises LaunchError if the launch is refused.

        Faults while the kernel runs surface at the next :func:`synchronize`.
        """
        from cupy_backends.cuda.api.driver import CUDADriverError
        from cupy_backends.cuda.api.runtime import CUDARuntimeError

        grid, block, smem = self.geometry(case.dims)
        try:
            self.allow_dynamic_smem(smem)
            self.function(grid, block, self.arguments(case), shared_mem=smem, stream=stream)
        except (CUDARuntimeError, CUDADriverError) as exc:
            raise _as_launch_error(
                exc, f"launch of {self.compiled.entry} grid={grid} block={block} smem={smem}"
            ) from None


@dataclass
class SpecializedKernel:
    """An implementation whose header specializes compile-time values on the shape
    (``// astra: specialize KDIM = hidden``): one :class:`LoadedKernel` per distinct value,
    compiled when a shape first asks for it and kept in the loaded-kernel cache as any other
    instantiation (so a domain suite of many sizes holds at most that cache's count). It
    answers for one shape at a time as the instantiation that runs there does (:meth:`at`)."""

    spec: OperationSpec
    impl: Implementation
    dtype: DType
    tunables: dict[str, int]
    last: LoadedKernel | None = None
    """The instantiation launched last: the one whose module state a launch may have left."""
    _built: tuple[dict[str, int], LoadedKernel] | None = None
    """The values asked last and their instantiation: a case asks for its geometry, arguments
    and launch in turn, and the cache's key hashes the whole source each time."""

    def at(self, dims: Mapping[str, int]) -> LoadedKernel:
        values = self.impl.header.specialized(dims)
        if self._built is None or self._built[0] != values:
            settings = {**self.tunables, **values}
            self._built = (values, _load_one(self.spec, self.impl, self.dtype.name, settings))
        return self._built[1]

    def geometry(
        self, dims: Mapping[str, int]
    ) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        return self.at(dims).geometry(dims)

    def unsupported(self, dims: Mapping[str, int]) -> str | None:
        # read before anything is built: a shape outside the requirements may take a value
        # no instantiation can be built for
        return self.impl.header.unmet_requirement(dims, self.dtype, self.tunables)

    def arguments(self, case: Case) -> list[Any]:
        return self.at(case.dims).arguments(case)

    def launch(self, case: Case, stream: cupy.cuda.Stream | None = None) -> None:
        self.last = self.at(case.dims)
        self.last.launch(case, stream)

    def carried_state(self) -> str | None:
        """The state the last launch left (:meth:`LoadedKernel.carried_state`), None before."""
        return None if self.last is None else self.last.carried_state()


Launchable = LoadedKernel | SpecializedKernel
"""What :func:`load_kernel` gives: one instantiation, or one per shape's specialization."""

_LOADED: OrderedDict[str, LoadedKernel] = OrderedDict()
_LOADED_LIMIT = 64


def load_kernel(
    spec: OperationSpec,
    impl: Implementation,
    dtype: str,
    tunables: Mapping[str, int] | None = None,
) -> Launchable:
    """Compile (NVRTC, on-disk cache) and load one instantiation for the local GPU, or, for a
    header with specializations, the :class:`SpecializedKernel` that compiles one per shape.

    Raises InterfaceMismatch when the kernel's parameters differ from the contract, and
    CompileFailed (with the compiler log) when NVRTC rejects the source. Loaded kernels are kept
    in a small per-process cache keyed by source, element type and tunables.
    """
    settings = {**impl.header.default_tunables(), **(tunables or {})}
    unknown = set(settings) - set(impl.header.tunables)
    if unknown:
        raise InterfaceMismatch(f"{impl.path}: unknown tunable {sorted(unknown)[0]!r}")
    if impl.header.specializations:
        return SpecializedKernel(spec, impl, DTYPES[dtype], settings)
    return _load_one(spec, impl, dtype, settings)


def _load_one(
    spec: OperationSpec, impl: Implementation, dtype: str, settings: dict[str, int]
) -> LoadedKernel:
    """One instantiation at ``settings`` (tunables and specializations), through the cache."""
    import cupy

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
        impl,
        DTYPES[dtype],
        settings,
        arch=gpu_arch() or DEFAULT_ARCH,
        include_dirs=spec.include_paths,
    )
    module = cupy.RawModule(path=compiled.cubin_file)
    function = module.get_function(compiled.lowered_name)
    try:
        memory = module_memory(Path(compiled.cubin_file).read_bytes())
    except ModuleReadError as exc:  # a damaged cache entry: a compile error naming the file
        raise CompileFailed(impl.path, f"{compiled.cubin_file}: {exc}") from None
    loaded = LoadedKernel(
        spec=spec,
        impl=impl,
        dtype=DTYPES[dtype],
        tunables=settings,
        compiled=compiled,
        function=function,
        module_state=ModuleState(module, memory) if memory.variables else None,
        heap_refusal=heap_refusal(memory),
    )
    _LOADED[key] = loaded
    while len(_LOADED) > _LOADED_LIMIT:
        _LOADED.popitem(last=False)
    return loaded

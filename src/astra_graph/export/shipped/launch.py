"""Launch an exported cubin on torch's current stream, and patch it into a running framework.

Shipped verbatim inside every package ``astra export --format torch`` writes (as
``_launch.py``); it imports torch, CuPy, NumPy (CuPy's own dependency) and the standard library,
nothing of astra-graph, so a serving process can import it.

What a drop-in must do (field notes, section 8) and how this module does it:

- launch on the caller's stream: ``torch.cuda.current_stream(device).cuda_stream`` wrapped once
  per stream in ``cupy.cuda.ExternalStream``, the kernel launched with ``cuLaunchKernel``
  through CuPy's ``RawModule`` (no C++ build), so CUDA-graph capture records it;
- never synchronise, never allocate: tensor pointers go in as 64-bit integers, nothing is copied
  to or from the device, and the only tensors created are outputs a framework's Python wrapper
  allocates itself (``[[patch]] optional``), through ``torch.empty`` (the caching allocator);
- a launch configuration that depends on sizes, dtype and GPU only (the shipped ``_core``);
- anything outside the verified domain runs the original op (the fallback), never an error,
  unless no original was given: then one ValueError line says why.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cupy
import numpy as np
import torch

_C_TYPES: dict[str, type[np.generic]] = {
    "int32": np.int32,
    "int64": np.int64,
    "float32": np.float32,
    "float64": np.float64,
}
DEFAULT_SMEM_LIMIT = 48 * 1024
"""Dynamic shared memory a kernel may use before its attribute must be raised (CUDA's rule)."""
PLAN_CACHE = 4096
"""Distinct (sizes, dtypes, device) keys whose plans are kept: a serving engine sees a few
hundred (one per batch size and layer shape); beyond the limit plans are computed per call."""
REGISTRY_MODULE = "_astra_exported_ops"


def slot(op: str) -> dict[str, Any]:
    """Process-wide state of one exported op: its torch registration (``op``) and the runtime
    serving it (``runtime``). Kept outside the package's own modules, which a second import of
    an export (another version of the package) replaces, because torch keeps op names."""
    registry = sys.modules.setdefault(REGISTRY_MODULE, types.ModuleType(REGISTRY_MODULE))
    ops: dict[str, dict[str, Any]] = registry.__dict__.setdefault("ops", {})
    return ops.setdefault(op, {})


class Runtime:
    """Loads each cubin once per device and launches planned kernels on torch's stream."""

    def __init__(self, folder: Path, dispatch: Any, op: str) -> None:
        self.folder = folder
        self.dispatch = dispatch
        self.op = op
        self.fallback: Callable[..., Any] | None = None
        self._functions: dict[tuple[int, str, str], Any] = {}
        self._streams: dict[int, Any] = {}
        self._arch: dict[int, str] = {}
        self._plans: dict[tuple[Any, ...], Any] = {}
        self.last_reason: str | None = None
        """Why the last call went to the original op (None: it ran the exported kernel)."""

    def arch(self, device: int) -> str:
        if device not in self._arch:
            major, minor = torch.cuda.get_device_capability(device)
            self._arch[device] = f"sm_{major}{minor}"
        return self._arch[device]

    def _function(self, device: int, cubin: str, name: str) -> Any:
        if not any(key[0] == device for key in self._functions):
            self._load_all(device)
        return self._functions[(device, cubin, name)]

    def _load_all(self, device: int) -> None:
        """Load every cubin of the table at the first call on a device, and allow each kernel
        all the dynamic shared memory the GPU offers: neither a module load nor a change of a
        function's attributes belongs inside CUDA-graph capture, and a later call may pick
        another setting or a larger shape."""
        with cupy.cuda.Device(device):
            optin = cupy.cuda.runtime.getDeviceProperties(device)["sharedMemPerBlockOptin"]
            for cubin, name in self.dispatch.TABLE.kernels.values():
                module = cupy.RawModule(path=str(self.folder / cubin))
                function = module.get_function(name)
                limit = optin - function.shared_size_bytes
                if limit > DEFAULT_SMEM_LIMIT:
                    function.max_dynamic_shared_size_bytes = limit
                self._functions[(device, cubin, name)] = function

    def _stream(self, device: int) -> Any:
        handle = torch.cuda.current_stream(device).cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = cupy.cuda.ExternalStream(handle, device)
        return stream

    def plan(self, tensors: dict[str, torch.Tensor]) -> Any:
        """The launch for these contract-named tensors, or the reason (a string) not to.

        The plan depends on sizes, dtypes, contiguity and the device only, so it is computed
        once per such key (at most :data:`PLAN_CACHE` keys) and only the alignment of the
        pointers is checked on every call: the host time of a call is what a decode step pays.
        """
        key = tuple((t.shape, t.dtype, t.device, t.is_contiguous()) for t in tensors.values())
        launch = self._plans.get(key)
        if launch is None:
            launch = self._plan(tensors)
            if len(self._plans) < PLAN_CACHE:
                self._plans[key] = launch
        if isinstance(launch, str):
            return launch
        align = self.dispatch.TABLE.arg_align
        for name, tensor in tensors.items():
            if tensor.data_ptr() % align[name]:
                return f"{name}: address not {align[name]}-byte aligned"
        return launch

    def _plan(self, tensors: dict[str, torch.Tensor]) -> Any:
        first = next(iter(tensors.values()))
        if first.device.type != "cuda":
            return f"tensors on {first.device}, expected CUDA"
        for name, tensor in tensors.items():
            if not tensor.is_contiguous():
                return f"{name}: not contiguous"
            if tensor.device != first.device:
                return f"{name}: on {tensor.device}, {next(iter(tensors))} on {first.device}"
        return self.dispatch.plan(
            {n: tuple(t.shape) for n, t in tensors.items()},
            {n: str(t.dtype).removeprefix("torch.") for n, t in tensors.items()},
            self.arch(first.device.index or 0),
        )

    def run(
        self,
        tensors: dict[str, torch.Tensor],
        params: dict[str, float | int],
        original_args: Sequence[Any],
    ) -> None:
        """Launch the planned kernel without waiting, or call the original op with
        ``original_args`` (the op's own argument order) when the shape is not covered."""
        launch = self.plan(tensors)
        if isinstance(launch, str):
            self.last_reason = launch
            if self.fallback is None:
                raise ValueError(
                    f"{self.op}: {launch}, and no original op to fall back to "
                    "(give one to load(fallback=...) or call patch())"
                )
            self.fallback(*original_args)
            return
        self.last_reason = None
        device = next(iter(tensors.values())).device.index or 0
        function = self._function(device, launch.cubin, launch.function)
        function(
            launch.grid,
            launch.block,
            _arguments(launch, tensors, params),
            shared_mem=launch.smem,
            stream=self._stream(device),
        )

    def bound(
        self, tensors: dict[str, torch.Tensor], params: dict[str, float | int]
    ) -> Callable[[], None] | str:
        """The launch a call with these tensors makes, its plan and arguments fixed now, on
        torch's current stream: calling it costs the host one driver call (how the bench
        launches a kernel it times); or the reason the call would go to the original."""
        launch = self.plan(tensors)
        if isinstance(launch, str):
            return launch
        device = next(iter(tensors.values())).device.index or 0
        function = self._function(device, launch.cubin, launch.function)
        args, stream = _arguments(launch, tensors, params), self._stream(device)

        def call() -> None:
            function(launch.grid, launch.block, args, shared_mem=launch.smem, stream=stream)

        return call


def _arguments(
    launch: Any, tensors: dict[str, torch.Tensor], params: dict[str, float | int]
) -> tuple[Any, ...]:
    """The kernel's arguments in its order: tensor pointers as 64-bit integers, the op's
    parameters and the plan's computed values in their C types."""
    args: list[Any] = []
    for kind, name, ctype, value in launch.params:
        if kind == "tensor":  # the value: bytes the address is moved by, if any
            args.append(np.uint64(tensors[name].data_ptr() + (value or 0)))
        elif kind == "param":
            args.append(_C_TYPES[ctype](params[name]))
        else:
            args.append(_C_TYPES[ctype](value))
    return tuple(args)


class Patcher:
    """Replaces framework Python functions with the exported op and puts them back."""

    def __init__(
        self,
        op: Callable[..., Any],
        runtime: Runtime,
        targets: Sequence[dict[str, Any]],
        op_args: Sequence[str],
        contract_names: dict[str, str],
        arg_dtypes: dict[str, str],
    ) -> None:
        self.op = op
        self.runtime = runtime
        self.targets = targets
        self.op_args = list(op_args)
        self.contract_names = contract_names
        self.arg_dtypes = arg_dtypes
        self.saved: list[tuple[Any, str, Any]] = []

    def patch(self) -> list[str]:
        """Replace every target whose module imports; returns ``module.function`` of each."""
        done = []
        for target in self.targets:
            try:
                module = importlib.import_module(target["module"])
            except ImportError:
                continue
            original = getattr(module, target["function"], None)
            if original is None or any(
                m is module and n == target["function"] for m, n, _ in self.saved
            ):
                continue
            self.saved.append((module, target["function"], original))
            setattr(module, target["function"], self._wrapper(original, target))
            if self.runtime.fallback is None:
                self.runtime.fallback = self._in_op_order(original, target)
            done.append(f"{target['module']}.{target['function']}")
        return done

    def unpatch(self) -> None:
        while self.saved:
            module, name, original = self.saved.pop()
            setattr(module, name, original)
        self.runtime.fallback = None

    def _in_op_order(self, original: Callable[..., Any], target: dict[str, Any]) -> Any:
        """``original`` called with the op's argument order (the fallback's calling form)."""
        positions = [self.op_args.index(p) for p in target["params"]]

        def call(*op_values: Any) -> None:
            original(*(op_values[i] for i in positions))

        return call

    def _wrapper(self, original: Callable[..., Any], target: dict[str, Any]) -> Any:
        signature = inspect.signature(original)
        names = list(signature.parameters)[: len(target["params"])]
        optional = set(target.get("optional", []))
        returns = list(target.get("returns", []))

        def replacement(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = {
                op: bound.arguments[py] for op, py in zip(target["params"], names, strict=True)
            }
            for name in optional:
                if values[name] is None:
                    values[name] = self._allocate(name, values)
                    if values[name] is None:  # a size only an output has: the original decides
                        return original(*args, **kwargs)
            self.op(*(values[a] for a in self.op_args))
            if not returns:
                return None
            if len(returns) == 1:
                return values[returns[0]]
            return tuple(values[r] for r in returns)

        replacement.__wrapped__ = original  # type: ignore[attr-defined]
        replacement.__doc__ = original.__doc__
        return replacement

    def _allocate(self, name: str, values: dict[str, Any]) -> torch.Tensor | None:
        """An output the wrapper creates when the caller passes None, as the original does."""
        tensors = {
            self.contract_names[k]: v for k, v in values.items() if isinstance(v, torch.Tensor)
        }
        shape = self.runtime.dispatch.output_shape(
            self.contract_names[name], {k: tuple(v.shape) for k, v in tensors.items()}
        )
        if shape is None or not tensors:
            return None
        like = next(iter(tensors.values()))
        kind = self.arg_dtypes[self.contract_names[name]]
        element = next(
            (t.dtype for n, t in tensors.items() if self.arg_dtypes[n] == "T"), like.dtype
        )
        dtype = element if kind == "T" else getattr(torch, kind)
        return torch.empty(shape, dtype=dtype, device=like.device)

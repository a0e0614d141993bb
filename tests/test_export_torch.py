"""The exported package's torch side without a GPU (skipped where torch is not installed, as in
CI): the runtime's launch arguments with CuPy replaced by a recorder, the fallback outside the
domain, the op's schema, and patch()/unpatch() on stand-in framework modules."""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from astra_graph.export.torch_package import export_torch, read_run
from astra_graph.kernel.dtypes import DTYPES
from export_run import finished_run

torch = pytest.importorskip("torch")

ARCH = "sm_90"


class _Recorder:
    """Stands in for CuPy: records every launch instead of running it."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, ...]] = []
        recorder = self

        class Function:
            max_dynamic_shared_size_bytes = 48 * 1024
            shared_size_bytes = 0

            def __init__(self, name: str) -> None:
                self.name = name

            def __call__(self, grid: Any, block: Any, args: Any, **kw: Any) -> None:
                recorder.launches.append((self.name, grid, block, args, kw))

        class Module:
            def __init__(self, path: str) -> None:
                assert Path(path).is_file()

            def get_function(self, name: str) -> Function:
                return Function(name)

        class Device:
            def __init__(self, index: int) -> None:
                pass

            def __enter__(self) -> Device:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

        self.module = types.ModuleType("cupy")
        self.module.RawModule = Module  # type: ignore[attr-defined]
        self.module.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
            Device=Device,
            ExternalStream=lambda handle, device: ("stream", handle, device),
            runtime=types.SimpleNamespace(
                getDeviceProperties=lambda device: {"sharedMemPerBlockOptin": 227 * 1024}
            ),
        )


@dataclass(frozen=True)
class _Device:
    type: str
    index: int


class _CudaTensor:
    """What the runtime reads of a CUDA tensor, without a GPU."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, address: int) -> None:
        self.shape, self.dtype, self.address = shape, dtype, address
        self.device = _Device("cuda", 0)

    def is_contiguous(self) -> bool:
        return True

    def data_ptr(self) -> int:
        return self.address


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, _Recorder, Any]:
    """(run, recorder, imported package) for fused_add_rmsnorm, CuPy and the GPU stood in."""
    recorder = _Recorder()
    monkeypatch.setitem(sys.modules, "cupy", recorder.module)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=77)
    )
    run = read_run(finished_run(tmp_path, "fused_add_rmsnorm"))
    folder = export_torch(run, tmp_path / "out", arch=ARCH)
    monkeypatch.syspath_prepend(str(folder.parent))
    for name in [m for m in sys.modules if m.split(".")[0] == folder.name]:
        monkeypatch.delitem(sys.modules, name)
    return run, recorder, importlib.import_module(folder.name)


def _norm_tensors(run: Any) -> dict[str, _CudaTensor]:
    """fused_add_rmsnorm's tensors at the run's first tuning shape, at distinct addresses."""
    dims = run.spec.contract.suite("tuning")[0]
    tokens, hidden = dims["tokens"], dims["hidden"]
    return {
        "input": _CudaTensor((tokens, hidden), torch.float16, 1 << 20),
        "residual": _CudaTensor((tokens, hidden), torch.float16, 2 << 20),
        "weight": _CudaTensor((hidden,), torch.float16, 3 << 20),
    }


def test_runtime_launches_what_the_header_says(package: tuple[Any, _Recorder, Any]) -> None:
    run, recorder, pkg = package
    pkg.load()
    runtime = sys.modules[f"{pkg.__name__}.op"].RUNTIME
    tensors = _norm_tensors(run)
    tokens, hidden = tensors["input"].shape
    runtime.run(tensors, {"eps": 1e-5}, ())
    assert runtime.last_reason is None
    name, grid, block, args, kw = recorder.launches[-1]
    plan = runtime.dispatch.plan(
        {k: t.shape for k, t in tensors.items()}, dict.fromkeys(tensors, "float16"), ARCH
    )
    assert name == plan.function
    assert (grid, block, kw["shared_mem"]) == run.impl.header.launch(
        run.spec.contract.suite("tuning")[0], DTYPES["float16"], plan.tunables
    )
    assert kw["stream"] == ("stream", 77, 0)
    expected = {"input": 1 << 20, "residual": 2 << 20, "weight": 3 << 20, "hidden": hidden}
    for binding, value in zip(run.impl.bindings, args, strict=True):
        if binding.name == "eps":
            assert value.dtype.name == "float32" and float(value) == pytest.approx(1e-5)
        else:
            assert int(value) == expected[binding.name]
    tensors["residual"] = _CudaTensor((tokens, hidden), torch.float16, (2 << 20) + 2)
    called: list[tuple[Any, ...]] = []
    runtime.fallback = lambda *a: called.append(a)
    runtime.run(tensors, {"eps": 1e-5}, ("original",))  # the same sizes, a misaligned pointer
    assert called == [("original",)] and "aligned" in str(runtime.last_reason)


def test_runtime_falls_back_outside_the_domain(package: tuple[Any, _Recorder, Any]) -> None:
    _, recorder, pkg = package
    pkg.load()
    runtime = sys.modules[f"{pkg.__name__}.op"].RUNTIME
    too_wide = 40000
    tensors = {
        "input": _CudaTensor((4, too_wide), torch.float16, 0),
        "residual": _CudaTensor((4, too_wide), torch.float16, 0),
        "weight": _CudaTensor((too_wide,), torch.float16, 0),
    }
    with pytest.raises(ValueError, match="no original op"):
        runtime.run(tensors, {"eps": 1e-5}, ("original", "arguments"))
    called: list[tuple[Any, ...]] = []
    runtime.fallback = lambda *a: called.append(a)
    runtime.run(tensors, {"eps": 1e-5}, ("original", "arguments"))
    assert called == [("original", "arguments")]
    assert "outside the verified domain" in str(runtime.last_reason)
    assert not recorder.launches


def test_schema_and_patch(package: tuple[Any, _Recorder, Any], monkeypatch: Any) -> None:
    """The op's schema is the framework's; patch() swaps the framework's Python functions for
    wrappers that call the op in its own argument order, unpatch() puts them back."""
    run, _, pkg = package
    op = pkg.load()
    schema = str(op._opoverload._schema)
    assert schema == (
        "astra::fused_add_rms_norm(Tensor(a0!) input, Tensor(a1!) residual, Tensor weight, "
        "float epsilon) -> ()"
    )
    seen: list[tuple[Any, ...]] = []

    def on_cpu(input: Any, residual: Any, weight: Any, epsilon: float) -> None:
        seen.append((input, residual, weight, epsilon))

    torch.library.register_kernel(op, "cpu", on_cpu)
    vllm_ops = types.ModuleType("vllm._custom_ops")
    sgl = types.ModuleType("sgl_kernel")

    def vllm_original(input: Any, residual: Any, weight: Any, epsilon: float) -> None:
        raise AssertionError("the patched function must not reach the original here")

    def sgl_original(
        input: Any, residual: Any, weight: Any, eps: float = 1e-6, enable_pdl: Any = None
    ) -> None:
        raise AssertionError("the patched function must not reach the original here")

    vllm_ops.fused_add_rms_norm = vllm_original  # type: ignore[attr-defined]
    sgl.fused_add_rmsnorm = sgl_original  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm._custom_ops", vllm_ops)
    monkeypatch.setitem(sys.modules, "sgl_kernel", sgl)
    assert pkg.patch() == ["vllm._custom_ops.fused_add_rms_norm", "sgl_kernel.fused_add_rmsnorm"]
    x, r, w = torch.ones(2, 8), torch.ones(2, 8), torch.ones(8)
    vllm_ops.fused_add_rms_norm(x, r, w, 1e-5)
    sgl.fused_add_rmsnorm(x, r, w, enable_pdl=True)  # eps: the framework function's default
    assert [s[3] for s in seen] == [1e-5, 1e-6]
    assert all(s[0] is x and s[1] is r and s[2] is w for s in seen)
    pkg.unpatch()
    assert vllm_ops.fused_add_rms_norm is vllm_original
    assert sgl.fused_add_rmsnorm is sgl_original
    assert run.framework.qualname == "_C::fused_add_rms_norm"


def test_bound_launch_is_the_calls_launch(package: tuple[Any, _Recorder, Any]) -> None:
    """runtime.bound fixes what run() would launch (verify times it as the bench launches a
    kernel): the same function, geometry, arguments and stream, one call each time."""
    run, recorder, pkg = package
    pkg.load()
    runtime = sys.modules[f"{pkg.__name__}.op"].RUNTIME
    tensors = _norm_tensors(run)
    runtime.run(tensors, {"eps": 1e-5}, ())
    bound = runtime.bound(tensors, {"eps": 1e-5})
    assert callable(bound)
    bound()
    bound()
    first, second, third = recorder.launches[-3:]
    assert first[:3] == second[:3] == third[:3]
    assert [int(a) for a in first[3]] == [int(a) for a in third[3]]
    assert first[4] == third[4]
    outside = {**tensors, "weight": _CudaTensor((40000,), torch.float16, 0)}
    assert "weight" in runtime.bound(outside, {"eps": 1e-5})

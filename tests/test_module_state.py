"""The module-state rule (harness.module_state): the ELF reader finds every writable module
variable and device-heap call the compiler records, and the check refuses a kernel that keeps
state from one launch for the next while accepting one whose variables come back to their
values at load. NVRTC compiles here without a GPU; the check's rule runs on NumPy kernels."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from astra_graph.harness import nvrtc
from astra_graph.harness.module_state import (
    ModuleMemory,
    ModuleReadError,
    ModuleState,
    ModuleVariable,
    heap_refusal,
    module_memory,
)

STATEFUL = r"""
__device__ unsigned int g_count = 0;          // initialised: .nv.global.init
__device__ unsigned long long g_seen;         // zero-filled: .nv.global
__constant__ float k_scale[3];                // read-only: not module state
#define HIDDEN(name) __device__ int name[4]
HIDDEN(g_hidden_by_a_macro);
extern "C" __global__ void k(float* out, int n) {
    static __device__ int calls;              // a function's static: module state too
    calls += 1;
    g_count += 1;
    g_seen = (unsigned long long)out;
    g_hidden_by_a_macro[n & 3] = n;
    out[threadIdx.x] = k_scale[0] * n;
}
"""

HEAP = r"""
extern "C" __global__ void k(float* out, int n) {
    float* scratch = (float*)malloc(sizeof(float) * 4);
    scratch[0] = n;
    out[threadIdx.x] = scratch[0];
    free(scratch);
}
"""

STATELESS = r"""
extern "C" __global__ void k(float* out, int n) { out[threadIdx.x] = 2.0f * n; }
"""


def _cubin(source: str) -> bytes:
    compiled = nvrtc.compile_source(source, filename="k.cu", arch="sm_90", name_expressions=["k"])
    assert compiled.ok, compiled.log
    return compiled.cubin


def test_every_writable_module_variable_is_found_whatever_spells_it(needs_nvrtc: None) -> None:
    memory = module_memory(_cubin(STATEFUL))
    names = {v.name: v.size for v in memory.variables}
    assert names.pop("g_count") == 4
    assert names.pop("g_seen") == 8
    assert names.pop("g_hidden_by_a_macro") == 16
    (static,) = names  # the function's static, under its mangled name
    assert "calls" in static and names[static] == 4
    assert not memory.heap_calls and heap_refusal(memory) is None


def test_a_stateless_kernel_has_no_module_memory(needs_nvrtc: None) -> None:
    memory = module_memory(_cubin(STATELESS))
    assert memory.variables == () and memory.heap_calls == ()


def test_device_malloc_is_refused_naming_the_heap(needs_nvrtc: None) -> None:
    memory = module_memory(_cubin(HEAP))
    assert memory.heap_calls == ("malloc",)
    refusal = heap_refusal(memory)
    assert refusal is not None and "malloc()" in refusal and "outlives a launch" in refusal


def test_a_file_that_is_not_an_elf_cubin_is_a_clear_error() -> None:
    with pytest.raises(ModuleReadError, match="ELF"):
        module_memory(b"// not a cubin" + bytes(64))
    with pytest.raises(ModuleReadError):
        module_memory(np.zeros(64, dtype=np.uint8).tobytes())


def test_a_truncated_cubin_is_a_clear_error_not_a_traceback(needs_nvrtc: None) -> None:
    cubin = _cubin(STATEFUL)
    with pytest.raises(ModuleReadError, match="malformed ELF cubin"):
        module_memory(cubin[: len(cubin) // 3])


class HostVariable:
    """Stands in for CuPy's MemoryPointer to a module variable: host bytes, same copy call."""

    def __init__(self, size: int) -> None:
        self.buffer = (ctypes.c_uint8 * size)()

    def copy_to_host(self, destination: int, size: int) -> None:
        ctypes.memmove(destination, self.buffer, size)


class HostModule:
    def __init__(self, sizes: dict[str, int]) -> None:
        self.variables = {name: HostVariable(size) for name, size in sizes.items()}

    def get_global(self, name: str) -> HostVariable:
        return self.variables[name]


def test_the_state_check_names_the_variable_that_kept_something_and_its_first_byte() -> None:
    module = HostModule({"g_count": 4, "table": 16})
    module.variables["table"].buffer[:4] = [1, 2, 3, 4]  # an initialised table, read at load
    memory = ModuleMemory((ModuleVariable("g_count", 4), ModuleVariable("table", 16)), ())
    state = ModuleState(module, memory)
    assert state.carried() is None
    module.variables["g_count"].buffer[2] = 7  # a launch counted itself
    found = state.carried()
    assert found is not None and "'g_count'" in found and "byte 2" in found
    module.variables["g_count"].buffer[2] = 0  # a semaphore back at its value: nothing carried
    assert state.carried() is None

"""The production GELU activations on a real GPU, for every fp16 and bf16 input.

tests/test_gelu_activation_accuracy.py proves the accuracy of each production ``gelu`` from a
host emulation that takes two things on trust: the hardware ex2.approx and rcp.approx lie within
EX2_ULPS and RCP_ULPS of the correctly rounded result, and the compiled arithmetic is the written
one (every step an explicit ``_rn`` intrinsic, so nothing is contracted). Here the kernel's own
``gelu``, compiled as the harness compiles it, runs on all 65536 values of each type, and every
fp32 result must be one the emulation produces for some ex2 and rcp error within those bounds:
then the host's exhaustive bound holds on this GPU too. The GPU's results are also checked
against that bound directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from astra_graph.harness import nvrtc
from astra_graph.harness.compile import gpu_arch
from test_gelu_activation_accuracy import (
    CASES,
    EX2_ULPS,
    KERNELS,
    RCP_ULPS,
    TYPES,
    all_values,
    allowed_error,
    kernel_constants,
    reference_gelu,
    violations,
)

pytestmark = pytest.mark.gpu

PROBE = """
extern "C" __global__ void gelu_probe(const float* a, float* g, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        g[i] = gelu(a[i]);
    }
}
"""
"""A kernel writing the production file's ``gelu`` of each fp32 input, appended to the file."""
PROBE_BLOCK = 256


@pytest.mark.parametrize("op", list(CASES))
def test_every_input_gives_a_result_the_emulation_allows(op: str, tmp_path: Path) -> None:
    import cupy

    path = KERNELS / op / "production.cu"
    arch = gpu_arch()
    assert arch is not None
    # BLOCK: the kernel template's tunable, which its body names (the probe does not use it)
    compiled = nvrtc.compile_source(
        path.read_text() + PROBE,
        filename=path.name,
        arch=arch,
        name_expressions=["gelu_probe"],
        options=["-DBLOCK=128"],
    )
    assert compiled.ok, compiled.log
    cubin = tmp_path / "probe.cubin"
    cubin.write_bytes(compiled.cubin)
    probe = cupy.RawModule(path=str(cubin)).get_function(compiled.lowered_names["gelu_probe"])
    activation = CASES[op][0](kernel_constants(op))
    for dtype in TYPES:
        a = all_values(dtype)
        device_a = cupy.asarray(a)
        device_g = cupy.empty_like(device_a)
        blocks = (a.size + PROBE_BLOCK - 1) // PROBE_BLOCK
        probe((blocks,), (PROBE_BLOCK,), (device_a, device_g, np.int32(a.size)))
        got = cupy.asnumpy(device_g)
        errors = [
            (e, r) for e in range(-EX2_ULPS, EX2_ULPS + 1) for r in range(-RCP_ULPS, RCP_ULPS + 1)
        ]
        emulated = np.stack([activation(a, e, r) for e, r in errors])
        with np.errstate(invalid="ignore"):
            same = (emulated == got) | (np.isnan(emulated) & np.isnan(got))
        missing = ~same.any(axis=0)
        low, high = emulated.min(axis=0), emulated.max(axis=0)
        shown = ", ".join(
            f"a={a[i]!r}: GPU {got[i]!r}, emulated {low[i]!r}..{high[i]!r}"
            for i in np.flatnonzero(missing)[:5]
        )
        assert not missing.any(), f"{dtype}: {int(missing.sum())} results not emulated: {shown}"
        nominal = float(same[errors.index((0, 0))].mean())
        print(f"{op} {dtype}: every result emulated; {nominal:.2%} with exact ex2 and rcp")
        reference = reference_gelu(op, a)
        bad = violations(got, reference, allowed_error(op, dtype, reference))
        assert not bad.any(), f"{dtype}: {int(bad.sum())} GPU results outside the bound"

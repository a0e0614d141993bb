"""NVRTC compilation without a GPU: every shipped kernel builds for sm_90; errors and the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from astra_graph.harness import nvrtc
from astra_graph.harness.compile import CompileFailed, compile_implementation
from astra_graph.kernel.catalog import operations
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import Implementation, load_implementation


@pytest.fixture(autouse=True)
def _needs_nvrtc() -> None:
    try:
        nvrtc.version()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(f"NVRTC unavailable: {exc}")


def shipped() -> list[tuple[str, Path]]:
    return [(spec.name, path) for spec in operations() for path in spec.implementations()]


def implementation(op: str, path: Path) -> Implementation:
    spec = next(s for s in operations() if s.name == op)
    return load_implementation(path, spec.contract)


@pytest.mark.parametrize(("op", "path"), shipped(), ids=lambda v: getattr(v, "name", v))
def test_every_shipped_implementation_compiles_for_sm90_in_every_dtype(op: str, path: Path) -> None:
    impl = implementation(op, path)
    spec = next(s for s in operations() if s.name == op)
    for dtype in spec.contract.dtypes:
        for tunables in impl.header.configurations():
            kernel = compile_implementation(impl, DTYPES[dtype], tunables, arch="sm_90")
            assert kernel.arch == "sm_90"
            assert kernel.resources.registers > 0
            assert kernel.resources.spill_store_bytes == 0, f"{kernel.entry} spills"
            assert DTYPES[dtype].ctype in kernel.entry
            assert impl.header.kernel_name in kernel.lowered_name
            cubin = Path(kernel.cubin_file).read_bytes()
            assert cubin[:4] == b"\x7fELF"
            assert kernel.tunables == {**impl.header.default_tunables(), **tunables}


def test_a_broken_source_names_the_file_and_line(tmp_path: Path) -> None:
    op, path = next(item for item in shipped() if item[1].name == "production.cu")
    good = implementation(op, path)
    lines = good.source.splitlines()
    kernel = next(i for i, line in enumerate(lines) if "__global__" in line)
    # the first line of the kernel's body: its signature may span lines
    body = next(i for i in range(kernel, len(lines)) if lines[i].rstrip().endswith("{"))
    lines.insert(body + 1, "    this_is_not_declared += 1;")
    broken_path = tmp_path / "broken.cu"
    broken = Implementation(
        path=broken_path, source="\n".join(lines), header=good.header, bindings=good.bindings
    )
    with pytest.raises(CompileFailed) as info:
        compile_implementation(broken, DTYPES["float16"], arch="sm_90")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{broken_path}: compile failed: ")
    assert f"broken.cu({body + 2}): error" in message
    assert "this_is_not_declared" in message
    assert "this_is_not_declared" in info.value.log


def test_second_compile_is_a_cache_hit_and_settings_are_keyed() -> None:
    op, path = next(item for item in shipped() if item[1].name == "production.cu")
    impl = implementation(op, path)
    first = compile_implementation(impl, DTYPES["bfloat16"], arch="sm_90")
    second = compile_implementation(impl, DTYPES["bfloat16"], arch="sm_90")
    assert second.cache_hit
    assert second.cubin_file == first.cubin_file
    assert second.lowered_name == first.lowered_name
    assert second.resources == first.resources
    other_dtype = compile_implementation(impl, DTYPES["float16"], arch="sm_90")
    other_arch = compile_implementation(impl, DTYPES["bfloat16"], arch="sm_80")
    for kernel in (other_dtype, other_arch):
        assert kernel.cubin_file != first.cubin_file
    edited = Implementation(
        path=impl.path,
        source=impl.source + "\n// edit\n",
        header=impl.header,
        bindings=impl.bindings,
    )
    recompiled = compile_implementation(edited, DTYPES["bfloat16"], arch="sm_90")
    assert not recompiled.cache_hit and recompiled.cubin_file != first.cubin_file


def test_tunables_become_macros_and_template_arguments(tmp_path: Path) -> None:
    spec = next(s for s in operations() if s.name == "silu_and_mul")
    source = """\
// astra: entry = fill<T, BLOCK>
// astra: grid = 1
// astra: block = BLOCK
// astra: tunable BLOCK = 64, 128
static_assert(BLOCK == 64 || BLOCK == 128, "BLOCK must arrive as a macro");

template <typename T, int B>
__global__ void fill(T* out) { out[threadIdx.x] = T(B); }
"""
    file = tmp_path / "fill.cu"
    file.write_text(source)
    impl = load_implementation(file, spec.contract)
    kernel = compile_implementation(impl, DTYPES["float16"], {"BLOCK": 128}, arch="sm_90")
    assert kernel.entry == "fill<__half, 128>"
    assert "-DBLOCK=128" in kernel.options
    assert not kernel.cache_hit


def test_parse_ptxas_reads_each_kernel() -> None:
    log = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1fPf' for 'sm_90'
ptxas info    : Function properties for _Z1fPf
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, 1024 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z1gPf' for 'sm_90'
ptxas info    : Function properties for _Z1gPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 360 bytes cmem[0]
"""
    found = nvrtc.parse_ptxas(log)
    assert found["_Z1fPf"] == nvrtc.Resources(40, 1024, 8, 4, 4)
    assert found["_Z1gPf"] == nvrtc.Resources(registers=12)


def test_first_errors_picks_error_lines() -> None:
    log = 'k.cu(3): warning: unused\nk.cu(7): error: identifier "x" is undefined\nother\n'
    assert nvrtc.first_errors(log) == [
        'k.cu(7): error: identifier "x" is undefined',
        "k.cu(3): warning: unused",
    ]


def test_the_cccl_wheel_is_found_wherever_python_imports_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel installed with ``pip --target`` (on PYTHONPATH, not in site-packages) is found
    before any other: a folder first on the path holding ``nvidia/cu13/include/cccl/cuda``."""
    wheel = tmp_path / "nvidia" / "cu13" / "include" / "cccl"
    (wheel / "cuda").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert nvrtc._cccl_wheel() == str(wheel)
    (wheel / "cuda").rmdir()  # an include folder without CCCL's headers is not it
    assert nvrtc._cccl_wheel() != str(wheel)


TOOLKIT_CCCL = sorted({p.resolve() for p in Path("/usr/local").glob("cuda*/include/cccl")})
"""The CUDA toolkits' own CCCL folders on this machine (a GPU host without the wheel uses one)."""


def _cccl_folders() -> list[Any]:
    wheel = nvrtc.cccl_include_dirs()
    folders: list[Any] = [pytest.param(wheel, id="found")]
    folders += [pytest.param((str(p),), id=p.parts[-3]) for p in TOOLKIT_CCCL]
    return folders


FLOAT_MACROS = """
#include <cfloat>
#include <float.h>
static_assert(FLT_MAX > 3.4e38f && double(FLT_MAX) < 3.5e38, "FLT_MAX");
static_assert(FLT_EPSILON == 1.0f / 8388608.0f, "FLT_EPSILON");
static_assert(DBL_MAX > 1.7e308 && DBL_EPSILON == 1.0 / 4503599627370496.0, "DBL");
static_assert(FLT_MANT_DIG == 24 && DBL_MANT_DIG == 53 && FLT_RADIX == 2, "digits");
extern "C" __global__ void clamp(float* x) { x[threadIdx.x] = fminf(x[threadIdx.x], FLT_MAX); }
"""


@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("cccl", _cccl_folders())
def test_float_limits_are_defined_under_nvrtc_with_every_cccl(
    cccl: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CUDA 13.0 toolkit's CCCL defines no <float.h> macro under NVRTC, and FlashInfer's
    # norm.cuh uses FLT_MAX: on a GPU host without the CCCL wheel its import failed to compile
    if not cccl:
        pytest.skip("no CCCL found beside the CUDA wheels or CuPy")
    monkeypatch.setattr(nvrtc, "cccl_include_dirs", lambda: cccl)
    out = nvrtc.compile_source(
        FLOAT_MACROS, filename="floats.cu", arch="sm_90", name_expressions=["clamp"]
    )
    assert out.ok, "\n".join(nvrtc.first_errors(out.log))

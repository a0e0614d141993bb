"""The device part of a framework file, made self-contained for NVRTC, and compiled as written.

Which compiler: NVRTC on the device part. nvcc on the whole file needs torch's headers (and a
framework's generated ones), which CI and this project's CPU machines do not have, and a torch
extension build takes about a minute per file on the GPU machines (field notes, section 8);
NVRTC compiles a flattened fixture in well under a second here with no GPU, and its cubin is
what the harness loads anyway. The host code is read by the parser
(:mod:`astra_graph.framework.launchers`), never compiled.

What is changed, and why the code path stays the framework's:

* host functions that use torch (the launchers, ``TORCH_LIBRARY`` blocks) are removed: they
  are host code, and their launches are described in the operation's header instead;
* torch's, ATen's and c10's includes are replaced by :data:`TORCH_TYPES`: ``c10::Half`` *is*
  ``__half`` and ``c10::BFloat16`` *is* ``__nv_bfloat16`` (type aliases, not new types), so a
  kernel instantiated for ``__half`` takes every ``std::is_same_v<scalar_t, c10::Half>`` branch
  that the framework's ``c10::Half`` instantiation takes. Declaring ``c10::Half`` as a type of
  its own would compile the generic path silently (issue 23's trap; a test checks the alias);
* ``<cub/cub.cuh>`` is replaced by CCCL's block- and warp-level headers, the NVRTC-capable
  subset (the whole of cub pulls in host-only code NVRTC refuses: "__host__ function is not
  allowed in JIT mode");
* CUDA runtime and driver headers (``<cuda_runtime.h>``, ``<cuda.h>``), which NVRTC does not
  need (their device builtins are NVRTC's own) and whose ``crt/`` and ``stdlib.h`` are missing
  from the cuda13 wheel, are dropped; ``<numeric>``, ``<algorithm>`` and the like (host-side
  standard library, absent from NVRTC) are dropped too. A kernel that really uses one of them
  then fails to compile with NVRTC's own message naming the symbol, never silently.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from astra_graph.framework.parse import _parser, _walk, text

TORCH_TYPES = """\
// astra-import: torch's element types as CUDA's (aliases: the framework's code paths hold)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
namespace c10 {
using Half = __half;
using BFloat16 = __nv_bfloat16;
}  // namespace c10
namespace at {
using c10::BFloat16;
using c10::Half;
}  // namespace at
"""
TORCH_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/", "Python.h", "tvm/ffi/")
"""Includes of host frameworks: replaced by :data:`TORCH_TYPES` (once)."""
CUB_SUBSET = (
    "cub/block/block_reduce.cuh",
    "cub/block/block_scan.cuh",
    "cub/block/block_load.cuh",
    "cub/block/block_store.cuh",
    "cub/warp/warp_reduce.cuh",
    "cub/thread/thread_operators.cuh",
)
"""CCCL's cub headers that NVRTC compiles, in place of ``<cub/cub.cuh>``."""
DROPPED = {
    "cuda.h",
    "cuda_runtime.h",
    "cuda_runtime_api.h",
    "numeric",
    "algorithm",
    "iostream",
    "vector",
    "string",
    "optional",
    "map",
    "memory",
    "cassert",
    "assert.h",
    "stdlib.h",
    "stdio.h",
    "cstdio",
}
"""Host or runtime headers NVRTC does not have and device code does not need."""
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?P<name>[^>"]+)[>"]', re.M)
_HOST_WORDS = re.compile(
    r"\b(torch|at|c10|pybind11|py)::|\bTORCH_LIBRARY|\bPYBIND11_MODULE|\bTensor\b"
)
_DEVICE_WORDS = ("__global__", "__device__")


@dataclass(frozen=True)
class DeviceSource:
    text: str
    removed_functions: list[str]
    replaced_includes: list[str]


def _replace_include(match: re.Match[str], state: dict[str, bool], replaced: list[str]) -> str:
    name = match["name"]
    if name.startswith(TORCH_PREFIXES):
        replaced.append(name)
        if state.setdefault("torch", False):
            return f"// astra-import: {name} (torch's element types are above)"
        state["torch"] = True
        return TORCH_TYPES
    if name == "cub/cub.cuh":
        replaced.append(name)
        return "\n".join(f"#include <{h}>" for h in CUB_SUBSET)
    if name in DROPPED:
        replaced.append(name)
        return f"// astra-import: dropped #include <{name}> (not needed by device code)"
    return match[0]


def device_source(flattened: str) -> DeviceSource:
    """The flattened file with host code removed and includes made NVRTC's (see above)."""
    data = flattened.encode()
    tree = _parser().parse(data)
    removed: list[tuple[int, int, str]] = []
    for node in _walk(tree.root_node, ("function_definition", "template_declaration")):
        if (
            node.type == "function_definition"
            and node.parent is not None
            and (node.parent.type == "template_declaration")
        ):
            continue  # the template declaration around it is judged instead
        head = text(node).split("{", 1)[0]
        if any(word in head for word in _DEVICE_WORDS) or "__host__" in head:
            continue
        inside = node.parent
        while inside is not None and inside.type not in ("function_definition",):
            inside = inside.parent
        if inside is not None:
            continue
        if _HOST_WORDS.search(text(node)) or "<<<" in text(node):
            name = head.split("(", 1)[0].split()[-1] if "(" in head else head.strip()[:40]
            removed.append((node.start_byte, node.end_byte, name))
    for node in _walk(tree.root_node, ("expression_statement",)):
        if (
            node.parent is not None
            and node.parent.type == "translation_unit"
            and ("TORCH_LIBRARY" in text(node) or "PYBIND11_MODULE" in text(node))
        ):
            removed.append((node.start_byte, node.end_byte, text(node).split("(", 1)[0]))
    for start, end, name in sorted(removed, reverse=True):
        lines = data[start:end].count(b"\n")
        stub = f"// astra-import: host function {name} removed (its launch is in the header)"
        data = data[:start] + stub.encode() + b"\n" * lines + data[end:]
    state: dict[str, bool] = {}
    replaced: list[str] = []
    out = _INCLUDE.sub(lambda m: _replace_include(m, state, replaced), data.decode())
    if not state.get("torch") and ("c10::" in out or "at::Half" in out):
        out = TORCH_TYPES + out
    return DeviceSource(
        text=out,
        removed_functions=[name for _, _, name in sorted(removed)],
        replaced_includes=list(dict.fromkeys(replaced)),
    )


@dataclass(frozen=True)
class DeviceCompile:
    ok: bool
    seconds: float
    log: str
    lowered: dict[str, str]


def compile_device(source: str, entries: list[str], arch: str = "sm_90") -> DeviceCompile:
    """Compile the device source with NVRTC for ``entries`` (name expressions)."""
    from astra_graph.harness import nvrtc

    started = time.perf_counter()
    out = nvrtc.compile_source(source, filename="imported.cu", arch=arch, name_expressions=entries)
    return DeviceCompile(out.ok, time.perf_counter() - started, out.log, out.lowered_names)

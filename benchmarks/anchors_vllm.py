"""vLLM's own kernels as anchors, brought in by ``astra import`` (issue 25 item 1).

:func:`import_anchor` imports one vLLM launcher of the pinned release (``.frameworks/``, never
copied into the repository) with :func:`astra_graph.framework.importer.import_file`, each file
once for the launchers of every anchor in it: the
imported operation's ``production.cu`` is the vLLM kernel as vLLM compiles it (its template
arguments, launch geometry and conditions as the launcher computes them), under its own drafted
contract: its own dim names, argument order, and dims such as ``input_1 = 2 * d``.

**The shape mapping.** Our contract and the imported one name the same problem differently, so
each operation has a small explicit table (:data:`VLLM_ANCHORS`): the axes of the imported
tensors in vLLM's real call, or the imported dims, as expressions over ours; our tensors and the
imported ones they stand for, the template path vLLM's launcher takes for our suites (a regex
over the imported site's entry) and the shapes vLLM refuses, each with its reason.
:func:`map_shapes` checks the table against the imported ``contract.toml`` and ``production.cu``
header at every suite shape and dtype: each tensor given axes has as many in the draft (its
strides follow them) and those sizes, every dim of the contract gets one value, the mapped shape
is in the imported contract's domain, the site's launch conditions (``requires``) hold (vLLM
launches this path there), and each of our tensors has the same element type and element count
as the imported one it stands for (or fewer, where the draft over-allocates a tensor the kernel
only partly touches, with the reason in the table). A shape that fails any of these is not timed
and gets its one-line reason; none is skipped silently. A dim is keyed by the tensor axis it
sizes where it can be, not by the name the draft gives it (``input_1``, ``out_1``): the draft's
names follow the importer's rules, which change; the launcher's tensors and their axes are
vLLM's. Whether vLLM computes the same operation in the same layout is in each table's
``layout``; where the layouts or the instantiation differ (merge's ``[heads, tokens]``
log-sum-exp, rms_norm's rank-4 template), the rows are timed but marked not the same work, and
the summary keeps them apart from the geomean.

**What is measured, and the noise.** The two kernels have different contracts, so the usual
A-vs-B bench (one request, both sides interleaved sample by sample) cannot hold them. Each side
is timed alone with the same protocol, ``Evaluator.bench`` in device mode (L2 flushed before
every sample or cold copies inside a CUDA graph, median of the samples, the harness's own
re-check of the timed outputs), on the same worker process and GPU, one request per side and
dtype covering every mapped shape. The sides alternate A B, B A, A B, ... for
:data:`DEFAULT_ROUNDS` rounds, so drift in clock or temperature hits both alike. Per shape,
``speedup`` is the median over rounds of (vLLM time / production time) of the same round, and
its noise ``speedup_err`` is the larger of half the range of those per-round ratios (the
between-request spread, the dominant term when the sides are not interleaved sample by sample)
and the within-request error (the ratio times the root-sum-square of both medians' relative
standard errors, the median over rounds). ``call`` is the project's rule
(:func:`astra_graph.harness.selection.call`): a tie within 2% or 2 sigma.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from frameworks import INCLUDE_ROOTS
from releases import PINNED

if TYPE_CHECKING:
    from astra_graph.framework.importer import ImportReport

IMPORT_ARCH = "sm_90"
"""The H100's architecture: the import expresses vLLM's compute-capability conditions for it."""


@dataclass(frozen=True)
class ImportedRelease:
    """A framework release whose kernels come in through ``astra import``: its pinned version
    (``benchmarks/releases.py``) and include folders, build defines and C++ standard
    (``benchmarks/frameworks.py``) are stated there once."""

    package: str
    label: str
    sentinel: str
    """A file the unpacked release has: a folder without it is no such release."""

    @property
    def version(self) -> str:
        return PINNED[self.package].version

    @property
    def include_roots(self) -> tuple[str, ...]:
        return INCLUDE_ROOTS[self.package]


RELEASES = {
    "vllm": ImportedRelease("vllm", "vLLM", "csrc/activation_kernels.cu"),
    "sglang": ImportedRelease(
        "sglang", "SGLang", "sglang/kernels/jit/csrc/elementwise/activation.cuh"
    ),
    "flashinfer": ImportedRelease(
        "flashinfer-python", "FlashInfer", "flashinfer/data/include/flashinfer/norm.cuh"
    ),
}
"""The releases imported anchors come from, by ``--frameworks`` name."""
VLLM = ("vllm", RELEASES["vllm"].version)
SGLANG = ("sglang", RELEASES["sglang"].version)
DEFAULT_ROUNDS = 3
"""A B / B A / A B: the smallest alternation that gives a spread and cancels linear drift."""
DTYPES = ("float16", "bfloat16")
SUITES = ("tuning", "heldout", "edge")


@dataclass(frozen=True)
class LaunchPath:
    """One template path of a vLLM launcher: taken for our shapes where ``when`` holds."""

    when: str
    """Condition over our dims ('1': every shape)."""
    entry: str
    """Regex the imported site's ``entry`` must match (searched)."""


@dataclass(frozen=True)
class VllmAnchor:
    op: str
    file: str
    """Relative to the release's root."""
    launcher: str
    paths: tuple[LaunchPath, ...]
    why_path: str
    """Why vLLM's launcher takes this path for our suites (alignment, arch, flags)."""
    args: Mapping[str, str]
    """Our tensor -> the imported tensor it stands for."""
    dims: Mapping[str, str] = field(default_factory=dict)
    """Imported dim -> expression over our dims: for a dim that sizes no tensor of ``axes``."""
    axes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Imported tensor -> its axes in vLLM's call, over our dims: each axis that the draft sizes
    by a dim gives that dim its value, whatever the draft names it."""
    larger: Mapping[str, str] = field(default_factory=dict)
    """Imported tensor the draft makes larger than ours -> why the kernel touches only ours."""
    retyped: Mapping[str, str] = field(default_factory=dict)
    """Imported tensor whose element type is not ours -> what the framework's call holds there
    (FlashInfer's float32 cos/sin cache, its int32 positions): its bytes differ, the layout
    says so."""
    absent: Mapping[str, str] = field(default_factory=dict)
    """Our tensor the imported call has none of -> why (the framework's call leaves it out, so
    its side does less work; the layout says so)."""
    refused: tuple[tuple[str, str], ...] = ()
    """(condition over our dims, why vLLM's launcher refuses or routes the shape elsewhere)."""
    layout: str = "same layout"
    same_work: bool = True
    source: str = "vllm"
    """The release it comes from (:data:`RELEASES`)."""

    @property
    def framework(self) -> str:
        release = RELEASES[self.source]
        return f"{release.label} {release.version}"

    @property
    def kernel(self) -> str:
        return f"{self.launcher} ({self.file})"


ACTIVATION_PATH = (
    "vLLM's launcher takes the 16-byte vector path (use_vec, d % 8 == 0: every suite shape); "
    "the 256-bit path needs cc_major >= 10 and is not taken on the H100"
)
ACTIVATION_LAYOUT = (
    "same layout: input [tokens, 2d] (gate then up), out [tokens, d], act(gate) * up; vLLM "
    "rounds act(gate) to T before the product (ours rounds once), the same work"
)


def _activation(op: str, launcher: str, act: str) -> VllmAnchor:
    return VllmAnchor(
        op=op,
        file="csrc/activation_kernels.cu",
        launcher=launcher,
        # act_and_mul_kernel<scalar_t, packed_t, ACT, PACKED_ACT, act_first, use_vec,
        # HAS_CLAMP, use_256b>
        paths=(LaunchPath("1", rf"vllm::{act}<.*,\s*true,\s*true,\s*false,\s*false>\s*$"),),
        why_path=ACTIVATION_PATH,
        dims={"tokens": "tokens", "input_1": "2 * d"},
        args={"x": "input", "out": "out"},
        larger={"out": "drafted as input's shape [tokens, 2d]; the kernel writes tokens * d"},
        layout=ACTIVATION_LAYOUT,
    )


VLLM_ANCHORS: tuple[VllmAnchor, ...] = (
    _activation("silu_and_mul", "silu_and_mul", "silu_kernel"),
    _activation("gelu_and_mul", "gelu_and_mul", "gelu_kernel"),
    _activation("gelu_tanh_and_mul", "gelu_tanh_and_mul", "gelu_tanh_kernel"),
    VllmAnchor(
        op="rms_norm",
        file="csrc/layernorm_kernels.cu",
        launcher="rms_norm",
        # rms_norm_kernel<scalar_t, vec_size, tensor_rank, has_weight>
        paths=(LaunchPath("1", r"rms_norm_kernel<[^,]+,\s*8,\s*4,\s*true>\s*$"),),
        why_path="vec_size = gcd(16 / sizeof(T), hidden) = 8 (hidden % 8 == 0), a weight; the "
        "import keeps one tensor_rank of VLLM_STABLE_DISPATCH_RANK234, 4, so the input is "
        "viewed [tokens, 1, 1, hidden]",
        args={"input": "input", "out": "out", "weight": "weight"},
        # out and weight are drafted as input's shape: input's axes size every dim
        axes={"input": ("tokens", "1", "1", "hidden")},
        larger={"weight": "a 1-D weight [hidden] is read; the draft may give it the input's shape"},
        layout="PATH DIFFERS: input and out [tokens, hidden] contiguous, weight [hidden] alike, "
        "but vLLM launches the rank-2 instantiation for a 2-D input and only the rank-4 one "
        "imports: the same rows and bytes, plus its row index (a 64-bit division and remainder "
        "by the two unit axes a block)",
        same_work=False,
    ),
    VllmAnchor(
        op="fused_add_rmsnorm",
        file="csrc/layernorm_kernels.cu",
        launcher="fused_add_rms_norm",
        # fused_add_rms_norm_kernel<scalar_t, width, has_weight>
        paths=(LaunchPath("1", r"fused_add_rms_norm_kernel<[^,]+,\s*8,\s*true>\s*$"),),
        why_path="width 8: the pointers are 16-byte aligned and hidden % 8 == 0 (every suite "
        "shape), a weight; the width-0 path is vLLM's fallback for unaligned rows",
        # residual is asked only its row stride: drafted as input's shape (its strided twin)
        dims={"tokens": "tokens", "hidden_size": "hidden"},
        args={"input": "input", "residual": "residual", "weight": "weight"},
        larger={"weight": "drafted as input's shape; the kernel reads weight[0:hidden]"},
        layout="same layout: input and residual [tokens, hidden] in place, weight [hidden]",
    ),
    VllmAnchor(
        op="rotary_embedding",
        file="csrc/pos_encoding_kernels.cu",
        launcher="rotary_embedding",
        # rotary_embedding_kernel<query_t, cache_t, IS_NEOX>
        paths=(
            LaunchPath("neox == 1", r"rotary_embedding_kernel<[^,]+,\s*[^,]+,\s*true>\s*$"),
            LaunchPath("neox == 0", r"rotary_embedding_kernel<[^,]+,\s*[^,]+,\s*false>\s*$"),
        ),
        why_path="is_neox picks the template (NeoX halves or GPT-J pairs); rot_dim = head_size "
        "(the cache's width), rope_dim_offset 0 (vLLM's default); the draft passes inverse = "
        "true (its bool default), the same rotation by -theta: the same work",
        # head_size and rope_dim_offset are the launcher's integers, sizing no tensor
        dims={"head_size": "head_size", "rope_dim_offset": "0"},
        axes={
            "positions": ("tokens",),
            "query": ("tokens", "num_heads * head_size"),
            "key": ("tokens", "num_kv_heads * head_size"),
            "cos_sin_cache": ("8192", "head_size"),
        },
        args={
            "positions": "positions",
            "query": "query",
            "key": "key",
            "cos_sin_cache": "cos_sin_cache",
        },
        refused=(
            (
                "num_heads % num_kv_heads != 0",
                "vLLM's launcher refuses it: STD_TORCH_CHECK(num_heads % num_kv_heads == 0)",
            ),
        ),
        layout="same layout: positions int64 [tokens], query/key [tokens, heads * head_size] "
        "in place, cos_sin_cache [max_position, head_size] in T (cos half then sin half); the "
        "draft draws positions below min(tokens, 8192) where ours span the 8192 rows: one cache "
        "row a token on both sides, vLLM's rows may repeat at small token counts",
    ),
    VllmAnchor(
        op="merge_attn_states_lse",
        file="csrc/attention/merge_attn_states.cu",
        launcher="merge_attn_states_launcher",
        # merge_attn_states_kernel<scalar_t, output_t, NUM_THREADS, USE_FP8_OUTPUT>
        paths=(LaunchPath("1", r"merge_attn_states_kernel<.*,\s*false>\s*$"),),
        why_path="no output scale: output_t = scalar_t, USE_FP8_OUTPUT false; 128 threads, "
        "one 16-byte pack per thread",
        args={
            "v_a": "prefix_output",
            "s_a": "prefix_lse",
            "v_b": "suffix_output",
            "s_b": "suffix_lse",
            "v_merged": "output",
        },
        absent={
            "s_merged": "the import passes output_lse as nullptr (the launcher's output_lse_ptr "
            "before its assignment under output_lse.has_value()), vLLM's call with output_lse "
            "None: its kernel writes no log-sum-exp"
        },
        # vLLM's call: values [tokens, heads, head_dim] (prefix_head_stride = stride(1) =
        # head_dim), log-sum-exps [heads, tokens] (contiguous: token stride 1)
        axes={
            "output": ("tokens", "heads", "head_dim"),
            "prefix_output": ("tokens", "heads", "head_dim"),
            "suffix_output": ("tokens", "heads", "head_dim"),
            "prefix_lse": ("heads", "tokens"),
            "suffix_lse": ("heads", "tokens"),
        },
        layout="LAYOUT DIFFERS: vLLM's log-sum-exps are [heads, tokens] (ours [tokens, heads]) "
        "and natural-log (expf/logf; ours base 2); values [tokens, heads, head_dim] alike; vLLM's "
        "side writes no merged log-sum-exp (output_lse None, as imported), ours does: "
        "tokens * heads * 4 bytes less work on vLLM's side",
        same_work=False,
    ),
    VllmAnchor(
        op="per_token_fp8_quant",
        file="csrc/quantization/w8a8/fp8/common.cu",
        launcher="dynamic_per_token_scaled_fp8_quant",
        # dynamic_per_token_scaled_fp8_quant_kernel_strided<scalar_t, fp8_t>
        paths=(LaunchPath("1", r"dynamic_per_token_scaled_fp8_quant_kernel_strided<"),),
        why_path="the one launch: 256 threads a token; the import passes scale_ub (an optional "
        "tensor imported as given), so vLLM's side also reads one float a token and clamps amax "
        "by it, where vLLM's per-token activation call passes none",
        args={"x": "input", "out": "out", "scale": "scales"},
        axes={"input": ("tokens", "hidden"), "out": ("tokens", "hidden")},
        larger={"scales": "drafted as out's shape; the kernel writes scale[token], one a token"},
        layout="PATH DIFFERS: input [tokens, hidden], out float8_e4m3fn [tokens, hidden], one "
        "float32 scale a token, scale = max(amax / 448, 1 / (448 * 512)) alike, but vLLM's side "
        "also reads scale_ub (one float a token) and clamps amax by it, which vLLM's own "
        "per-token call does not: slightly more work than the call it stands for",
        same_work=False,
    ),
)


SGLANG_ELEMENTWISE = "sglang/kernels/jit/csrc/elementwise"
SGLANG_ACTIVATION_PATH = (
    "run_activation: select_kernel(type) with no expert filter, no rounding, not in place "
    "(act_and_mul_kernel<T, kind, kUsePDL, false, false, false, false, false>); 16-byte "
    "vectors (hidden % 8 == 0, which the launcher checks); kUsePDL imported as false "
    "(programmatic dependent launch overlaps a kernel with the one before it, which a kernel "
    "timed alone does not have)"
)
SGLANG_ACTIVATION_LAYOUT = (
    "same layout: input [tokens, 2d] (gate then up), out [tokens, d], act(gate) * up, the same work"
)


def _sglang_activation(op: str, kind: str) -> VllmAnchor:
    return VllmAnchor(
        op=op,
        file=f"{SGLANG_ELEMENTWISE}/activation.cuh",
        launcher="launch",
        paths=(LaunchPath("1", rf"ActivationKind::{kind},\s*false(,\s*false){{5}}>\s*$"),),
        why_path=SGLANG_ACTIVATION_PATH,
        args={"x": "input", "out": "out"},
        axes={"input": ("tokens", "2 * d"), "out": ("tokens", "d")},
        layout=SGLANG_ACTIVATION_LAYOUT,
        source="sglang",
    )


SGLANG_ANCHORS: tuple[VllmAnchor, ...] = (
    _sglang_activation("silu_and_mul", "kSiLU"),
    _sglang_activation("gelu_and_mul", "kGELU"),
    _sglang_activation("gelu_tanh_and_mul", "kGELUTanh"),
    VllmAnchor(
        op="fused_add_rmsnorm",
        file=f"{SGLANG_ELEMENTWISE}/fused_add_rmsnorm.cuh",
        launcher="run",
        # fused_add_rmsnorm_reg_kernel<kCastXBeforeOutMul, DType, kMaxVecBytes>
        paths=(LaunchPath("1", r"fused_add_rmsnorm_reg_kernel<false,\s*T,\s*16>\s*$"),),
        why_path="the register kernel, SGLang's only path on the H100 (16-byte vectors, hidden "
        "<= 8192: larger hidden sizes are refused, 'not supported for now'); "
        "kCastXBeforeOutMul imported as false (the caller's flag)",
        args={"input": "input", "residual": "residual", "weight": "weight"},
        axes={
            "input": ("tokens", "hidden"),
            "residual": ("tokens", "hidden"),
            "weight": ("hidden",),
        },
        layout="same layout: input and residual [tokens, hidden] in place, weight [hidden]",
        source="sglang",
    ),
    VllmAnchor(
        op="rms_norm",
        file=f"{SGLANG_ELEMENTWISE}/rmsnorm.cuh",
        launcher="run",
        # rmsnorm_warp / rmsnorm_cta<kDim, kUsePDL, DType>, kDim specialized on the hidden size
        paths=(
            LaunchPath("hidden <= 256", r"rmsnorm_warp<ASTRA_SIZE_KDIM,\s*false,\s*T>\s*$"),
            LaunchPath("hidden > 256", r"rmsnorm_cta<ASTRA_SIZE_KDIM,\s*false,\s*T>\s*$"),
        ),
        why_path="built per hidden size as SGLang's JIT builds it (kDim = hidden, one build per "
        "size: specialized on the shape); RMSNormWarpKernel's warp kernel up to 256, "
        "RMSNormKernel's CTA kernel above; RMSNormHalfKernel (kDim % 512 == 0, 16-bit: its "
        "#if SGL_ARCH_BLACKWELL_OR_GREATER member now imported and checked against itself) is "
        "not timed: one path is timed per size, and which class SGLang's Python calls at a size "
        "is not in the release's kernel files; kUsePDL imported as false",
        args={"input": "input", "out": "output", "weight": "weight"},
        axes={
            "input": ("tokens", "hidden"),
            "output": ("tokens", "hidden"),
            "weight": ("hidden",),
        },
        refused=(
            (
                "hidden != 64 and hidden != 128 and hidden != 256 "
                "and (hidden < 512 or hidden % 256 != 0 or hidden > 8192)",
                "SGLang builds its rmsnorm for 64, 128, 256 and multiples of 256 up to 8192 "
                "(is_config_supported's static_asserts): no kernel at this size",
            ),
        ),
        layout="same layout: input and out [tokens, hidden] contiguous, weight [hidden]",
        source="sglang",
    ),
)
"""SGLang 0.5.23's JIT kernels, imported at its build's C++20 and ``SGL_CUDA_ARCH``."""

FLASHINFER_NORM = "flashinfer/data/include/flashinfer/norm.cuh"
FLASHINFER_NORM_PATH = (
    "vec_size = gcd(16 / sizeof(T), hidden) = 8 (hidden % 8 == 0: every suite shape), "
    "min(1024, hidden / 8) threads as 32 x warps, weight_bias 0, no PDL (the binding's "
    "enable_pdl off: programmatic dependent launch overlaps a kernel with the one before it, "
    "which a kernel timed alone does not have); FlashInfer's csrc/norm.cu binding calls it, "
    "as SGLang's sgl-kernel norms do"
)
FLASHINFER_NARROW = (
    "hidden % 8 != 0",
    "FlashInfer's launcher takes a narrower vector (gcd(8, hidden)), an instantiation not imported",
)

FLASHINFER_POS_ENC = "flashinfer/data/include/flashinfer/pos_enc.cuh"

FLASHINFER_ANCHORS: tuple[VllmAnchor, ...] = (
    VllmAnchor(
        op="rms_norm",
        file=FLASHINFER_NORM,
        launcher="RMSNorm",
        # RMSNormKernel<VEC_SIZE, T>
        paths=(LaunchPath("1", r"RMSNormKernel<8,\s*T>\s*$"),),
        why_path=FLASHINFER_NORM_PATH,
        args={"input": "input", "out": "output", "weight": "weight"},
        axes={
            "input": ("tokens", "hidden"),
            "output": ("tokens", "hidden"),
            "weight": ("hidden",),
        },
        refused=(FLASHINFER_NARROW,),
        layout="same layout: input and out [tokens, hidden] contiguous, weight [hidden]",
        source="flashinfer",
    ),
    VllmAnchor(
        op="fused_add_rmsnorm",
        file=FLASHINFER_NORM,
        launcher="FusedAddRMSNorm",
        # FusedAddRMSNormKernel<VEC_SIZE, T>
        paths=(LaunchPath("1", r"FusedAddRMSNormKernel<8,\s*T>\s*$"),),
        why_path=FLASHINFER_NORM_PATH + "; the fp32 row in (hidden + warps) * 4 bytes of shared "
        "memory",
        args={"input": "input", "residual": "residual", "weight": "weight"},
        axes={
            "input": ("tokens", "hidden"),
            "residual": ("tokens", "hidden"),
            "weight": ("hidden",),
        },
        refused=(FLASHINFER_NARROW,),
        layout="same layout: input and residual [tokens, hidden] in place, weight [hidden]",
        source="flashinfer",
    ),
    VllmAnchor(
        op="rotary_embedding",
        file=FLASHINFER_POS_ENC,
        launcher="BatchQKApplyRotaryPosIdsCosSinCache",
        # BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<INTERLEAVE, HEAD_DIM,
        # vec_size, bdx, DType, IdType>, HEAD_DIM and the two after it built per head size
        paths=(
            LaunchPath(
                "neox == 0 and ceil_div(tokens, 128 // (head_size // max(8, head_size // 32))) "
                "< 132 * 16",
                r"HeadParallelismKernel<true,\s*ASTRA_SIZE_HEAD_DIM,",
            ),
        ),
        why_path="apply_rope_pos_ids_cos_sin_cache (csrc/rope.cu) at a head size of 64, 128, "
        "256 or 512: DISPATCH_HEAD_DIM builds one kernel per head size (imported as a "
        "specialization on it), 16-byte vectors, one block row a head for every query and key "
        "head (its head-parallel kernel, taken where the blocks of tokens are fewer than the "
        "GPU's resident blocks: at every suite shape; 132 SMs x 16 blocks of 128 threads)",
        dims={"cos_sin_cache_0": "8192"},
        axes={
            "pos_ids": ("tokens",),
            "q": ("tokens", "num_heads", "head_size"),
            "k": ("tokens", "num_kv_heads", "head_size"),
            "q_rope": ("tokens", "num_heads", "head_size"),
            "k_rope": ("tokens", "num_kv_heads", "head_size"),
            "cos_sin_cache": ("8192", "head_size"),
        },
        args={
            "positions": "pos_ids",
            "query": "q",
            "key": "k",
            "cos_sin_cache": "cos_sin_cache",
        },
        retyped={
            "cos_sin_cache": "FlashInfer's cache is float32 (ours the element type): twice the "
            "cache bytes a token",
            "pos_ids": "FlashInfer's positions are int32 (ours int64): half the bytes",
        },
        refused=(
            (
                "neox == 1",
                "FlashInfer's NeoX kernel (INTERLEAVE false) is the launcher's other "
                "instantiation of a flag its caller passes: the import keeps the first "
                "(interleave true, GPT-J pairs)",
            ),
            (
                "head_size != 64 and head_size != 128 and head_size != 256 and head_size != 512",
                "FlashInfer routes other head sizes to its RopeQuantize kernel, not imported",
            ),
        ),
        layout="LAYOUT DIFFERS: query/key [tokens, heads, head_size] alike, but FlashInfer "
        "writes the rotated heads to q_rope/k_rope (out of place: the same bytes), reads a "
        "float32 cache [8192, head_size] (twice ours a token) and int32 positions (half ours)",
        same_work=False,
        source="flashinfer",
    ),
)
"""FlashInfer 0.7.2.post1's norm and rotary launchers, imported from the headers as the wheel
ships them (its TensorRT-LLM includes kept out by the import's flattening)."""
IMPORTED_ANCHORS = VLLM_ANCHORS + SGLANG_ANCHORS + FLASHINFER_ANCHORS


class VllmAnchorError(Exception):
    """Bad input (a release folder without the framework's sources): one line."""


def release_root(given: Path | None, source: str = "vllm") -> Path:
    """The unpacked release of ``source``: ``given`` (``--vllm``, ``--sglang``), or the pinned
    one fetched by releases.py."""
    release = RELEASES[source]
    if given is None:
        import releases  # benchmarks/releases.py: fetches into .frameworks/

        given = releases.fetch(release.package, release.version)
    if not (given / release.sentinel).is_file():
        raise VllmAnchorError(
            f"--{source} {given}: expected {release.label}'s release folder (with "
            f"{release.sentinel})"
        )
    return given


@dataclass
class Site:
    """One imported launch site of the anchor's launcher."""

    op: str
    folder: Path
    entry: str


@dataclass
class Imported:
    """What the import of one anchor's launcher gave: the sites that came in, and the one-line
    reasons of those that did not (the import's own words)."""

    sites: list[Site]
    refused: list[str]
    seconds: float
    """NVRTC's time for the import of the anchor's file, which every anchor from it shares."""


def import_anchor(anchor: VllmAnchor, root: Path, out: Path) -> Imported:
    """``anchor.launcher``'s sites of ``root/anchor.file``, from the one import of that file
    that every anchor from it shares (:func:`_file_report`, NVRTC, no GPU)."""
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.header import load_implementation

    launchers = frozenset(
        {
            anchor.launcher,
            *(
                a.launcher
                for a in IMPORTED_ANCHORS
                if a.source == anchor.source and a.file == anchor.file
            ),
        }
    )
    report = _file_report(root, anchor.file, out, launchers, anchor.source)
    results = [r for r in report.launchers if r.launcher == anchor.launcher]
    sites: list[Site] = []
    refused: list[str] = []
    for result in results:
        if result.imported and result.folder:
            folder = Path(result.folder)
            spec = load_contract(folder)
            header = load_implementation(folder / "production.cu", spec.contract).header
            sites.append(Site(result.op or folder.name, folder, header.entry))
        elif result.applicable:
            refused.append(f"{result.launcher}:{result.line} {result.kernel}: {result.reason}")
    if not results:
        refused.append(f"{anchor.file}: no launcher named {anchor.launcher}")
    return Imported(sites, refused, report.compile_seconds)


@functools.cache
def _file_report(
    root: Path, file: str, out: Path, launchers: frozenset[str], source: str = "vllm"
) -> ImportReport:
    """The import of ``launchers`` of ``root/file`` into ``out/<source>/<file without its
    suffix>/``, made once per process for every anchor's launcher of the file at once: the
    file is flattened, parsed and compiled once, not once per operation. The build's defines
    and C++ standard are the ones benchmarks/frameworks.py states for the release."""
    from frameworks import STANDARDS, build_defines

    from astra_graph.framework.flatten import include_folders
    from astra_graph.framework.importer import import_file

    release = RELEASES[source]
    folders = include_folders(root, [root / r for r in release.include_roots], None)
    return import_file(
        root / file,
        folders,
        out / source / Path(file).with_suffix(""),
        arch=IMPORT_ARCH,
        only=launchers,
        defines=build_defines(release.package, IMPORT_ARCH),
        std=STANDARDS.get(release.package),
    )


@dataclass
class Mapped:
    """Our shape, and the imported site and shape that time the same call in vLLM, or why not."""

    ours: dict[str, int]
    label: str
    dtype: str
    site: Site | None = None
    theirs: dict[str, int] | None = None
    reason: str = ""


def _truthy(condition: str, dims: Mapping[str, int]) -> bool:
    from astra_graph.kernel import expr

    return bool(expr.evaluate(condition, dims))


def _arg_problem(
    anchor: VllmAnchor,
    ours: Any,
    theirs: Any,
    dims: Mapping[str, int],
    mapped: Mapping[str, int],
    dtype: str,
) -> str:
    """Why our tensors and the imported ones they stand for differ at this shape, or ''."""
    by_name = {a.name: a for a in theirs.contract.args}
    for arg in ours.contract.args:
        other_name = anchor.args.get(arg.name)
        if other_name is None and arg.name in anchor.absent:
            continue
        if other_name is None:
            return f"mapping: our tensor {arg.name!r} has no vLLM tensor in VLLM_ANCHORS"
        other = by_name.get(other_name)
        if other is None:
            return f"imported contract has no tensor {other_name!r} (for our {arg.name!r})"
        ours_t, theirs_t = (
            ours.contract.dtype_of(arg, dtype),
            theirs.contract.dtype_of(other, dtype),
        )
        if ours_t.name != theirs_t.name and other_name not in anchor.retyped:
            return f"{other_name} is {theirs_t.name} in vLLM's draft, our {arg.name} {ours_t.name}"
        n_ours = math.prod(ours.contract.shape_of(arg, dims))
        n_theirs = math.prod(theirs.contract.shape_of(other, mapped))
        if n_theirs < n_ours or (n_theirs > n_ours and other_name not in anchor.larger):
            return (
                f"mapping: {other_name} has {n_theirs} elements, our {arg.name} {n_ours}: the "
                "dims table does not describe the same call"
            )
    return ""


def _their_dims(
    anchor: VllmAnchor, theirs: Any, dims: Mapping[str, int]
) -> tuple[dict[str, int], str]:
    """The imported contract's dims for our shape ``dims``, from the table's ``dims`` and the
    axes of its ``axes`` tensors, or why the table does not fit the imported contract."""
    values = {k: _int(v, dims) for k, v in anchor.dims.items()}
    by_name = {a.name: a for a in theirs.contract.args}
    for tensor, axes in anchor.axes.items():
        arg = by_name.get(tensor)
        if arg is None:
            return values, f"the imported contract has no tensor {tensor!r}: update VLLM_ANCHORS"
        if len(arg.shape) != len(axes):
            # the draft's strides follow its axes (a 2-D prefix_output has stride(1) == 1): a
            # tensor of another rank is another call, whatever its element count
            return values, (
                f"{tensor} is drafted with {len(arg.shape)} axes {list(arg.shape)}, vLLM's call "
                f"has {len(axes)} ({', '.join(axes)}): the draft is not that call"
            )
        for name, axis in zip(arg.shape, axes, strict=True):
            size = _int(axis, dims)
            if name in theirs.contract.dims and values.setdefault(name, size) != size:
                return values, f"mapping gives {name} both {values[name]} and {size} ({tensor})"
    if set(values) != set(theirs.contract.dims):
        return values, (
            f"mapping gives dims {sorted(values)}, the imported contract has "
            f"{sorted(theirs.contract.dims)}: update VLLM_ANCHORS"
        )
    for tensor, axes in anchor.axes.items():  # an axis the draft sizes by an expression
        drafted = theirs.contract.shape_of(by_name[tensor], values)
        wanted = tuple(_int(axis, dims) for axis in axes)
        if drafted != wanted:
            return (
                values,
                f"mapping: {tensor} is {list(drafted)} at the mapped dims, not {list(wanted)}",
            )
    return {k: values[k] for k in theirs.contract.dims}, ""


def map_shapes(
    anchor: VllmAnchor, ours: Any, imported: Imported, shapes: Sequence[Mapping[str, int]]
) -> list[Mapped]:
    """Every (shape, dtype) of ours, mapped to the imported site and dims vLLM launches for it,
    or with the reason it is not timed (see the module docstring for the checks)."""
    from astra_graph.kernel.contract import load_contract
    from astra_graph.kernel.dtypes import DTYPES as KNOWN
    from astra_graph.kernel.header import load_implementation

    loaded = {s.op: (load_contract(s.folder), s) for s in imported.sites}
    out: list[Mapped] = []
    for dtype in DTYPES:
        for dims in shapes:
            row = Mapped(dict(dims), ours.contract.label(dims), dtype)
            out.append(row)
            refused = next((why for when, why in anchor.refused if _truthy(when, dims)), "")
            if refused:
                row.reason = refused
                continue
            path = next((p for p in anchor.paths if _truthy(p.when, dims)), None)
            if path is None:
                row.reason = "mapping: no path of VLLM_ANCHORS applies to this shape"
                continue
            matching = [(spec, s) for spec, s in loaded.values() if re.search(path.entry, s.entry)]
            if not matching:
                why = "; ".join(dict.fromkeys(imported.refused)) or "no site of it came in"
                row.reason = f"vLLM's path for it ({path.entry}) did not import: {why}"
                continue
            problems = []
            for spec, site in matching:
                theirs, unfit = _their_dims(anchor, spec, dims)
                if unfit:
                    problems.append(f"{site.op}: {unfit}")
                    continue
                problem = spec.contract.shape_problem(theirs)
                if problem is None and dtype not in spec.contract.dtypes:
                    problem = f"vLLM's draft dispatches {spec.contract.dtypes}, not {dtype}"
                if problem is None:
                    header = load_implementation(site.folder / "production.cu", spec.contract)
                    unmet = header.header.unmet_requirement(theirs, KNOWN[dtype], {})
                    problem = f"vLLM launches another path here: {unmet}" if unmet else None
                problem = problem or _arg_problem(anchor, ours, spec, dims, theirs, dtype) or None
                if problem is None:
                    row.site, row.theirs = site, theirs
                    break
                problems.append(f"{site.op}: {problem}")
            if row.site is None:
                row.reason = "; ".join(dict.fromkeys(problems))
    return out


def _int(text: str, dims: Mapping[str, int]) -> int:
    from astra_graph.kernel import expr

    return expr.evaluate_int(text, dims)


# --- timing ------------------------------------------------------------------------------------


def round_order(round_index: int) -> tuple[str, str]:
    """A B, B A, A B, ...: which side goes first in each round."""
    return ("production", "anchor") if round_index % 2 == 0 else ("anchor", "production")


def combine(production: Sequence[Any], anchor: Sequence[Any]) -> dict[str, Any]:
    """One shape's row from its per-round measurements (``Measurement`` of each side, same
    round at the same index): medians, speedup, its noise and the call (module docstring)."""
    from astra_graph.harness.selection import call

    ratios = [b.median_us / a.median_us for a, b in zip(production, anchor, strict=True)]
    speedup = statistics.median(ratios)
    spread = (max(ratios) - min(ratios)) / 2
    within = speedup * math.hypot(
        statistics.median(m.rel_std_err for m in production),
        statistics.median(m.rel_std_err for m in anchor),
    )
    err = max(spread, within)
    return {
        "production_us": statistics.median(m.median_us for m in production),
        "production_rse": max(m.rel_std_err for m in production),
        "anchor_us": statistics.median(m.median_us for m in anchor),
        "anchor_rse": max(m.rel_std_err for m in anchor),
        "speedup": speedup,
        "speedup_err": err,
        "round_ratios": ratios,
        "call": call(speedup, err),
        "method": production[0].method,
        "anchor_method": anchor[0].method,
    }


def time_anchor(
    evaluator: Any,
    ours: Any,
    production: Path,
    mapped: Sequence[Mapped],
    rounds: int,
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Time every mapped shape: per dtype and imported site, ``rounds`` rounds of one bench
    request per side, alternating which goes first (:func:`round_order`). Returns the rows and
    the harness's rejections or notes (a timed output that fails the re-check, skipped shapes)."""
    from astra_graph.kernel.contract import load_contract

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    groups: dict[tuple[str, str], list[Mapped]] = {}
    for m in mapped:
        if m.site is not None:
            groups.setdefault((m.dtype, m.site.op), []).append(m)
    for (dtype, op), group in groups.items():
        site = group[0].site
        assert site is not None  # grouped by site above
        theirs = load_contract(site.folder)
        sides: dict[str, tuple[Any, Path, list[dict[str, int]]]] = {
            "production": (ours, production, [m.ours for m in group]),
            "anchor": (theirs, site.folder / "production.cu", [m.theirs or {} for m in group]),
        }
        timed: dict[str, list[dict[str, Any]]] = {"production": [], "anchor": []}
        for index in range(rounds):
            for side in round_order(index):
                spec, path, shapes = sides[side]
                report = evaluator.bench(spec, path, shapes=shapes, dtypes=[dtype])
                if report.rejection is not None:
                    notes.append(f"{side} {dtype} round {index + 1}: {report.rejection.message}")
                notes += [f"{side} {dtype}: {n}" for n in report.notes if "skipped" in n]
                timed[side].append({s.label: s.candidate for s in report.shapes})
            log(f"  {op} {dtype}: round {index + 1} of {rounds}")
        for m in group:
            ours_label = m.label
            theirs_label = theirs.contract.label(m.theirs or {})
            a = [r.get(ours_label) for r in timed["production"]]
            b = [r.get(theirs_label) for r in timed["anchor"]]
            row: dict[str, Any] = {
                "shape": ours_label,
                "anchor_shape": f"{op} {theirs_label}",
                "dtype": dtype,
            }
            if all(a) and all(b):
                row.update(combine(a, b))
            else:
                row.update(speedup=None, call=None, production_us=None, anchor_us=None)
                notes.append(f"{ours_label} {dtype}: not timed in every round (see notes)")
            rows.append(row)
    return rows, notes


def by_reason(not_timed: Mapping[str, str]) -> dict[str, list[str]]:
    """The untimed (shape, dtype) labels grouped by their reason, in first-seen order."""
    groups: dict[str, list[str]] = {}
    for label, why in not_timed.items():
        groups.setdefault(why, []).append(label)
    return groups


def dry_run_lines(anchor: VllmAnchor, mapped: Sequence[Mapped], imported: Imported) -> list[str]:
    """The mapping as a dry run prints it: one line per timed shape and dtype, then each reason
    once with the (shape, dtype) pairs it keeps from being timed."""
    lines = [
        f"{anchor.op} vs {anchor.framework} {anchor.kernel}: imported "
        f"{', '.join(s.op for s in imported.sites) or 'nothing'} ({imported.seconds:.1f} s NVRTC)",
        f"  path: {anchor.why_path}",
        f"  layout: {anchor.layout}",
    ]
    for m in mapped:
        if m.site is not None:
            lines.append(f"  {m.label:<18} {m.dtype:<9} -> {m.site.op} {_label(m.theirs)}")
    untimed = {f"{m.label} {m.dtype}": m.reason for m in mapped if m.site is None}
    for why, labels in by_reason(untimed).items():
        lines.append(f"  NOT TIMED ({len(labels)}: {', '.join(labels)}): {why}")
    return lines


def _label(dims: Mapping[str, int] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (dims or {}).items())


def anchor_by_op(source: str = "vllm") -> dict[str, VllmAnchor]:
    return {a.op: a for a in IMPORTED_ANCHORS if a.source == source}

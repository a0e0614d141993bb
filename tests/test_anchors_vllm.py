"""benchmarks/anchors_vllm.py on the CPU: vLLM's kernels as anchors through ``astra import``.

What is tested here, without a GPU: the per-operation mapping table (every shipped operation
with a vLLM kernel, every tensor of ours named, every suite shape mapped or refused with a
reason), the import and mapping of a framework-style launcher from the project's own fixture
(tests/fixtures/framework/csrc, NVRTC on the CPU), that a wrong table is caught with its reason
rather than timed, the alternation of the two sides and the noise rule, and the import of each
real vLLM anchor from the pinned release, which skips, saying so, where ``.frameworks/`` has no
vLLM (CI has none: ``python benchmarks/releases.py --prefetch`` fetches it).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from astra_graph.harness.results import Measurement
from astra_graph.kernel import expr
from astra_graph.kernel.catalog import set_search_dirs
from astra_graph.kernel.contract import load_contract
from fake_evaluator import FakeEvaluator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import anchors  # noqa: E402  (benchmarks/ is not a package)
import anchors_vllm as vllm  # noqa: E402

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

FIXTURE = ROOT / "tests" / "fixtures" / "framework"
RELEASE = ROOT / ".frameworks" / f"{vllm.VLLM[0]}-{vllm.VLLM[1]}"
IMPORTED_ON_MAIN = (
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "rms_norm",
    "per_token_fp8_quant",
    "rotary_embedding",
    "fused_add_rmsnorm",
)
"""The anchors whose vLLM path imports with today's `astra import`: every shape is timed
(fused_add_rmsnorm since its residual, asked only strides, is drafted as the input's twin)."""
FIXTURE_SILU = vllm.VllmAnchor(
    op="silu_and_mul",
    file="csrc/activation.cu",
    launcher="silu_and_mul",
    paths=(vllm.LaunchPath("1", r"act_and_mul_kernel<.*silu.*,\s*true>\s*$"),),
    why_path="the fixture's one launch",
    dims={"tokens": "tokens", "input_1": "2 * d"},
    args={"x": "input", "out": "out"},
    larger={"out": "drafted as input's shape; the kernel writes tokens * d"},
)


@pytest.fixture(autouse=True)
def _default_search_path() -> None:
    set_search_dirs(None)


def _shapes(op: str) -> list[dict[str, int]]:
    spec = load_contract(ROOT / "kernels" / op)
    return [d for s in vllm.SUITES for d in spec.contract.suite(s)]


def test_every_operation_with_a_vllm_kernel_has_a_complete_table() -> None:
    ops = {a.op for a in vllm.VLLM_ANCHORS}
    assert ops == {
        "silu_and_mul",
        "gelu_and_mul",
        "gelu_tanh_and_mul",
        "rms_norm",
        "fused_add_rmsnorm",
        "rotary_embedding",
        "merge_attn_states_lse",
        "per_token_fp8_quant",
    }
    for anchor in vllm.VLLM_ANCHORS:
        spec = load_contract(ROOT / "kernels" / anchor.op)
        # every tensor of ours stands for one of theirs, or their call has none, said why
        assert set(anchor.args) | set(anchor.absent) == {a.name for a in spec.contract.args}
        assert not set(anchor.args) & set(anchor.absent), anchor.op
        if anchor.absent:  # less work on their side: the layout says so and the work differs
            assert "writes no" in anchor.layout and not anchor.same_work, anchor.op
        assert set(anchor.larger) <= set(anchor.args.values()), anchor.op
        for dims in _shapes(anchor.op):  # every expression evaluates on every suite shape
            # a size or an offset (rotary's rope_dim_offset is 0): never negative
            assert all(expr.evaluate_int(e, dims) >= 0 for e in anchor.dims.values())
            axes = [a for shape in anchor.axes.values() for a in shape]
            assert all(expr.evaluate_int(a, dims) > 0 for a in axes), anchor.op
            assert any(expr.evaluate(p.when, dims) for p in anchor.paths), (anchor.op, dims)
        differs = re.match(r"[A-Z ]+ DIFFERS:", anchor.layout)  # the summary's [... DIFFERS]
        assert anchor.same_work == (not differs), anchor.op


def test_every_sglang_anchor_names_every_tensor_of_ours_and_maps_every_shape() -> None:
    """SGLang's JIT kernels (silu, gelu, gelu_tanh, rms_norm and fused_add_rmsnorm) as
    anchors: each table names every tensor of ours and its axes evaluate on every suite shape."""
    assert {a.op for a in vllm.SGLANG_ANCHORS} == {
        "silu_and_mul",
        "gelu_and_mul",
        "gelu_tanh_and_mul",
        "rms_norm",
        "fused_add_rmsnorm",
    }
    for anchor in vllm.SGLANG_ANCHORS:
        assert anchor.source == "sglang" and anchor.framework == f"SGLang {vllm.SGLANG[1]}"
        spec = load_contract(ROOT / "kernels" / anchor.op)
        assert set(anchor.args) == {a.name for a in spec.contract.args}, anchor.op
        for dims in _shapes(anchor.op):
            axes = [a for shape in anchor.axes.values() for a in shape]
            assert all(expr.evaluate_int(a, dims) > 0 for a in axes), anchor.op
    assert vllm.anchor_by_op("sglang")["silu_and_mul"].file.endswith("activation.cuh")
    assert vllm.anchor_by_op()["silu_and_mul"].file == "csrc/activation_kernels.cu"


def test_sglang_rmsnorm_is_timed_only_at_the_sizes_it_builds_for() -> None:
    """SGLang builds its rmsnorm per hidden size, for 64, 128, 256 and multiples of 256 up to
    8192 (its static_asserts): every other size of our suites is refused with that reason, and
    the warp kernel is the path up to 256, the CTA kernel above."""
    rms = vllm.anchor_by_op("sglang")["rms_norm"]
    ((when, why),) = rms.refused
    refused = {h for h in (8, 24, 64, 128, 256, 264, 512, 3584, 8192, 8200, 12288) if
               expr.evaluate(when, {"tokens": 1, "hidden": h})}  # fmt: skip
    assert refused == {8, 24, 264, 8200, 12288} and "static_asserts" in why
    paths = {p.when: p.entry for p in rms.paths}
    assert "rmsnorm_warp" in paths["hidden <= 256"] and "rmsnorm_cta" in paths["hidden > 256"]


def test_the_activation_tables_map_d_to_the_doubled_input_width() -> None:
    silu = vllm.anchor_by_op()["silu_and_mul"]
    assert {k: expr.evaluate_int(v, {"tokens": 7, "d": 18944}) for k, v in silu.dims.items()} == {
        "tokens": 7,
        "input_1": 37888,
    }


def test_a_shape_vllm_refuses_is_said_not_skipped() -> None:
    rotary = vllm.anchor_by_op()["rotary_embedding"]
    refused = [d for d in _shapes("rotary_embedding") if d["num_heads"] % d["num_kv_heads"]]
    assert refused  # the edge suite's 7 query heads over 3 key heads
    spec = load_contract(ROOT / "kernels" / "rotary_embedding")
    mapped = vllm.map_shapes(rotary, spec, vllm.Imported([], ["no import"], 0.0), refused)
    assert len(mapped) == 2 * len(refused)
    assert all("num_heads % num_kv_heads == 0" in m.reason and m.site is None for m in mapped)


def test_the_merge_anchor_says_its_layout_differs() -> None:
    merge = vllm.anchor_by_op()["merge_attn_states_lse"]
    assert not merge.same_work and "[heads, tokens]" in merge.layout


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_fixture_launcher_imports_and_every_shape_maps(tmp_path: Path) -> None:
    imported = vllm.import_anchor(FIXTURE_SILU, FIXTURE, tmp_path)
    assert [s.op for s in imported.sites] == ["silu_and_mul"] and not imported.refused
    spec = load_contract(ROOT / "kernels" / "silu_and_mul")
    mapped = vllm.map_shapes(FIXTURE_SILU, spec, imported, _shapes("silu_and_mul"))
    assert all(m.site is not None for m in mapped), [m.reason for m in mapped if m.reason]
    first = mapped[0]
    assert first.theirs == {"tokens": first.ours["tokens"], "input_1": 2 * first.ours["d"]}
    assert {m.dtype for m in mapped} == set(vllm.DTYPES)


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_table_keyed_by_tensor_axes_maps_whatever_the_draft_names_the_dims(
    tmp_path: Path,
) -> None:
    imported = vllm.import_anchor(FIXTURE_SILU, FIXTURE, tmp_path)
    spec = load_contract(ROOT / "kernels" / "silu_and_mul")
    shapes = _shapes("silu_and_mul")
    by_axes = dataclasses.replace(FIXTURE_SILU, dims={}, axes={"input": ("tokens", "2 * d")})
    named = vllm.map_shapes(FIXTURE_SILU, spec, imported, shapes)
    keyed = vllm.map_shapes(by_axes, spec, imported, shapes)
    assert [m.theirs for m in keyed] == [m.theirs for m in named]
    assert all(m.site is not None for m in keyed)
    (row, _) = vllm.map_shapes(
        dataclasses.replace(by_axes, axes={"input": ("tokens", "1", "2 * d")}),
        spec,
        imported,
        shapes[:1],
    )  # the draft's strides follow its rank: another rank is another call
    assert row.site is None and "drafted with 2 axes" in row.reason
    (row, _) = vllm.map_shapes(
        dataclasses.replace(by_axes, dims={"input_1": "d"}), spec, imported, shapes[:1]
    )
    assert row.site is None and "mapping gives input_1 both" in row.reason


@pytest.mark.usefixtures("needs_nvrtc")
def test_a_wrong_table_is_a_reason_not_a_timing(tmp_path: Path) -> None:
    imported = vllm.import_anchor(FIXTURE_SILU, FIXTURE, tmp_path)
    spec = load_contract(ROOT / "kernels" / "silu_and_mul")
    shapes = spec.contract.suite("tuning")[:1]
    halved = dataclasses.replace(FIXTURE_SILU, dims={"tokens": "tokens", "input_1": "d"})
    (row, _) = vllm.map_shapes(halved, spec, imported, shapes)
    assert row.site is None and "does not describe the same call" in row.reason
    renamed = dataclasses.replace(FIXTURE_SILU, dims={"tokens": "tokens", "width": "2 * d"})
    (row, _) = vllm.map_shapes(renamed, spec, imported, shapes)
    assert "update VLLM_ANCHORS" in row.reason
    other = dataclasses.replace(FIXTURE_SILU, paths=(vllm.LaunchPath("1", r"gelu"),))
    (row, _) = vllm.map_shapes(other, spec, imported, shapes)
    assert "did not import" in row.reason


def _measure(us: float, rse: float = 0.001) -> Measurement:
    return Measurement(median_us=us, spread_us=0.0, rel_std_err=rse, samples=10, method="events")


def test_rounds_alternate_and_the_noise_is_the_larger_of_spread_and_error() -> None:
    assert [vllm.round_order(i)[0] for i in range(4)] == [
        "production",
        "anchor",
        "production",
        "anchor",
    ]
    ours = [_measure(10)] * 3
    row = vllm.combine(ours, [_measure(11), _measure(11.2), _measure(10.9)])
    assert row["speedup"] == pytest.approx(1.1) and row["speedup_err"] == pytest.approx(0.015)
    assert row["call"] == "faster"
    wide = vllm.combine(ours, [_measure(11), _measure(12), _measure(10.6)])
    assert wide["speedup_err"] == pytest.approx(0.07) and wide["call"] == "tie"  # 2 x 0.07 > 0.1
    tight = vllm.combine([_measure(10, 0.02)] * 3, [_measure(10.3, 0.02)] * 3)
    assert tight["speedup_err"] == pytest.approx(1.03 * 0.02 * 2**0.5)
    assert tight["call"] == "tie"  # 3% inside 2 sigma


@pytest.mark.usefixtures("needs_nvrtc")
def test_each_side_is_timed_alone_alternating_per_round(tmp_path: Path) -> None:
    imported = vllm.import_anchor(FIXTURE_SILU, FIXTURE, tmp_path)
    spec = load_contract(ROOT / "kernels" / "silu_and_mul")
    shapes = spec.contract.suite("tuning")[:2]
    mapped = vllm.map_shapes(FIXTURE_SILU, spec, imported, shapes)
    evaluator = FakeEvaluator()
    rows, _ = vllm.time_anchor(evaluator, spec, spec.folder / "production.cu", mapped, 3, log=str)
    sides = [
        "vllm" if b["candidate"].startswith(str(tmp_path)) else "ours" for b in evaluator.benches
    ]
    per_dtype = ["ours", "vllm", "vllm", "ours", "ours", "vllm"]
    assert sides == per_dtype * 2
    assert all(b["against"] is None for b in evaluator.benches)  # one side per request
    assert [(r["shape"], r["dtype"]) for r in rows] == [
        (spec.contract.label(d), t) for t in vllm.DTYPES for d in shapes
    ]
    assert all(r["speedup"] == 1.0 and r["call"] == "tie" for r in rows)
    first = shapes[0]
    assert rows[0]["anchor_shape"] == f"silu_and_mul {first['tokens']}x{2 * first['d']}"


def test_tables_and_summary_keep_another_layout_apart() -> None:
    entry = {
        "framework": "vLLM 0.33.0",
        "kernel": "k",
        "via": "astra import",
        "sites": ["k_2"],
        "path": "p",
        "layout": "LAYOUT DIFFERS: lse",
        "same_work": False,
        "rounds": 3,
        "not_timed": {"1x1x8 float16": "why"},
        "notes": [],
        "rows": [
            {
                "shape": "7x28x128",
                "anchor_shape": "k_2 7x28x128",
                "dtype": "float16",
                "production_us": 2.0,
                "anchor_us": 1.8,
                "speedup": 0.9,
                "speedup_err": 0.01,
                "call": "slower",
                "round_ratios": [0.9, 0.9, 0.91],
            }
        ],
    }
    table = {
        "op": "merge_attn_states_lse",
        "device": "d",
        "date": "t",
        "commit": "abc1234",
        "releases": {"vllm": "0.33.0"},
        "anchors": [entry],
        "not_built": [],
    }
    text = anchors.markdown(table)
    assert "| 7x28x128 | k_2 7x28x128 | float16 |" in text and "- 1x1x8 float16: why" in text
    fp16, _ = anchors.summary(table)
    assert "[LAYOUT DIFFERS]" in fp16 and fp16.count("7x28x128") == 1
    assert "1 shapes not timed" in fp16


SGLANG_RELEASE = ROOT / ".frameworks" / f"{vllm.SGLANG[0]}-{vllm.SGLANG[1]}"


@pytest.mark.skipif(
    not (SGLANG_RELEASE / vllm.RELEASES["sglang"].sentinel).is_file(),
    reason=f"SGLang {vllm.SGLANG[1]} is not in .frameworks/ (benchmarks/releases.py --prefetch)",
)
@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("anchor", vllm.SGLANG_ANCHORS, ids=lambda a: a.op)
def test_the_real_sglang_anchor_imports_at_cpp20_and_maps_every_shape_it_launches(
    anchor: vllm.VllmAnchor, tmp_path: Path
) -> None:
    """Imported at SGLang's C++20 with its SGL_CUDA_ARCH, every shape of ours maps, or says
    why (SGLang's fused_add_rmsnorm refuses hidden sizes above 8192 on the H100; its rmsnorm
    builds only for 64, 128, 256 and multiples of 256 up to 8192)."""
    imported = vllm.import_anchor(anchor, SGLANG_RELEASE, tmp_path)
    assert imported.sites, imported.refused
    spec = load_contract(ROOT / "kernels" / anchor.op)
    mapped = vllm.map_shapes(anchor, spec, imported, _shapes(anchor.op))
    timed = [m for m in mapped if m.site is not None]
    assert timed and all(m.site is not None or m.reason for m in mapped)
    for m in mapped:
        if m.site is None and anchor.op == "rms_norm":
            hidden = m.ours["hidden"]
            assert hidden > 8192 or (hidden % 256 and hidden not in (64, 128)), m.reason
        elif m.site is None:
            assert anchor.op == "fused_add_rmsnorm" and m.ours["hidden"] > 8192, m.reason
    production = (timed[0].site.folder / "production.cu").read_text()
    assert "// astra: std = c++20" in production


FLASHINFER_RELEASE = ROOT / ".frameworks" / "flashinfer-python-0.7.2.post1"


@pytest.mark.skipif(
    not (FLASHINFER_RELEASE / vllm.RELEASES["flashinfer"].sentinel).is_file(),
    reason="FlashInfer 0.7.2.post1 is not in .frameworks/ (benchmarks/releases.py --prefetch)",
)
@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("anchor", vllm.FLASHINFER_ANCHORS, ids=lambda a: a.op)
def test_the_real_flashinfer_norms_import_from_the_wheel_and_map_every_shape(
    anchor: vllm.VllmAnchor, tmp_path: Path
) -> None:
    """FlashInfer's RMSNorm and FusedAddRMSNorm, imported from norm.cuh as the wheel ships it:
    every shape of ours with hidden % 8 == 0 is timed at the 16-byte instantiation, any other
    says why."""
    imported = vllm.import_anchor(anchor, FLASHINFER_RELEASE, tmp_path)
    assert imported.sites, imported.refused
    spec = load_contract(ROOT / "kernels" / anchor.op)
    mapped = vllm.map_shapes(anchor, spec, imported, _shapes(anchor.op))
    assert len(mapped) == 2 * len(_shapes(anchor.op))
    for m in mapped:
        assert (m.site is not None) == (m.ours["hidden"] % 8 == 0), (m.ours, m.reason)
        assert m.site is not None or "narrower vector" in m.reason


@pytest.mark.skipif(
    not (RELEASE / "csrc").is_dir(),
    reason=f"vLLM {vllm.VLLM[1]} is not in .frameworks/ (benchmarks/releases.py --prefetch)",
)
@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("anchor", vllm.VLLM_ANCHORS, ids=lambda a: a.op)
def test_the_real_vllm_anchor_imports_and_every_shape_is_mapped_or_says_why(
    anchor: vllm.VllmAnchor, tmp_path: Path
) -> None:
    imported = vllm.import_anchor(anchor, RELEASE, tmp_path)
    spec = load_contract(ROOT / "kernels" / anchor.op)
    mapped = vllm.map_shapes(anchor, spec, imported, _shapes(anchor.op))
    assert len(mapped) == 2 * len(_shapes(anchor.op))
    assert all(m.site is not None or m.reason for m in mapped)
    if anchor.op in IMPORTED_ON_MAIN:  # every shape the table does not refuse is timed
        refused = {why for _, why in anchor.refused}
        timed = [m for m in mapped if m.reason not in refused]
        assert timed and all(m.site is not None for m in timed), {m.reason for m in mapped}

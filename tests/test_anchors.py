"""benchmarks/anchors.py without a GPU: which shapes each framework anchor is timed on, the
launch its adapter pins, the tables and the summary's list of shapes where production is slower.

The release headers are not fetched (no network in tests): the adapters are staged into a
temporary folder standing for FlashInfer's include folder, and a scripted evaluator times them.
Where ``.frameworks/`` holds the pinned wheel, the act_and_mul adapters are compiled by NVRTC
against its unmodified headers (skipped, saying so, where it does not:
``python benchmarks/releases.py --prefetch`` fetches it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from astra_graph.harness.compile import compile_implementation
from astra_graph.kernel.contract import load_contract
from astra_graph.kernel.dtypes import DTYPES
from astra_graph.kernel.header import load_implementation
from fake_evaluator import FakeEvaluator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import anchors  # noqa: E402  (benchmarks/ is not a package)

ACT_AND_MUL = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
"""The operations whose anchor is FlashInfer's act_and_mul_kernel, one adapter each."""
RELEASE_INCLUDE = ROOT / ".frameworks" / "-".join(anchors.FLASHINFER) / anchors.FLASHINFER_INCLUDE


@pytest.fixture
def include(tmp_path: Path) -> Path:
    header = tmp_path / "flashinfer" / "attention" / "cascade.cuh"
    header.parent.mkdir(parents=True)
    header.write_text("// stands for the release header\n")
    return tmp_path


def test_a_folder_without_flashinfers_headers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(anchors.AnchorError, match=r"cascade\.cuh"):
        anchors.flashinfer_include(tmp_path)


def test_the_merge_adapter_launches_as_flashinfer_does(include: Path) -> None:
    spec = load_contract(ROOT / "kernels" / "merge_attn_states_lse")
    anchor = next(a for a in anchors.ANCHORS if a.op == spec.name)
    header = load_implementation(anchors.stage(anchor, include), spec.contract).header
    fp16 = DTYPES["float16"]
    # one block per token, (head_dim / 8) x heads threads
    grid, block, _ = header.launch({"tokens": 7, "heads": 28, "head_dim": 128}, fp16, {})
    assert (grid, block) == ((7, 1, 1), (16, 28, 1))
    assert header.unmet_requirement({"tokens": 3, "heads": 32, "head_dim": 96}, fp16, {})
    # 64 heads of 256: 2048 threads a token, where FlashInfer's launch fails
    assert header.unmet_requirement({"tokens": 1, "heads": 64, "head_dim": 256}, fp16, {})


@pytest.mark.parametrize("op", ACT_AND_MUL)
def test_the_act_and_mul_adapters_cap_their_block_at_the_kernels_launch_bound(
    op: str, include: Path
) -> None:
    spec = load_contract(ROOT / "kernels" / op)
    anchor = next(a for a in anchors.ANCHORS if a.op == spec.name)
    header = load_implementation(anchors.stage(anchor, include), spec.contract).header
    grid, block, _ = header.launch({"tokens": 5, "d": 14336}, DTYPES["bfloat16"], {})
    assert (grid, block) == ((5, 1, 1), (256, 1, 1))
    grid, block, _ = header.launch({"tokens": 5, "d": 1024}, DTYPES["bfloat16"], {})
    assert block == (128, 1, 1)
    assert header.default_tunables() == {"FAST_MATH": 1}  # FlashInfer's JIT: -use_fast_math


@pytest.mark.skipif(
    not (RELEASE_INCLUDE / "flashinfer" / "activation.cuh").is_file(),
    reason="FlashInfer 0.7.2.post1 is not in .frameworks/ (benchmarks/releases.py --prefetch)",
)
@pytest.mark.usefixtures("needs_nvrtc")
@pytest.mark.parametrize("op", ACT_AND_MUL)
def test_the_act_and_mul_adapters_compile_against_the_release_header(
    op: str, tmp_path: Path
) -> None:
    """Each adapter builds from the wheel's activation.cuh as shipped, in both dtypes, with
    fast math as FlashInfer's JIT compiles it."""
    spec = load_contract(ROOT / "kernels" / op)
    anchor = next(a for a in anchors.ANCHORS if a.op == spec.name)
    adapter = anchors.stage(anchor, tmp_path)  # the release's own includes from its folder
    impl = load_implementation(adapter, spec.contract)
    for dtype in anchors.DTYPES:
        kernel = compile_implementation(impl, DTYPES[dtype], include_dirs=[RELEASE_INCLUDE])
        assert "--use_fast_math" in kernel.options
        assert kernel.lowered_name and kernel.resources.spill_store_bytes == 0


def test_merge_table_times_every_supported_shape_in_both_dtypes(include: Path) -> None:
    evaluator = FakeEvaluator()
    table = anchors.run_op(evaluator, "merge_attn_states_lse", include, "fake GPU")
    (entry,) = table["anchors"]
    spec = load_contract(ROOT / "kernels" / "merge_attn_states_lse")
    every = [spec.contract.label(d) for s in anchors.SUITES for d in spec.contract.suite(s)]
    unsupported = {"333x32x96", "3001x14x80", "1x1x8", "3x3x24", "2x5x1024", "5x7x136"}
    assert set(entry["unsupported"]) == unsupported
    for dtype in anchors.DTYPES:
        timed = [r["shape"] for r in entry["rows"] if r["dtype"] == dtype]
        assert timed == [label for label in every if label not in unsupported]
    # production is the candidate, the staged adapter the baseline
    assert all(b["candidate"].endswith("production.cu") for b in evaluator.benches)
    assert all(str(b["against"]).startswith(str(include)) for b in evaluator.benches)
    text = anchors.markdown(table)
    assert "| 7x28x128 | bfloat16 |" in text and "flashinfer-python 0.7.2.post1" in text


def test_summary_lists_the_shapes_where_production_is_slower(include: Path) -> None:
    table = anchors.run_op(FakeEvaluator(), "silu_and_mul", include, "fake GPU")
    rows = table["anchors"][0]["rows"]
    assert rows and all(r["speedup"] == 1.0 for r in rows)
    assert all("production slower at no shape" in line for line in anchors.summary(table))
    slow = next(r for r in rows if r["dtype"] == "bfloat16")
    slow.update(speedup=0.9, call="slower")
    fp16, bf16 = anchors.summary(table)
    assert fp16.endswith("no shape") and bf16.endswith(f"slower at {slow['shape']}")
    timed = sum(r["dtype"] == "bfloat16" for r in rows)
    assert f"geomean {0.9 ** (1 / timed):.3f}x over {timed} shapes" in bf16


def test_an_operation_without_anchors_says_why(
    include: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no adapter of ours, no release to import from: the table says why not
    why = "FlashInfer's kernel of it: not built here, for a stated reason"
    monkeypatch.setitem(anchors.NOT_BUILT, "fused_add_rmsnorm", [why])
    table = anchors.run_op(FakeEvaluator(), "fused_add_rmsnorm", include, "fake GPU")
    assert table["anchors"] == [] and table["not_built"] == [why]
    assert why in anchors.markdown(table)

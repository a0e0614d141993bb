"""The evaluation harness on a real GPU: every shipped kernel passes, every broken one is caught.

Each file in ``tests/fixtures/bad_kernels/`` says in an ``// expect: <reason>`` line which
rejection it must get (``a|b`` where either is right), and in ``// op:`` its operation (else
the file name's prefix decides). ``tests/fixtures/sanitizer_kernels/`` hold kernels that pass
the check and only compute-sanitizer catches (``// expect: <tool>``). Set
``ASTRA_GPU_SUMMARY`` to a file path to keep the verdict lines.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astra_graph.cli import main
from astra_graph.harness import deep
from astra_graph.harness.evaluator import Evaluator
from astra_graph.harness.results import Verdict
from astra_graph.kernel.catalog import operations, resolve

pytestmark = pytest.mark.gpu

FIXTURES = Path(__file__).parent / "fixtures" / "bad_kernels"
BAD_KERNELS = sorted(FIXTURES.glob("*.cu"))
SANITIZER_KERNELS = sorted((FIXTURES.parent / "sanitizer_kernels").glob("*.cu"))
OPERATIONS = operations()
SHIPPED = [(spec.name, path) for spec in OPERATIONS for path in spec.implementations()]
SILU, _ = resolve("silu_and_mul")
RMSNORM, _ = resolve("fused_add_rmsnorm")
HANG_STALL_S = 10.0
"""A kernel run longer than this is a hang (compiling, even CuPy's own cold kernels, is not held
to it)."""


def device_memory_in_use(_: Any) -> int:
    """Worker job: bytes held by live CuPy arrays in the worker."""
    import cupy

    return int(cupy.get_default_memory_pool().used_bytes())


def _record(line: str) -> None:
    print(line)
    target = os.environ.get("ASTRA_GPU_SUMMARY")
    if target:
        with open(target, "a") as out:
            out.write(line + "\n")


def _expected(path: Path) -> str:
    match = re.search(r"^// expect: ([\w|]+)", path.read_text(), re.M)
    assert match, f"{path}: no '// expect: <reason>' line"
    return match[1]


def _operation(path: Path) -> str:
    match = re.search(r"^// op: (\w+)", path.read_text(), re.M)
    if match:
        return match[1]
    return "fused_add_rmsnorm" if path.name.startswith("rmsnorm") else "silu_and_mul"


@pytest.fixture(scope="module")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(deadline_s=240, stall_s=HANG_STALL_S) as ev:
        yield ev


def _check(evaluator: Evaluator, op: str, candidate: Path, **kwargs: Any) -> Verdict:
    spec = next(s for s in OPERATIONS if s.name == op)
    started = time.monotonic()
    verdict = evaluator.check(spec, spec.folder / "production.cu", candidate, **kwargs)
    seconds = time.monotonic() - started
    status = "accepted" if verdict.accepted else f"rejected {verdict.reason}"
    _record(f"{op}/{candidate.name}: {status} in {seconds:.2f} s: {verdict.message}")
    return verdict


@pytest.mark.parametrize(("op", "path"), SHIPPED, ids=[f"{o}/{p.stem}" for o, p in SHIPPED])
def test_shipped_implementations_are_accepted(evaluator: Evaluator, op: str, path: Path) -> None:
    verdict = _check(evaluator, op, path)
    assert verdict.accepted, verdict.model_dump_json(indent=1)
    spec = next(s for s in OPERATIONS if s.name == op)
    c = spec.contract
    shapes = sum(len(c.suite(s)) for s in ("tuning", "heldout", "edge"))
    assert verdict.cases_checked >= shapes * len(c.dtypes)  # plus the random shapes
    assert "random shapes" in verdict.message
    assert verdict.worst_error_ratio is not None and verdict.worst_error_ratio < 1


@pytest.mark.parametrize("path", BAD_KERNELS, ids=[p.stem for p in BAD_KERNELS])
def test_bad_kernel_is_rejected_for_its_reason(evaluator: Evaluator, path: Path) -> None:
    op = _operation(path)
    verdict = _check(evaluator, op, path)
    assert not verdict.accepted
    assert verdict.reason in _expected(path).split("|"), verdict.model_dump_json(indent=1)
    assert verdict.message
    assert verdict.evidence is not None and verdict.evidence.op == op
    if verdict.reason not in ("compile_error", "interface_mismatch"):
        assert verdict.evidence.dims and verdict.evidence.dtype
    if verdict.reason == "compile_error":
        assert "error" in verdict.log
    if path.stem == "low_precision":
        assert "precision loss" in verdict.message
    if path.stem == "rmsnorm_no_residual":
        assert verdict.evidence.arg == "residual"
    if path.stem == "writes_past_end":
        size = 2  # fp16 or bf16
        # 8 elements of 1.0 (bytes 00 3c) past the end: the guard band's fill is random, so an
        # end byte equal to its fill byte is not seen as written (H100, 8b05b93: "0 to 15")
        reach = re.search(r"bytes (\d+) to (\d+) past its end", verdict.evidence.detail or "")
        assert reach is not None, verdict.evidence.detail
        assert int(reach[1]) in (0, 1) and int(reach[2]) in (8 * size - 1, 8 * size), reach[0]
    if verdict.reason == "out_of_bounds":
        assert verdict.evidence.arg == "out" and "out-of-bounds" in verdict.message
    if path.stem == "skips_last_element":
        dims = verdict.evidence.dims
        assert verdict.evidence.index == [dims["tokens"] - 1, dims["d"] - 1]


@pytest.mark.parametrize("breaker", ["infinite_loop", "out_of_bounds"])
def test_evaluator_recovers_after_a_hang_or_a_fault(evaluator: Evaluator, breaker: str) -> None:
    first = _check(evaluator, "silu_and_mul", FIXTURES / f"{breaker}.cu", suites=("edge",))
    assert first.reason == _expected(FIXTURES / f"{breaker}.cu")
    after = _check(evaluator, "silu_and_mul", SILU.folder / "naive.cu")
    assert after.accepted, after.model_dump_json(indent=1)
    wrong = _check(evaluator, "silu_and_mul", FIXTURES / "wrong_math.cu", suites=("edge",))
    assert wrong.reason == "mismatch"


def test_memory_is_released_after_checks(evaluator: Evaluator) -> None:
    _check(evaluator, "fused_add_rmsnorm", RMSNORM.folder / "naive.cu", suites=("tuning",))
    in_use = evaluator.worker.call("test_harness_gpu:device_memory_in_use", None, deadline_s=60)
    assert in_use < 64 * 1024 * 1024


def test_warm_evaluation_is_quick_and_timed_runs_are_rechecked(evaluator: Evaluator) -> None:
    spec = SILU
    for attempt in range(2):  # the second is warm
        started = time.monotonic()
        result = evaluator.evaluate(spec, spec.folder / "production.cu", spec.folder / "naive.cu")
        seconds = time.monotonic() - started
        _record(
            f"evaluate silu_and_mul/naive (attempt {attempt + 1}): {seconds:.2f} s, "
            f"accepted={result.verdict.accepted}, geomean speedup "
            f"{result.bench.geomean_speedup if result.bench else None}"
        )
    assert result.verdict.accepted and result.bench is not None
    assert result.bench.shapes and result.bench.rejection is None
    report = evaluator.bench(
        spec,
        FIXTURES / "returns_immediately.cu",
        shapes=[{"tokens": 4096, "d": 11008}],
    )
    assert report.rejection is not None
    assert report.rejection.reason in ("impossible_time", "timing_replay")
    _record(f"bench returns_immediately: {report.rejection.reason}: {report.rejection.message}")


def test_cli_check_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "silu_and_mul", str(FIXTURES / "wrong_math.cu")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REJECTED") and "mismatch" in out and "element: out[" in out
    assert main(["check", "silu_and_mul", "silu_and_mul/naive", "--suite", "edge", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["accepted"] is True and verdict["suites"] == ["edge"]


@pytest.mark.parametrize("path", SANITIZER_KERNELS, ids=[p.stem for p in SANITIZER_KERNELS])
def test_sanitizer_only_kernels_pass_the_check_and_fail_their_tool(
    evaluator: Evaluator, path: Path
) -> None:
    if deep.find_tool("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer not installed")
    op = _operation(path)
    verdict = _check(evaluator, op, path, suites=("edge",))
    assert verdict.accepted, verdict.model_dump_json(indent=1)  # only the sanitizer can see it
    spec = next(s for s in OPERATIONS if s.name == op)
    results = evaluator.sanitize(spec, path)
    by_tool = {r.tool: r for r in results.results}
    _record(f"sanitize {path.name}: {results.summary}")
    assert not by_tool[_expected(path)].ok and by_tool[_expected(path)].errors > 0


def test_the_worker_reports_its_gpu_architecture(evaluator: Evaluator) -> None:
    from astra_graph.harness.compile import gpu_arch

    assert evaluator.arch() == gpu_arch()  # the compile check outside the worker uses it


def _mixed_output(dtype: str, rtol: float, n: int = 1 << 17) -> tuple[Any, Any]:
    """(float64 reference, output in storage form): correctly rounded, shifted by up to 40% of
    the tolerance, zeros, exact infinities, NaNs and values that round to infinity in fp16."""
    import numpy as np

    from astra_graph.kernel.dtypes import DTYPES

    rng = np.random.default_rng(20261124)
    ref = rng.normal(size=n) * np.exp(rng.uniform(-8, 8, size=n))
    shifted = ref * (1 + rng.uniform(-0.4, 0.4, size=n) * rtol)
    ref[:64] = 0.0
    shifted[:64] = 0.0
    ref[64:96] = shifted[64:96] = np.inf
    ref[96:128] = shifted[96:128] = -np.inf
    ref[128:160] = shifted[128:160] = np.nan
    ref[160:192] = shifted[160:192] = 70000.0 if dtype == "float16" else 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        got = DTYPES[dtype].from_float64(np, shifted)
    return ref, got


@pytest.mark.parametrize(("arg_index", "dtype"), [(4, "float16"), (4, "bfloat16"), (5, "float16")])
def test_gpu_comparison_kernel_gives_the_host_rule(arg_index: int, dtype: str) -> None:
    """compare_gpu's one-kernel statistics equal compare's element-wise path on the host."""
    import cupy
    import numpy as np

    from astra_graph.harness.compare import output_error

    merge, _ = resolve("merge_attn_states_lse")
    arg = merge.contract.args[arg_index]  # v_merged (T) or s_merged (float32)
    element = merge.contract.dtype_of(arg, dtype)
    tol = merge.contract.tolerance[element.name]
    ref, got = _mixed_output(element.name, tol.rtol)
    for statistics in (True, False):
        host = output_error(merge.contract, arg, dtype, got, ref, statistics=statistics)
        gpu = output_error(
            merge.contract, arg, dtype, cupy.asarray(got), cupy.asarray(ref), statistics=statistics
        )
        assert host.finding is None and gpu.finding is None
        assert host.measured == gpu.measured and host.measured > len(ref) // 2
        assert gpu.exact_fraction == host.exact_fraction
        for field in ("worst_ratio", "mean_ratio", "rounding_ratio", "bias", "magnitude_bias"):
            assert getattr(gpu, field) == pytest.approx(getattr(host, field), rel=1e-9, abs=1e-12)
        assert gpu.bias_std_err == pytest.approx(host.bias_std_err, rel=1e-6)
    # one element outside the tolerance: the element-wise path names it, on the GPU too
    got[1000] = got[1001] if got[1000] != got[1001] else got[1002]
    gpu = output_error(merge.contract, arg, dtype, cupy.asarray(got), cupy.asarray(ref))
    host = output_error(merge.contract, arg, dtype, got, ref)
    assert host.finding is not None and gpu.finding is not None
    assert gpu.finding.index == host.finding.index
    assert np.isinf(gpu.worst_ratio)

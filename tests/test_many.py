"""Many kernels over one pool on the CPU: concurrent runs, one run directory each, the summary."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from astra_graph import cli
from astra_graph.harness.pool import GpuPool, Slot
from astra_graph.kernel.catalog import kernels_root
from astra_graph.kernel.contract import ContractError
from astra_graph.llm.settings import LLMSettings
from astra_graph.loop.state import OptimizationResult
from astra_graph.run.many import (
    Summary,
    expand_kernels,
    optimize_many,
    summary_table,
    write_summary,
)
from fake_evaluator import FakeEvaluator
from fake_openai import FakeOpenAI, structured, text
from kernel_sources import VECTORIZED, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

SILU = kernels_root() / "silu_and_mul"


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


def pool() -> GpuPool:
    return GpuPool([Slot(gpu=str(i), evaluator=FakeEvaluator()) for i in range(2)])


def test_a_directory_of_operations_stands_for_each_operation(tmp_path: Path) -> None:
    ops = sorted(p.name for p in kernels_root().iterdir() if (p / "contract.toml").is_file())
    expanded = expand_kernels([str(kernels_root()), str(SILU / "naive.cu"), str(SILU)])
    assert [Path(k).name for k in expanded] == [*ops, "naive.cu"]  # the repeat is dropped
    with pytest.raises(ContractError, match="no operation folders"):
        expand_kernels([str(tmp_path)])


def test_offline_runs_of_every_operation_share_the_pool(tmp_path: Path) -> None:
    shared = pool()
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def progress(kernel: str, event: dict[str, Any]) -> None:
        with lock:
            seen.append((kernel, event.get("node", "")))

    kernels = expand_kernels([str(kernels_root())])
    runs = optimize_many(kernels, evaluator=shared, runs_dir=tmp_path, on_progress=progress)
    assert [r.kernel for r in runs] == kernels
    assert all(r.outcome == "offline" for r in runs), [r.error for r in runs]
    run_dirs = {r.run_dir for r in runs}
    assert len(run_dirs) == len(kernels)
    for row in runs:
        assert row.run_dir is not None
        saved = OptimizationResult.model_validate_json(Path(row.run_dir, "run.json").read_text())
        assert saved.status == "finished" and saved.op == row.op
    assert {k for k, node in seen if node == "finalize"} == set(kernels)
    assert sum(s.calls for s in shared.slots) > 0 and all(s.calls for s in shared.slots)


def test_agent_runs_of_two_kernels_each_get_their_own_result(tmp_path: Path) -> None:
    change = {"change": "16-byte loads", "why": "5% of roofline", "expected_effect": "2x"}
    script = {
        "testing": [structured({"shapes": []})] * 2,
        "planning": [structured({"summary": "vectorize", "changes": [change]})] * 2,
        "coding": [text(fenced(marked(VECTORIZED, speedup=1.5)))] * 2,
    }
    kernels = [str(SILU / "naive.cu"), str(SILU / "production.cu"), "no_such_op"]
    with FakeOpenAI(script) as server:
        settings = LLMSettings(base_url=server.base_url, max_retries=0)
        runs = optimize_many(
            kernels, evaluator=pool(), runs_dir=tmp_path, rounds=1, llm_settings=settings
        )
    assert not server.unscripted
    first, second, bad = runs
    assert first.outcome == second.outcome == "improved"
    assert first.geomean_speedup == pytest.approx(1.5) and first.best_round == 1
    assert first.run_dir != second.run_dir
    assert bad.outcome == "bad input" and bad.error is not None and "no_such_op" in bad.error


def test_the_summary_is_kept_as_json_and_a_table(tmp_path: Path) -> None:
    runs = optimize_many([str(SILU), "nope"], evaluator=pool(), runs_dir=tmp_path)
    table = summary_table(runs)
    assert f"| {SILU} | offline |" in table
    assert "| nope | bad input |" in table
    path = write_summary(
        Summary(started_at="2026-11-22T00:00:00+00:00", seconds=1.0, pool="local", runs=runs),
        tmp_path,
    )
    assert Summary.model_validate(json.loads(path.read_text())).runs == runs
    assert path.with_suffix(".md").read_text().count("\n| ") == 3


@pytest.fixture
def _restore_structlog() -> Iterator[None]:
    """The CLI configures structlog globally, onto a stream capsys closes afterwards."""
    yield
    structlog.reset_defaults()


@pytest.mark.usefixtures("_restore_structlog")
def test_cli_optimizes_a_folder_of_operations_and_prints_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import astra_graph.commands.optimize as command

    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(command, "open_pool", lambda backend, gpus: pool())
    runs_dir = tmp_path / "runs"
    code = cli.main(["optimize", str(kernels_root()), "--runs-dir", str(runs_dir)])
    out = capsys.readouterr().out
    assert code == 0
    ops = [p for p in kernels_root().iterdir() if (p / "contract.toml").is_file()]
    for op in ops:
        assert f"| {op} | offline |" in out
    assert len(list(runs_dir.glob("*-*_*"))) >= len(ops)
    (summary,) = runs_dir.glob("summary-*.json")
    assert len(Summary.model_validate_json(summary.read_text()).runs) == len(ops)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["silu_and_mul", "no_such_op"], "no_such_op: no such kernel file or operation"),
        (["silu_and_mul", "--resume", "runs/x"], "--resume: continues one run"),
        (["silu_and_mul", "--candidates", "0"], "candidates (--candidates): expected 1 or more"),
        (["silu_and_mul", "--gpus", "3"], "--gpus: GPU 3 is not visible"),
        (["silu_and_mul", "--backend", "ray", "--gpus", "0"], "--gpus: chooses GPUs of this"),
    ],
)
@pytest.mark.usefixtures("_restore_structlog")
def test_cli_bad_input_is_one_line_and_exit_2(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import astra_graph.commands.optimize as command

    monkeypatch.setattr(command, "gpu_arch", lambda: "sm_90")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert cli.main(["optimize", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err

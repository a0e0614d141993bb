"""The Python API as the README gives it, and what it does before a run directory exists."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import astra_graph
from astra_graph import ConfigurationError, OptimizationResult, optimize
from astra_graph.harness.evaluator import Evaluator, HarnessUnavailable
from fake_evaluator import FakeEvaluator

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

SRC = Path(astra_graph.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


def test_optimize_is_the_function_both_ways(tmp_path: Path) -> None:
    assert callable(optimize) and callable(astra_graph.optimize)
    assert astra_graph.optimize is optimize
    result = astra_graph.optimize(
        "silu_and_mul/naive", runs_dir=tmp_path, evaluator=FakeEvaluator()
    )
    assert isinstance(result, OptimizationResult) and result.agents == "offline"
    assert Path(result.run_dir).parent == tmp_path


def test_import_astra_graph_does_not_load_langgraph() -> None:
    code = "import sys, astra_graph; print('langgraph' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"rounds": -1}, r"rounds \(--rounds\): expected 0 or more, got -1"),
        ({"max_repairs": -2}, r"max_repairs \(--max-repairs\): expected 0 or more"),
        ({"agents": "many"}, "agents: expected one of"),
        ({"timing_mode": "wall"}, r"timing_mode \(--mode\): expected one of"),
    ],
)
def test_bad_arguments_write_nothing(tmp_path: Path, arguments: dict, message: str) -> None:
    # offline (no endpoint) too: the arguments are checked before the offline fallback
    with pytest.raises(ConfigurationError, match=message):
        optimize("silu_and_mul/naive", runs_dir=tmp_path, evaluator=FakeEvaluator(), **arguments)
    assert list(tmp_path.iterdir()) == []


def test_no_gpu_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_gpu(self: Evaluator) -> None:
        raise HarnessUnavailable("no CUDA GPU visible to the evaluation worker")

    monkeypatch.setattr(Evaluator, "require_gpu", no_gpu)
    with pytest.raises(HarnessUnavailable, match="no CUDA GPU"):
        optimize("silu_and_mul/naive", runs_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("plots_not_drawn")
def test_optimize_from_python_evaluates_on_the_pool_the_cli_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule picks the evaluator wherever a run starts (issue 21): ``optimize()`` given none
    opens ``harness.backends.open_pool()``, as ``astra optimize`` and Studio's Context do; it used
    to start a lone Evaluator, so candidates=4 from Python ran on one GPU."""
    from astra_graph.harness import backends
    from astra_graph.harness import pool as pool_module

    opened: list[tuple[str | None, str | None]] = []
    fakes = [FakeEvaluator(), FakeEvaluator()]
    slots = [pool_module.Slot(gpu=g, evaluator=e) for g, e in zip("01", fakes, strict=True)]

    def open_pool(backend: str | None = None, gpus: str | None = None) -> pool_module.GpuPool:
        opened.append((backend, gpus))
        return pool_module.GpuPool(slots)

    monkeypatch.setattr(backends, "open_pool", open_pool)
    result = optimize("silu_and_mul/naive", runs_dir=tmp_path)  # offline: no endpoint here
    assert opened == [(None, None)]
    assert result.status == "finished"
    assert sum(len(e.benches) for e in fakes) > 0


def test_worker_does_not_rerun_an_unguarded_script(tmp_path: Path) -> None:
    """A script with no ``if __name__ == "__main__":`` guard runs once, not again in the worker."""
    marks = tmp_path / "marks.txt"
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from astra_graph.harness.worker import Worker

            with open({str(marks)!r}, "a") as f:
                f.write("ran\\n")
            with Worker() as worker:
                print(worker.call("os.path:basename", "a/b.cu", deadline_s=60))
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b.cu"
    assert marks.read_text() == "ran\n"


@pytest.mark.parametrize("entry", [["-m", "astra_graph.cli"], ["-m", "astra_graph"]])
@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["compile", "silu_and_mul/naive", "--arch", "bogus"], 2, "--arch: expected a target"),
        (["optimize"], 2, "(KERNEL): required unless resume (--resume RUN_DIR)"),
        (["compile", "no_such_op/naive"], 2, "no_such_op"),
        (["frobnicate"], 2, "invalid choice"),
        (["--help"], 0, "kernels"),
    ],
)
def test_module_entry_points_exit_as_astra_does(
    entry: list[str], arguments: list[str], code: int, message: str
) -> None:
    out = subprocess.run(
        [sys.executable, *entry, *arguments], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == code, out.stderr
    assert message in out.stdout + out.stderr
    assert "Traceback" not in out.stderr

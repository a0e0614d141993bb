"""optimize() end to end on the GPU: the real harness, scripted model replies.

Starting from ``silu_and_mul/naive.cu``, the coding agent's replies hold a file that does not
compile (repaired within the round), one that compiles but computes the wrong thing (rejected by
verification), and a correct vectorized kernel. The result must be that kernel, accepted on the
held-out suite, with a measured speedup above 1. Set ``ASTRA_KEEP_RUN=DIR`` to keep a copy of
the run directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from astra_graph.commands.run_output import format_result
from astra_graph.harness import deep
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.settings import LLMSettings
from astra_graph.run.runner import optimize
from fake_openai import FakeOpenAI, Scripted, structured, text
from kernel_sources import BROKEN, VECTORIZED, fenced

pytestmark = pytest.mark.gpu

NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
WRONG = VECTORIZED.replace("a / (1.0f + expf(-a)) * as_float(us[j])", "a * as_float(us[j])")
SHAPES = {
    "shapes": [
        {"dims": [{"name": "tokens", "value": 3}, {"name": "d", "value": 4104}], "why": "tail"},
        {"dims": [{"name": "tokens", "value": 96}, {"name": "d", "value": 18944}], "why": "qwen"},
    ]
}


def plan(summary: str) -> Scripted:
    change = {"change": summary, "why": "scalar loads", "expected_effect": "closer to roofline"}
    return structured({"summary": summary, "changes": [change]})


def test_optimize_finds_and_proves_the_faster_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert WRONG != VECTORIZED
    script = {
        "testing": [structured(SHAPES)],
        "planning": [plan("16-byte loads"), plan("16-byte loads, fixed")],
        "coding": [text(fenced(BROKEN)), text(fenced(WRONG)), text(fenced(VECTORIZED))],
    }
    with FakeOpenAI(script) as server:
        settings = LLMSettings(base_url=server.base_url, max_retries=0)
        result = optimize(NAIVE, rounds=2, runs_dir=tmp_path, llm_settings=settings)
    print("\n" + format_result(result))
    keep = os.environ.get("ASTRA_KEEP_RUN")
    if keep:
        shutil.copytree(result.run_dir, Path(keep) / Path(result.run_dir).name)

    assert not server.unscripted
    first, second = result.rounds
    assert first.attempts == 2 and any("compile_error" in n for n in first.notes)
    assert first.verdict is not None and not first.verdict.accepted
    assert first.verdict.reason == "mismatch"
    assert second.verdict is not None and second.verdict.accepted and second.faster
    assert result.status == "finished" and result.improved and result.best_round == 2
    assert result.heldout is not None and result.heldout.accepted
    assert result.geomean_speedup > 1.0
    assert Path(result.best_path).read_text() == VECTORIZED
    # finalize ran compute-sanitizer on the pick (or said why not)
    assert "compute-sanitizer" in result.message
    sanitizer = Path(result.run_dir) / "rounds" / "2" / "sanitizer.json"
    if deep.find_tool("compute-sanitizer") is not None:
        assert "found no errors" in result.message and sanitizer.is_file()

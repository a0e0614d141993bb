"""An external run end to end on the GPU: ``astra optimize --agents external`` then ``astra
reply`` for every request, as a person or a coding assistant would type them.

Starting from ``silu_and_mul/naive.cu``, the answers are: no extra shapes, a plan, and as the
code ``kernels/silu_and_mul/production.cu`` (16-byte vector loads) with its description
rewritten; round 2 answers the same kernel with its BLOCK tunable capped at 256 threads. The result
must be one of the answered kernels, accepted on the held-out suite, faster than the naive
kernel as the harness measured it. Set ``ASTRA_KEEP_RUN=DIR`` to keep a copy of the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_graph.kernel.catalog import kernels_root
from astra_graph.run.runner import read_result

pytestmark = pytest.mark.gpu

OP = kernels_root() / "silu_and_mul"


def vectorized(cap: int) -> str:
    """production.cu (16-byte vector loads) as a person would answer with it: its description
    says so, and its BLOCK tunable keeps only the values up to ``cap`` threads. Derived from the
    file so the answer follows the shipped kernel."""
    lines = []
    for line in (OP / "production.cu").read_text().splitlines(keepends=True):
        if line.startswith("// astra: description = "):
            line = f"// astra: description = by hand: production.cu, at most {cap} threads\n"
        elif line.startswith("// astra: tunable BLOCK = "):
            values = [v.strip() for v in line.split("=", 1)[1].split(",")]
            kept = [v for v in values if int(v) <= cap]
            assert kept, f"production.cu has no BLOCK value <= {cap}: {line!r}"
            line = f"// astra: tunable BLOCK = {', '.join(kept)}\n"
        lines.append(line)
    return "".join(lines)


def plan(summary: str) -> str:
    change = {"change": summary, "why": "scalar 2-byte loads", "expected_effect": "near roofline"}
    return json.dumps({"summary": summary, "changes": [change]})


def astra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "astra_graph.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ASTRA_API_KEY")},
    )


def test_an_external_run_answered_with_a_faster_kernel(tmp_path: Path) -> None:
    answers = {
        "testing": ['{"shapes": []}'],
        "planning": [plan("16-byte vector loads"), plan("same, at most 256 threads per block")],
        "coding": [
            f"The vectorized kernel:\n\n```cuda\n{vectorized(1024)}```\n",
            f"```cuda\n{vectorized(256)}```\n",
        ],
    }
    runs = tmp_path / "runs"
    started = astra("optimize", "silu_and_mul/naive", "--agents", "external", "--rounds", "2",
                    "--runs-dir", str(runs))  # fmt: skip
    assert started.returncode == 0, started.stderr
    (run_dir,) = runs.iterdir()
    lines = [started.stdout.strip().splitlines()[-1]]
    while read_result(run_dir).status == "waiting":
        exchange = read_result(run_dir).external[-1]
        answer = tmp_path / f"answer-{exchange.request.number}.txt"
        answer.write_text(answers[exchange.request.agent].pop(0))
        replied = astra("reply", str(run_dir), "--file", str(answer))
        assert replied.returncode in (0, 1), replied.stderr
        lines.append(replied.stdout.strip().splitlines()[-1])
        assert len(lines) < 10
    print("\n".join(lines))
    keep = os.environ.get("ASTRA_KEEP_RUN")
    if keep:
        shutil.copytree(run_dir, Path(keep) / run_dir.name)

    result = read_result(run_dir)
    assert all(not left for left in answers.values())
    assert result.status == "finished" and len(result.external) == 5
    assert all(e.answer is not None for e in result.external)
    assert [r.attempts for r in result.rounds] == [1, 1]
    assert all(r.verdict is not None and r.verdict.accepted for r in result.rounds)
    assert result.improved and result.best_round in (1, 2)
    assert result.heldout is not None and result.heldout.accepted
    assert result.geomean_speedup > 1.0
    assert result.best_source in (vectorized(1024), vectorized(256))
    assert {u.model for u in result.usage} == {"external"} and result.total_tokens == 0

"""``astra optimize`` end to end on the GPU against a server that refuses json_schema, tools and
JSON mode, and whose model writes its JSON inside prose (the scripted server's ``prose``
imitation): the real CLI in a subprocess, the real harness, a real faster kernel as the coder's
reply (``production.cu``), then a unified diff against it in round 2.

Every round must have its plan, the structured-output method found must be plain text, and the
run must reach a measured speedup proven on the held-out suite. ``ASTRA_KEEP_RUN=DIR`` keeps
the run's ``run.json`` and ``report.md``, the CLI's progress and the prompts the server received
(``prompts.json``).
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_graph.kernel.catalog import kernels_root
from astra_graph.loop.state import OptimizationResult
from fake_openai import IMITATIONS, FakeOpenAI, structured, text

pytestmark = pytest.mark.gpu

OP = kernels_root() / "silu_and_mul"
PLANS = ["16-byte vector loads, one block per token", "trim the header; keep the kernel"]
SHAPES = {
    "shapes": [
        {"dims": [{"name": "tokens", "value": 3}, {"name": "d", "value": 4104}], "why": "tail"}
    ]
}


def plan(summary: str) -> dict[str, object]:
    change = {"change": summary, "why": "scalar loads at 5% of roofline", "expected_effect": "3x"}
    return {"summary": summary, "changes": [change]}


def test_prose_only_server_reaches_a_measured_speedup(tmp_path: Path) -> None:
    production = (OP / "production.cu").read_text()
    description = next(
        line for line in production.splitlines() if line.startswith("// astra: description = ")
    )
    renamed = production.replace(description, description.replace("= ", "= (round 2) ", 1))
    assert renamed != production
    diff = "\n".join(
        difflib.unified_diff(
            production.splitlines(), renamed.splitlines(), "a/kernel.cu", "b/kernel.cu", lineterm=""
        )
    )
    script = {
        "testing": [structured(SHAPES)],
        "planning": [structured(plan(PLANS[0])), structured(plan(PLANS[1]))],
        "coding": [
            text(f"Here is the vectorized kernel.\n\n```cuda\n{production}```\nDone."),
            text(f"Only the description changes:\n```diff\n{diff}\n```\n"),
        ],
    }
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_API_KEY", None)
    with FakeOpenAI(script, IMITATIONS["prose"]) as server:
        command = [
            sys.executable, "-m", "astra_graph.cli", "optimize", str(OP / "naive.cu"),
            "--rounds", "2", "--base-url", server.base_url, "--runs-dir", str(tmp_path),
            "--json",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    keep = os.environ.get("ASTRA_KEEP_RUN")
    result = OptimizationResult.model_validate_json(done.stdout) if done.stdout else None
    if keep:
        prompts = [
            {"agent": r.agent, "method": r.method, "refused": r.refused, "text": r.text}
            for r in server.requests
        ]
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "prompts.json").write_text(json.dumps(prompts, indent=1))
        (Path(keep) / "progress.log").write_text(done.stderr)
        if result is not None:
            for name in ("run.json", "report.md"):
                shutil.copy(Path(result.run_dir) / name, Path(keep) / name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert result is not None and not server.unscripted
    print(f"\nprose server: {result.message}; speedup {result.geomean_speedup:.3f}x")
    for r in result.rounds:
        verdict = r.verdict.reason or "accepted" if r.verdict else "none"
        print(f"round {r.round}: plan {r.plan.summary if r.plan else None!r}; {verdict}; "
              f"speedup {r.geomean_speedup}")  # fmt: skip
    methods = {u.agent: u.method for u in result.usage}
    print(f"methods: {methods}")

    assert [r.plan.summary if r.plan else None for r in result.rounds] == PLANS
    assert methods["testing"] == "text" and methods["planning"] == "text"
    assert [r.method for r in server.requests if r.refused] == [
        "json_schema", "function_calling", "json_mode",
    ]  # fmt: skip
    assert result.test_suite is not None and result.test_suite.extra == [{"tokens": 3, "d": 4104}]
    first, second = result.rounds
    assert first.verdict is not None and first.verdict.accepted and first.faster
    assert second.verdict is not None and second.verdict.accepted  # the diff applied
    round_two = Path(result.run_dir) / "rounds/2/candidate.cu"
    assert round_two.read_text() == renamed
    assert result.status == "finished" and result.improved and result.geomean_speedup > 1.5
    assert result.heldout is not None and result.heldout.accepted

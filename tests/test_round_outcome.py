"""One outcome per round: a candidate that timing rejects reads as rejected in every place that
shows the round (the state's history, run.json, rounds/k/verdict.json, the CLI table, the
report and the plot's data), and its impossible speedup is shown nowhere as a result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astra_graph.commands.run_output import format_result
from astra_graph.harness.results import Verdict
from astra_graph.kernel.catalog import kernels_root
from astra_graph.llm.settings import LLMSettings
from astra_graph.report import write_report
from astra_graph.report.content import round_points
from astra_graph.report.reading import load_run
from astra_graph.run.runner import optimize
from fake_evaluator import FakeEvaluator
from fake_openai import FakeOpenAI, structured, text
from kernel_sources import VECTORIZED, fenced, marked

pytestmark = pytest.mark.usefixtures("plots_not_drawn")  # conftest.py says why

NAIVE = kernels_root() / "silu_and_mul" / "naive.cu"
IMPOSSIBLE = 50.0
"""The speedup the fake evaluator measures for the candidate that timing then rejects."""


@pytest.fixture(autouse=True)
def _no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ASTRA_API_KEY", raising=False)


def test_a_timing_rejection_reads_as_rejected_everywhere(tmp_path: Path) -> None:
    change = {"change": "cache results", "why": "faster", "expected_effect": "50x"}
    script = {
        "testing": [structured({"shapes": []})],
        "planning": [structured({"summary": "replay", "changes": [change]})],
        "coding": [text(fenced(marked(VECTORIZED, speedup=IMPOSSIBLE, timing="impossible")))],
    }
    with FakeOpenAI(script) as server:
        result = optimize(
            NAIVE,
            rounds=1,
            runs_dir=tmp_path,
            evaluator=FakeEvaluator(),
            llm_settings=LLMSettings(base_url=server.base_url, max_retries=1),
        )
    run_dir = Path(result.run_dir)

    # the state's history, as run.json keeps it
    (record,) = result.rounds
    assert record.verdict is not None and not record.verdict.accepted
    assert record.verdict.reason == "impossible_time"
    assert record.geomean_speedup is None and not record.faster
    assert not result.improved and result.best_round == 0 and result.geomean_speedup == 1.0
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["rounds"][0]["verdict"]["reason"] == "impossible_time"
    assert saved["rounds"][0]["geomean_speedup"] is None

    # the round's own verdict file
    verdict = Verdict.model_validate_json((run_dir / "rounds/1/verdict.json").read_text())
    assert not verdict.accepted and verdict.reason == "impossible_time"
    assert (run_dir / "rounds/1/bench.json").is_file()  # the timing is kept as evidence

    # the CLI's table
    row = next(line for line in format_result(result).splitlines() if line.strip().startswith("1"))
    assert "rejected: impossible_time" in row and f"{IMPOSSIBLE:.3f}x" not in row

    # the report and the data of its plot
    run = load_run(run_dir)
    (report_row,) = run.rounds
    assert not report_row.accepted and report_row.outcome == "impossible_time"
    assert report_row.speedup is None
    (point,) = round_points(run)
    assert not point.accepted and point.speedup is None and point.reason == "impossible_time"
    assert point.best == 1.0  # the best so far is still the baseline
    markdown = write_report(run_dir)[0].read_text()
    rounds_section = markdown.split("## Rounds", 1)[1].split("![", 1)[0]
    (line,) = [row for row in rounds_section.splitlines() if row.startswith("| 1 |")]
    assert "| impossible_time |" in line and f"{IMPOSSIBLE:.3f}" not in line

"""Run reports: loading a run directory, report.md / report.html, and ``astra report``."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from astra_graph.cli import main
from astra_graph.report import plots, write_report
from astra_graph.report.content import comparison_tables, round_points, shapes_table
from astra_graph.report.reading import RunLoadError, load_run
from astra_graph.report.render import render_markdown
from synthetic_run import BASELINE_SOURCE, write_synthetic_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_run(tmp_path_factory.mktemp("runs") / "20261122-060000-silu_and_mul")


@pytest.fixture(scope="module")
def written(finished_run: Path) -> tuple[Path, Path]:
    return write_report(finished_run)


def test_load_run_reads_every_part(finished_run: Path) -> None:
    run = load_run(finished_run)
    assert run.op == "silu_and_mul"
    assert run.device == "SYNTHETIC (no GPU)"
    assert [r.round for r in run.rounds] == [1, 2, 3]
    assert [r.outcome for r in run.rounds] == ["accepted", "mismatch", "accepted"]
    assert run.rounds[0].tokens == 2 * (910 + 300)
    # the best so far, for the table and the plot, is the run's records' (round 2 rejected)
    assert run.result is not None
    first, _, third = (r.geomean_speedup for r in run.result.rounds)
    assert [p.best for p in round_points(run)] == pytest.approx([first, first, third])
    assert len(run.shapes) == 5
    assert run.copy_bandwidth_gbps == pytest.approx(3026.0)
    assert run.missing == []
    assert run.final_verdict == "held-out suite passed (12 cases)"


def test_markdown_has_summary_tables_plots_and_diff(written: tuple[Path, Path]) -> None:
    md_path, _ = written
    text = md_path.read_text()
    assert "| operation | silu_and_mul |" in text
    assert "| geomean speedup | 1.408x ± 0.005 |" in text
    assert "| 2 | round 2: vectorise the loads | 2 | mismatch |" in text
    assert "| 1.408x | passed | 2,460 | $0.0042 |" in text  # round 3: held-out, tokens, cost
    assert "| 64x8192 | float16 |" in text
    for name in ("speedup_by_round", "shape_speedups", "roofline"):
        assert f"](report.{name}.png)" in text
        assert (md_path.parent / f"report.{name}.png").read_bytes().startswith(PNG_MAGIC)
    assert "```diff" in text
    assert "-// silu_and_mul, naive: scalar loads" in text
    assert "+// silu_and_mul, vectorised: 16-byte loads" in text


def test_html_is_self_contained(written: tuple[Path, Path]) -> None:
    _, html_path = written
    page = html_path.read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3
    assert all(base64.b64decode(data).startswith(PNG_MAGIC) for data in images)
    # nothing is fetched from elsewhere: no other src/href, no URL
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "http://" not in page and "https://" not in page
    assert '<span class="add">+// silu_and_mul, vectorised: 16-byte loads</span>' in page


def test_html_escapes_text_from_the_run(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path / "run")
    data = json.loads((run_dir / "run.json").read_text())
    data["message"] = "<script>alert(1)</script>"
    (run_dir / "run.json").write_text(json.dumps(data))
    _, html_path = write_report(run_dir)
    page = html_path.read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_run_without_improvement_says_so(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path / "run", factors=(None, None))
    run = load_run(run_dir)
    assert run.shapes == []
    assert run.final_verdict == "no candidate beat the baseline"
    (run_dir / "report.shape_speedups.png").write_bytes(b"stale")
    md_path, _ = write_report(run_dir)
    text = md_path.read_text()
    assert "No timed candidate" in text
    assert "### Per-shape timings of the baseline" in text
    assert "](report.roofline.png)" in text
    assert "shape_speedups" not in text
    assert not (run_dir / "report.shape_speedups.png").exists()
    assert "(the best kernel is identical to the baseline)" in text


def test_failed_run_with_only_a_baseline(tmp_path: Path) -> None:
    """A run killed after profiling the baseline: no run.json, no rounds, no best.cu."""
    source = write_synthetic_run(tmp_path / "full")
    run_dir = tmp_path / "failed"
    shutil.copytree(source / "baseline", run_dir / "baseline")
    run = load_run(run_dir)
    assert run.missing == ["run.json", "best.cu"]
    assert run.op == "silu_and_mul"
    md_path, html_path = write_report(run_dir)
    text = md_path.read_text()
    assert "Not found in the run directory: run.json, best.cu." in text
    assert "| final verdict | unknown: no run.json |" in text
    assert "No round was recorded" in text
    assert "speedup_by_round" not in text
    assert "| shape | dtype | µs | achieved GB/s | of copy bandwidth |" in text
    assert "| 16x4096 | float16 | 1.79 | 202 | 7% |" in text
    assert "No diff" in text
    assert html_path.is_file()


def test_failed_or_unfinished_status_is_the_final_verdict(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path / "run")
    data = json.loads((run_dir / "run.json").read_text())
    data.update(status="failed", error="worker crashed twice")
    (run_dir / "run.json").write_text(json.dumps(data))
    assert load_run(run_dir).final_verdict == "run failed: worker crashed twice"
    data.update(status="running", error=None)
    (run_dir / "run.json").write_text(json.dumps(data))
    assert load_run(run_dir).final_verdict.startswith("unfinished: ")


def test_baseline_found_in_this_checkout_for_a_run_from_elsewhere(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path / "run")
    data = json.loads((run_dir / "run.json").read_text())
    data["kernel"] = "/somewhere/else/kernels/silu_and_mul/naive.cu"
    (run_dir / "run.json").write_text(json.dumps(data))
    source = load_run(run_dir).baseline_source
    assert source is not None and "silu_and_mul_naive" in source
    assert source != BASELINE_SOURCE


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (lambda d: (d / "run.json").write_text("{"), r"run\.json: invalid JSON"),
        (lambda d: (d / "run.json").write_text("[]"), r"run\.json: expected a JSON object"),
        (
            lambda d: (d / "run.json").write_text('{"op": "x"}'),
            r"run\.json: run_id: required field is missing",
        ),
        (
            lambda d: (d / "rounds" / "1" / "verdict.json").write_text('{"accepted": "maybe"}'),
            r"rounds/1/verdict\.json: accepted: ",
        ),
    ],
)
def test_malformed_parts_are_one_line_errors(
    tmp_path: Path, breakage: Callable[[Path], object], expected: str
) -> None:
    run_dir = write_synthetic_run(tmp_path / "run")
    breakage(run_dir)
    with pytest.raises(RunLoadError, match=expected) as info:
        load_run(run_dir)
    assert "\n" not in str(info.value)


def test_cli_writes_the_report(finished_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(finished_run)]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(finished_run / "report.md"), str(finished_run / "report.html")]


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_cli_bad_run_dir_is_one_line_and_exit_2(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("x")
    elif kind == "empty":
        target.mkdir()
    assert main(["report", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"astra report: {target}: ")
    assert err.count("\n") == 1


def test_comparison_lines_up_shapes(tmp_path: Path) -> None:
    first = load_run(write_synthetic_run(tmp_path / "a"))
    second = load_run(write_synthetic_run(tmp_path / "b", factors=(1.05,)))
    summary, shapes = comparison_tables(first, second)
    assert summary.headers == ["", "a", "b"]
    assert ["rounds", "3 of 3", "1 of 1"] in summary.rows
    assert shapes.rows[0][:2] == ["16x4096", "float16"]
    assert shapes.rows[0][2].startswith("1.297x") and shapes.rows[0][3].startswith("0.966x")
    assert "| shape | dtype | a | b |" in render_markdown([shapes])


def test_plots_draw_empty_inputs() -> None:
    for png in (
        plots.speedup_by_round([]),
        plots.shape_speedups([]),
        plots.roofline([], None),
        plots.compare_speedups("a", [], "b", []),
    ):
        assert png.startswith(PNG_MAGIC)


def test_impossible_times_are_flagged_in_the_shape_table(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path / "run")
    data = json.loads((run_dir / "run.json").read_text())
    data["shapes"][0]["impossible"] = True
    (run_dir / "run.json").write_text(json.dumps(data))
    rows = shapes_table(load_run(run_dir).shapes).rows
    assert rows[0][5] == "IMPOSSIBLE (below the bandwidth floor)"
    assert rows[1][5] == "faster"


def test_the_recorded_h100_run_reads_in_full() -> None:
    """The recorded H100 run (tests/data/rundirs, converted to today's run.json once when the
    reader of the earlier layout was removed) gives a row per recorded round, each with its
    record, and the baseline's tuning."""
    recorded = Path(__file__).parent / "data" / "rundirs" / "h100-20261122-2d7e470-silu_and_mul"
    written = json.loads((recorded / "run.json").read_text())
    run = load_run(recorded)
    assert run.result is not None
    assert [row.record.round for row in run.rounds if row.record] == [
        r["round"] for r in written["rounds"]
    ]
    assert run.result.baseline_tuning is not None and run.result.baseline_tuning.faster


def test_a_report_without_charts_keeps_the_tables_and_never_loads_matplotlib(
    tmp_path: Path,
) -> None:
    """An interrupted run's report is written within its second (issue 26): no chart drawn,
    matplotlib not even imported, stale charts removed, and a line says how to draw them."""
    run_dir = write_synthetic_run(tmp_path / "20261122-060000-silu_and_mul")
    write_report(run_dir)  # charts of an earlier write, stale once the run moves on
    script = (
        "import sys; from astra_graph.report import write_report; "
        f"write_report({str(run_dir)!r}, charts=False); "
        "print('matplotlib' in sys.modules)"
    )
    source = str(Path(__file__).parents[1] / "src")  # this checkout's, first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
        env=env,
    )  # fmt: skip
    assert done.stdout.strip() == "False"
    text = (run_dir / "report.md").read_text()
    assert "| 64x8192 | float16 |" in text and "| operation | silu_and_mul |" in text
    assert f"`astra report {run_dir}` draws them" in text
    assert ".png)" not in text and not list(run_dir.glob("report.*.png"))

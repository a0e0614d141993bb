"""notebooks/explore.ipynb runs top to bottom against the run directories kept in tests/data/.

The notebook explores a run recorded on a GPU when tests/data/rundirs/ holds one (any directory
not named ``synthetic-*``), else the synthetic fixture; it compares against a synthetic run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from astra_graph.report.content import best_diff
from astra_graph.report.reading import load_run

nbformat = pytest.importorskip("nbformat", reason="the dev extra (nbformat, nbclient) is needed")
NotebookClient = pytest.importorskip("nbclient", reason="the dev extra is needed").NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "explore.ipynb"
RUNS = REPO / "tests" / "data" / "rundirs"
SYNTHETIC = RUNS / "synthetic-silu_and_mul-a"
SYNTHETIC_OTHER = RUNS / "synthetic-silu_and_mul-b"
RECORDED = sorted(p for p in RUNS.iterdir() if p.is_dir() and not p.name.startswith("synthetic-"))
RUN_DIR = RECORDED[-1] if RECORDED else SYNTHETIC
COMPARE_DIR = SYNTHETIC if RECORDED else SYNTHETIC_OTHER


def _outputs(notebook: Any) -> list[dict]:  # an nbformat NotebookNode (nbformat is untyped)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    return [output for cell in code_cells for output in cell.outputs]


def test_notebook_executes_against_recorded_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel inherits this environment: it names the runs to load
    monkeypatch.setenv("ASTRA_RUN_DIR", str(RUN_DIR))
    monkeypatch.setenv("ASTRA_COMPARE_RUN_DIR", str(COMPARE_DIR))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error

    outputs = _outputs(notebook)
    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    markdown = "".join(
        o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})
    )
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    run = load_run(RUN_DIR)

    assert f"run: {RUN_DIR}" in text
    assert f"| operation | {run.op} |" in markdown
    for shape in run.shapes:
        assert f"| {shape.label} | {shape.dtype} |" in markdown
    assert f"| shape | dtype | {RUN_DIR.name} | {COMPARE_DIR.name} |" in markdown
    diff = best_diff(run)
    assert (diff.splitlines()[0] if diff else "no diff: ") in text
    # speedup by round, per-shape speedups, roofline, the two-run comparison
    assert len(images) == 4
    # the graph, drawn as Mermaid text without any network
    assert "graph TD;" in text
    for node in ("testing", "planning", "join", "tuning", "finalize"):
        assert f"\t{node}({node})" in text
    for node in ("coding", "verify", "measure"):  # one candidate branch of a round
        assert f"\tcandidate\\3a{node}({node})" in text

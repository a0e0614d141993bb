"""Reports of optimisation runs: ``report.md`` and a self-contained ``report.html``.

One job per module: ``reading`` loads a run directory into a :class:`~.reading.Run` (and says
in one line what is malformed), ``content`` builds the report as a list of ``blocks`` once, and
``render`` writes those blocks as Markdown and as HTML. :func:`write_report` puts the three
together and writes the files into the run directory.

May import: ``kernel``, ``store``, ``harness``, ``llm`` and ``loop`` (the records a run wrote),
matplotlib inside the chart functions; never ``export``, ``run`` or the command line.
"""

from __future__ import annotations

from pathlib import Path

from astra_graph.report.blocks import Figure
from astra_graph.report.content import build_blocks
from astra_graph.report.reading import load_run
from astra_graph.report.render import PLOT_PREFIX, render_html, render_markdown

MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"


def write_report(run_dir: Path | str, *, charts: bool = True) -> tuple[Path, Path]:
    """Write ``report.md`` (with ``report.<plot>.png`` beside it) and ``report.html``.

    ``charts=False`` leaves the charts out (and removes older ones, which would be stale): an
    interrupted run's report must be written within its second, and matplotlib's import and
    three charts take seconds on a busy host (the H100 run of issue 26: 4 s to stop)."""
    run = load_run(run_dir)
    blocks = build_blocks(run, charts=charts)
    figures = {f"{PLOT_PREFIX}{b.name}.png": b.png for b in blocks if isinstance(b, Figure)}
    for stale in run.path.glob(f"{PLOT_PREFIX}*.png"):
        if stale.name not in figures:
            stale.unlink()
    for name, png in figures.items():
        (run.path / name).write_bytes(png)
    md_path = run.path / MARKDOWN_FILE
    html_path = run.path / HTML_FILE
    md_path.write_text(render_markdown(blocks))
    html_path.write_text(render_html(blocks))
    return md_path, html_path

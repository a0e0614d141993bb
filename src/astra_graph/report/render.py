"""Rendering a report's blocks: Markdown with the plots as PNG files beside it, and HTML with
the same plots inlined as base64, so the HTML file can be mailed or archived on its own."""

from __future__ import annotations

import base64
import html

from astra_graph.report.blocks import Block, Code, Figure, Heading, Table, Text

PLOT_PREFIX = "report."
"""Plot files sit beside report.md as ``report.<name>.png``."""


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Text):
            out.append(block.text)
        elif isinstance(block, Table):
            lines = [
                "| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                "|" + "|".join("---" for _ in block.headers) + "|",
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Figure):
            out.append(f"![{block.caption}]({PLOT_PREFIX}{block.name}.png)")
        else:
            fence = "````" if "```" in block.text else "```"
            out.append(f"{fence}{block.language}\n{block.text.rstrip()}\n{fence}")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; padding: 0 1rem;
       color: #1d232a; }
h1 { font-size: 1.6rem; }
h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ccd; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccd; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.85rem; }
pre { background: #f6f8fa; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem;
      line-height: 1.35; }
.add { color: #1a7f37; background: #e6ffec; display: block; }
.del { color: #b42318; background: #ffebe9; display: block; }
.hunk { color: #6639ba; display: block; }
"""


def _html_code(block: Code) -> str:
    if block.language != "diff":
        return f"<pre><code>{html.escape(block.text)}</code></pre>"
    spans = []
    for line in block.text.splitlines():
        escaped = html.escape(line) or " "
        if line.startswith(("+++", "---")):
            spans.append(f"<b>{escaped}</b>")
        elif line.startswith("+"):
            spans.append(f'<span class="add">{escaped}</span>')
        elif line.startswith("-"):
            spans.append(f'<span class="del">{escaped}</span>')
        elif line.startswith("@@"):
            spans.append(f'<span class="hunk">{escaped}</span>')
        else:
            spans.append(escaped)
    body = "".join(s if s.startswith("<span") else s + "\n" for s in spans)
    return f"<pre><code>{body}</code></pre>"


def render_html(blocks: list[Block]) -> str:
    """One HTML page with no outside references: plots are inlined as base64 PNG."""
    title = next((b.text for b in blocks if isinstance(b, Heading)), "Run report")
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Text):
            out.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
            body = "".join(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in block.rows
            )
            head_row = f"<thead><tr>{head}</tr></thead>" if any(block.headers) else ""
            out.append(f"<table>{head_row}<tbody>{body}</tbody></table>")
        elif isinstance(block, Figure):
            data = base64.b64encode(block.png).decode("ascii")
            caption = html.escape(block.caption)
            out.append(
                f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
        else:
            out.append(_html_code(block))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(out)
        + "\n</body></html>\n"
    )

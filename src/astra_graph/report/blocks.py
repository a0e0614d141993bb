"""The blocks a report is made of: headings, text, tables, figures and code.

The content (``content.py``) is built once as a list of these and rendered twice
(``render.py``): Markdown and HTML read the same blocks, so the two files cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Text:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Figure:
    name: str
    """Short name; the PNG beside report.md is ``report.<name>.png``."""
    caption: str
    png: bytes


@dataclass
class Code:
    text: str
    language: str = ""


Block = Heading | Text | Table | Figure | Code

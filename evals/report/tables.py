"""A table as plain strings, and its two renderings: Markdown for files, rich for the terminal."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class TableData:
    """A table as plain strings, rendered to Markdown for the file and to rich for the terminal."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    left: int = 1  # how many leading columns are text (left-aligned); the rest are numbers


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(table: TableData) -> str:
    align = ["---" if i < table.left else "---:" for i in range(len(table.headers))]
    lines = [
        "| " + " | ".join(_md_cell(h) for h in table.headers) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows),
    ]
    return "\n".join(lines)


def rich_table(table: TableData) -> Table:
    out = Table(title=Text(table.title))
    for i, header in enumerate(table.headers):
        out.add_column(Text(header), justify="left" if i < table.left else "right", overflow="fold")
    for row in table.rows:
        out.add_row(*(Text(cell) for cell in row))
    return out

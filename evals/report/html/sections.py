"""report.md's blocks as HTML: the same headings, notes and tables (cell for cell), charts where report.md has plots.

Only the few Markdown forms the report writes are understood: headings, ``>`` notes,
``-`` lists, images, and ``code``, **strong** and *emphasis* inside text. Everything is
escaped first, so text from the store can never become markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence

from evals.report.markdown import Block
from evals.report.tables import TableData

_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")


def e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def slug(text: str) -> str:
    """A stable anchor for a heading: lower-case words joined by hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def inline(text: str) -> str:
    """Escaped text with `code`, **strong** and *emphasis* as elements."""
    out = e(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])", r"<em>\1</em>", out)


def table_html(table: TableData, *, table_id: str = "", caption_shown: bool = True) -> str:
    """A report table as HTML: caption, header row, text columns left and number columns right."""

    def cls(i: int) -> str:
        return "" if i < table.left else ' class="num"'

    head = "".join(f'<th scope="col"{cls(i)}>{e(h)}</th>' for i, h in enumerate(table.headers))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{e(c)}</td>" for i, c in enumerate(row)) + "</tr>" for row in table.rows
    )
    ident = f' id="{e(table_id)}"' if table_id else ""
    hidden = "" if caption_shown else ' class="sr-only"'
    caption = f"<caption{hidden}>{e(table.title)}</caption>"
    return (
        f'<div class="table-wrap"><table class="report"{ident}>{caption}'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def block_html(block: Block, *, image: Callable[[str, str], str], heading: str = "") -> str:
    """One block of report.md as HTML; ``image(alt, file)`` renders a plot in place (an inline chart).

    A table right under a heading of the same words keeps its caption for screen readers only.
    """
    if isinstance(block, TableData):
        return table_html(block, caption_shown=block.title != heading)
    text = block.strip()
    if text.startswith("### "):
        title = text[4:]
        return f'<h3 id="{e(slug(title))}">{inline(title)}</h3>'
    if text.startswith("## "):
        title = text[3:]
        return f'<h2 id="{e(slug(title))}">{inline(title)}</h2>'
    if text.startswith("# "):
        return ""  # the page's header carries the title
    if text.startswith("> "):
        return f'<p class="note">{inline(text[2:])}</p>'
    if (match := _IMAGE.match(text)) is not None:
        return image(match.group(1), match.group(2))
    lines = text.splitlines()
    if lines and all(line.startswith("- ") for line in lines):
        return "<ul>" + "".join(f"<li>{inline(line[2:])}</li>" for line in lines) + "</ul>"
    return f"<p>{inline(text)}</p>"


def sections_html(blocks: Sequence[Block], *, image: Callable[[str, str], str]) -> tuple[str, list[tuple[str, str]]]:
    """(HTML, [(anchor, heading)]) of every block after the title, in report.md's order."""
    parts, toc = [], []
    heading = ""
    for block in blocks:
        if isinstance(block, str) and block.startswith("## "):
            toc.append((slug(block[3:]), block[3:]))
        parts.append(block_html(block, image=image, heading=heading))
        heading = block.lstrip("#").strip() if isinstance(block, str) and block.startswith("#") else ""
    return "".join(parts), toc

"""report.html: the report's numbers, charts and every dialogue (branch trees, side by side, review marks) on one
offline page."""

from evals.report.html.dialogues import PageDialogue, collect
from evals.report.html.page import render_page

__all__ = ["PageDialogue", "collect", "render_page"]

"""docs/architecture.md names every module of the product, in the row of its folder.

A newcomer reads the "Where each thing is" table to find a behaviour: a module it does not name is one they cannot
find. Each ``.py`` file below a layer's folder must appear there as `name` (and each sub-package as `name/`) in its
top-level folder's row; the ``python -m graph.X`` / ``evals.X`` forwarders (checked by test_layers) and
``__init__``/``__main__`` files are the exceptions. A listed name that no longer exists fails too.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.project.test_layers import FOLDERS, ROOT

DOC = ROOT / "docs" / "architecture.md"
_ROW = re.compile(r"^\| ((?:`[a-z_]+/`(?:, )?)+) \| (.*) \|$")
_FORWARD = re.compile(
    r'^"""[^\n]*"""\n\nfrom cli\.\w+ import main\n\nif __name__ == "__main__":\n    raise SystemExit\(main\(\)\)\n$'
)


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            for folder in re.findall(r"`([a-z_]+)/`", match.group(1)):
                rows[folder] = match.group(2)
    return rows


def _modules(folder: str) -> list[Path]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or _FORWARD.match(path.read_text(encoding="utf-8")):
            continue
        found.append(path.relative_to(ROOT / folder))
    return found


def test_every_module_is_named_in_its_folders_row():
    rows = _rows()
    missing = []
    for folder in FOLDERS:
        row = rows.get(folder, "")
        for relative in _modules(folder):
            names = [f"`{part}/`" for part in relative.parts[:-1]] + [f"`{relative.stem}`"]
            absent = [name for name in names if name not in row]
            if absent:
                missing.append(f"{folder}/{relative}: {', '.join(absent)} not in the `{folder}/` row")
    assert not missing, "docs/architecture.md does not list:\n" + "\n".join(missing)


def test_every_name_the_rows_list_is_a_module_or_a_package():
    rows = _rows()
    stale = []
    for folder in FOLDERS:
        here = {relative.stem for relative in _modules(folder)}
        here |= {part for relative in _modules(folder) for part in relative.parts[:-1]}
        here |= {p.stem for p in (ROOT / folder).rglob("*.py")}  # forwarders may be named too
        for package in re.findall(r"\*\*`([a-z_]+)/`\*\*", rows.get(folder, "")):
            if package not in here:
                stale.append(f"`{folder}/` row names a package `{package}/` that does not exist")
    assert not stale, "\n".join(stale)

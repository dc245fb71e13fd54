"""The tree's habits: ruff (lint and format) and mypy pass as pyproject.toml configures them, and no module or
function outgrows its limit (500 and 80 lines)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Exceptions to the limits ("path" or "path::function"): none. A module or function over them is split by job.
KNOWN_OVERSIZE: frozenset[str] = frozenset()


def _tool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=900)


def _passes(done: subprocess.CompletedProcess[str], fix: str) -> None:
    if "No module named" in done.stderr:
        pytest.fail(f"{done.args[2]} is not installed: pip install -e '.[test]'")
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\nfix: {fix}"


@pytest.mark.slow
def test_ruff_check_passes():
    _passes(_tool("ruff", "check", "--no-cache", "."), "ruff check --fix . (the rest by hand)")


@pytest.mark.slow
def test_ruff_format_leaves_the_tree_as_it_is():
    _passes(_tool("ruff", "format", "--check", "--no-cache", "."), "ruff format .")


@pytest.mark.slow
def test_mypy_passes():
    _passes(_tool("mypy"), "the types named above")


def _source_files() -> list[Path]:
    """Every module of the non-test packages (a top-level folder with an ``__init__.py``, tests/ aside)."""
    packages = sorted(p.parent for p in REPO.glob("*/__init__.py") if p.parent.name != "tests")
    return [f for package in packages for f in sorted(package.rglob("*.py"))]


def _offenders(root: Path, files: list[Path], allowed: frozenset[str] = frozenset()) -> list[str]:
    """Modules over MAX_MODULE_LINES and functions (nested and async ones too) over MAX_FUNCTION_LINES."""
    found = []
    for path in files:
        name = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES and name not in allowed:
            found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{name}::{node.name}" not in allowed:
                    found.append(f"{name}:{node.lineno} {node.name}(): {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def test_no_module_or_function_outgrows_its_limit():
    offenders = _offenders(REPO, _source_files(), KNOWN_OVERSIZE)
    assert not offenders, "split these by job:\n" + "\n".join(offenders)


def test_the_size_check_sees_nested_functions_and_long_modules(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    short = tmp_path / "short.py"
    short.write_text("def f():\n" + "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1)) + "\n")
    nested = tmp_path / "nested.py"
    nested.write_text(f"def outer():\n    async def inner():\n{body}\n    return inner\n")
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    found = _offenders(tmp_path, [short, nested, long])
    assert found == [
        f"nested.py:1 outer(): {MAX_FUNCTION_LINES + 3} lines (at most {MAX_FUNCTION_LINES})",
        f"nested.py:2 inner(): {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES})",
        f"long.py: {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES})",
    ]
    assert _offenders(tmp_path, [nested, long], frozenset({"nested.py::outer", "nested.py::inner", "long.py"})) == []

"""The layers import one way only: a module may import from its own layer or below, never above.

Bottom to top: data (``prompts/``, ``seeds/``) → the store (``checkpoints/``) → models (``models/``) →
the dialogue (``nodes/`` and the state, context and builder in ``graph/``) → running and branching (the
rest of ``graph/``) → evaluation (``evals/``) and the viewer (``viewer/``, which reads the store only) →
entry points (``cli/``). Checked from the source alone, lazy imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("data", "store", "models", "dialogue", "running", "evaluation", "entry points")
FOLDERS = {
    "prompts": "data",
    "seeds": "data",
    "checkpoints": "store",
    "models": "models",
    "nodes": "dialogue",
    "graph": "running",
    "evals": "evaluation",
    "viewer": "evaluation",
    "cli": "entry points",
}
# graph/ holds the dialogue's schema and builder (beside the nodes, as in LangGraph's templates) and,
# above them, running and branching dialogues.
DIALOGUE_IN_GRAPH = {"graph", "graph.state", "graph.context", "graph.builder", "graph.modes"}
# The viewer sits on the store's reader: nothing of the engine, the models or the evaluation.
VIEWER_MAY_IMPORT = {"data", "store"}


def layer_of(module: str) -> str | None:
    if module in DIALOGUE_IN_GRAPH:
        return "dialogue"
    return FOLDERS.get(module.split(".")[0])


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> list[str]:
    """Every project module a file imports, wherever the import statement is."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            # ``from graph import state`` imports the module graph.state
            names += [f"{node.module}.{alias.name}" for alias in node.names if (ROOT / node.module / f"{alias.name}.py").exists()]
    return [name for name in names if layer_of(name)]


def entry_point_shim(tree: ast.Module) -> str | None:
    """The ``cli`` module a documented ``python -m graph.X`` / ``evals.X`` file forwards to, if that is all it does."""
    body = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    if len(body) != 2 or not isinstance(body[0], ast.ImportFrom) or not isinstance(body[1], ast.If):
        return None
    source = body[0].module or ""
    forwards = [alias.name for alias in body[0].names] == ["main"] and source.startswith("cli.")
    return source if forwards and ast.unparse(body[1].test) == "__name__ == '__main__'" else None


def project_files() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


def test_every_import_goes_down_or_sideways():
    upward = []
    for path in project_files():
        tree = ast.parse(path.read_text())
        me = module_name(path)
        if entry_point_shim(tree):
            continue  # checked below
        mine = LAYERS.index(layer_of(me))
        for name in imported(tree):
            if LAYERS.index(layer_of(name)) > mine:
                upward.append(f"{me} ({layer_of(me)}) imports {name} ({layer_of(name)})")
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_the_viewer_reads_the_store_and_nothing_of_the_engine():
    reached = {
        f"{module_name(path)} imports {name}"
        for path in (ROOT / "viewer").rglob("*.py")
        for name in imported(ast.parse(path.read_text()))
        if layer_of(name) not in VIEWER_MAY_IMPORT and not name.startswith("viewer")
    }
    assert not reached


def test_python_dash_m_entry_points_only_forward_to_cli():
    """Commands live in ``cli/``; the documented ``python -m graph.run`` (and the rest) are two-line forwards."""
    shims = {}
    for path in project_files():
        tree = ast.parse(path.read_text())
        target = entry_point_shim(tree)
        if target:
            shims[module_name(path)] = target
        elif module_name(path).split(".")[0] not in ("cli",):
            assert "def main(" not in path.read_text(), f"{module_name(path)} defines main(): commands belong in cli/"
    assert shims["graph.run"] == "cli.run" and shims["evals.report"] == "cli.report"
    for shim, target in shims.items():
        assert shim.split(".")[-1] == target.split(".")[-1], f"{shim} forwards to {target}"
        assert (ROOT / "cli" / f"{target.split('.')[-1]}.py").exists()


def test_nothing_below_the_entry_points_imports_them():
    for path in project_files():
        tree = ast.parse(path.read_text())
        if module_name(path).startswith("cli") or entry_point_shim(tree):
            continue
        assert not [n for n in imported(tree) if n.startswith("cli")], module_name(path)


@pytest.mark.parametrize("module", ["checkpoints.readers", "checkpoints.store"])
def test_a_deliberate_upward_import_is_caught(tmp_path, module):
    """The check is not vacuous: a store module importing the dialogue state is an upward import."""
    tree = ast.parse("from graph.state import DialogueState\nimport evals.metrics\n")
    assert [LAYERS.index(layer_of(n)) > LAYERS.index(layer_of(module)) for n in imported(tree)] == [True, True]


@pytest.mark.parametrize("folder_or_file", ["viewer", "cli/replay.py", "cli/report.py", "evals/report_data.py", "evals/report_writer.py"])
def test_reading_code_never_imports_the_writer(folder_or_file):
    """Replay, the viewer and reports read through the read-only reader; the writer (checkpoints.store) is not theirs."""
    target = ROOT / folder_or_file
    paths = target.rglob("*.py") if target.is_dir() else [target]
    writers = {f"{module_name(p)} imports {n}" for p in paths for n in imported(ast.parse(p.read_text())) if n == "checkpoints.store"}
    assert not writers

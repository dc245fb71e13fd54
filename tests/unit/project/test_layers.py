"""Folders are the layers, and imports run one way only: a module may import from its own layer or below, never above.

Bottom to top: data (``prompts/``, ``seeds/``) → the store (``checkpoints/``) → models (``models/``) →
the dialogue (``nodes/``: its state, context, modes, nodes and builder, side by side) → running and
branching (``graph/``) → evaluation (``evals/``) and the viewer (``viewer/``, which reads the store only) →
the library (``dymt/``: what every command does, as functions with typed results and events) → entry points (``cli/``).
No package imports one that imports it back, and no module is part of an import
circle. Checked from the source alone, lazy imports inside functions (and ``TYPE_CHECKING`` ones) included;
the one exception is the documented ``python -m graph.X`` / ``evals.X`` files, two-line forwards to ``cli/``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYERS = ("data", "store", "models", "dialogue", "running", "evaluation", "library", "entry points")
FOLDERS = {
    "prompts": "data",
    "seeds": "data",
    "checkpoints": "store",
    "models": "models",
    "nodes": "dialogue",
    "graph": "running",
    "evals": "evaluation",
    "viewer": "evaluation",
    "dymt": "library",
    "cli": "entry points",
}
# Folders of Python files that are not part of the package layers.
OUTSIDE = {"tests", "benchmarks", "docs", "examples"}
# The viewer sits on the store's reader: nothing of the engine, the models or the evaluation.
VIEWER_MAY_IMPORT = {"data", "store"}


def layer_of(module: str) -> str | None:
    return FOLDERS.get(module.split(".")[0])


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imported(tree: ast.AST) -> list[str]:
    """Every project module a file imports, wherever the import statement is."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            # ``from checkpoints.traces import tables`` imports the module checkpoints.traces.tables
            names += [
                f"{node.module}.{alias.name}" for alias in node.names if _is_module(f"{node.module}.{alias.name}")
            ]
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


def import_graph(include_shims: bool = False) -> dict[str, set[str]]:
    """Module → the project modules it imports (resolved to files that exist), the forwarders left out unless asked."""
    graph: dict[str, set[str]] = {}
    for path in project_files():
        tree = ast.parse(path.read_text())
        if entry_point_shim(tree) and not include_shims:
            continue
        graph[module_name(path)] = {name for name in imported(tree) if _is_module(name)} - {module_name(path)}
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def package_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Top-level package → the other top-level packages its modules import."""
    packages: dict[str, set[str]] = {}
    for module, names in graph.items():
        mine = module.split(".")[0]
        packages.setdefault(mine, set()).update(name.split(".")[0] for name in names if name.split(".")[0] != mine)
    return packages


def test_every_project_folder_is_a_layer():
    """A new top-level package must be given its layer here (and the dialogue lives in nodes/, not graph/)."""
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - OUTSIDE
    assert packages == set(FOLDERS), f"folders without a layer: {packages - set(FOLDERS)}"
    assert list(dict.fromkeys(FOLDERS.values())) == list(LAYERS)
    for dialogue in ("state", "context", "builder", "modes"):
        assert (ROOT / "nodes" / f"{dialogue}.py").exists() and not (ROOT / "graph" / f"{dialogue}.py").exists()


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


def test_no_package_imports_one_that_imports_it_back():
    """Between top-level packages imports run one way: no package-level circle (the forwarders aside)."""
    assert not circles(package_graph(import_graph())), package_graph(import_graph())


def test_no_module_is_part_of_an_import_circle():
    """No file-level circle, lazy imports included: every module can be read (and loaded) after what it imports."""
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_the_circle_checks_are_not_vacuous():
    """A deliberate circle is found, at file level and between packages; the forwarders are what makes cli ↔ graph."""
    assert circles({"a.x": {"a.y"}, "a.y": {"b.z"}, "b.z": {"a.x"}, "c": {"a.x"}}) == [["a.x", "a.y", "b.z"]]
    assert circles(package_graph({"graph.x": {"nodes.y"}, "nodes.y": {"graph.z"}})) == [["graph", "nodes"]]
    assert any({"cli", "graph", "evals"} <= set(c) for c in circles(package_graph(import_graph(include_shims=True))))


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
            shims[module_name(path).removesuffix(".__main__")] = target
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
    tree = ast.parse("from nodes.state import DialogueState\nimport evals.stats.metrics\n")
    assert [LAYERS.index(layer_of(n)) > LAYERS.index(layer_of(module)) for n in imported(tree)] == [True, True]


@pytest.mark.parametrize("folder_or_file", ["viewer", "cli/replay.py", "cli/report.py", "evals/report"])
def test_reading_code_never_imports_the_writer(folder_or_file):
    """Replay, the viewer and reports read through the read-only reader; the writer (checkpoints.store) is not
    theirs."""
    target = ROOT / folder_or_file
    paths = target.rglob("*.py") if target.is_dir() else [target]
    writers = {
        f"{module_name(p)} imports {n}"
        for p in paths
        for n in imported(ast.parse(p.read_text()))
        if n == "checkpoints.store"
    }
    assert not writers

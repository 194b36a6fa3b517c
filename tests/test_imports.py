"""The import graph: no cycles, and no room importing upward (plugin.py wires the rooms; they never
import it or hooks.py, and the engine measures without knowing who counts)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import poolbench_locust

PACKAGE = Path(poolbench_locust.__file__).parent
ENGINE_MAY_NOT_IMPORT = ("metrics", "results", "servermetrics", "charts", "webform", "preflight", "start_checks")
PLUGIN_IMPORTERS = {
    "poolbench_locust",  # its User classes, imported lazily, load the plugin
    "poolbench_locust.cli",  # the command line: Locust's, with the plugin loaded first
}
HOOKS_IMPORTERS = {
    "poolbench_locust.plugin",
    "poolbench_locust.webform.validation",  # its secret placeholder, until the masking moves to webform/ (issue 21)
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path, top_level_only: bool) -> set[str]:
    """The package's modules that `name` imports (what `from x import y` names, when y is a module);
    imports under `if TYPE_CHECKING:` are left out, as are imports inside functions when
    `top_level_only` (they run later, and make no cycle at import)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if top_level_only and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - child.level + 1], base]).strip(".")
                submodules = {f"{base}.{a.name}" for a in child.names} & MODULES.keys()
                found.update(submodules)
                if len(submodules) < len(child.names):  # names the package itself defines
                    found.add(base)
            visit(child)

    visit(tree)
    return {m for m in found if m in MODULES and m != name}


def test_every_module_imports():
    for name in MODULES:
        if name.endswith("__main__"):
            continue
        importlib.import_module(name)
    assert {"poolbench_locust.engine.user", "poolbench_locust.plugin"} <= set(MODULES)


def test_no_import_cycle():
    graph = {name: _imports(name, path, top_level_only=True) for name, path in MODULES.items()}
    state: dict[str, int] = {}
    trail: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        trail.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(nxt) :], nxt]))
            if nxt not in state:
                walk(nxt)
        trail.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_room_imports_upward(name):
    imported = _imports(name, MODULES[name], top_level_only=False)
    if name not in PLUGIN_IMPORTERS:
        assert "poolbench_locust.plugin" not in imported
    if name not in HOOKS_IMPORTERS:
        assert "poolbench_locust.hooks" not in imported
    if name.startswith("poolbench_locust.engine"):
        upward = {m for m in imported if m.split(".")[1] in ENGINE_MAY_NOT_IMPORT}
        assert not upward, f"{name} imports {sorted(upward)}"

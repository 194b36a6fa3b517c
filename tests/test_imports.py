"""The import graph points one way: every import counted (`if TYPE_CHECKING:` and function-local ones
too, since a type named or a module imported later is knowledge all the same), no cycle, no module
importing a layer above its own, and the modules that wire a room into Locust imported by plugin.py alone.

The layer order is written here once, and docs/architecture.md shows it in the same order."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import shutil
from pathlib import Path

import pytest

import poolbench_locust

PACKAGE = Path(poolbench_locust.__file__).parent
ARCHITECTURE = Path(__file__).parent.parent / "docs" / "architecture.md"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # Facts and tools that know no room: the wire formats, the per-environment store, the one way to
    # add to Locust's pages, the one way to add to the JSON result, the HTML tables, the early exit and the start
    # checks' template, Locust's own options, a list of records kept on disk.
    (
        "base",
        (
            *("wire", "lazyjson", "store", "urls", "htmltables", "locust_pages", "json_sections", "lifecycle"),
            *("texttable", "imageformats", "locust_options", "spool"),
        ),
    ),
    ("options", ("options",)),  # the option registry, its parsers and Settings
    ("access", ("access", "host_probe")),  # where the API key may go; --host checked at start
    ("servers", ("endpoints", "mockserver")),  # what each server speaks: the client's declarations, the mock
    ("workload", ("workload",)),  # what is sent and when: datasets, tokens, arrivals, warm-up, traces
    ("engine", ("engine",)),  # send, read to the last byte, judge, one event: knows no one who counts
    ("users", ("users",)),  # the User classes, one declaration each
    ("metrics", ("metrics",)),  # the pooling stats, fed by the request events; pacing; the checks
    ("consistency", ("consistency",)),  # how an answer compares with its reference, and their mergeable tally
    ("sweep", ("sweep",)),  # the load shape that steps, and its step table
    ("repeats", ("repeats",)),  # --repeat: each repeat's figures, their mean and 95 % interval
    ("charts", ("charts",)),
    ("servermetrics", ("servermetrics",)),
    ("capacity", ("capacity",)),  # --find-capacity: the search's load shape, its probes and their report
    ("results", ("results",)),  # the JSON result, poolbench-compare
    ("exporter", ("exporter",)),
    ("start", ("start_checks", "preflight", "stop_timeout", "embedded_mock", "webform", "answer_validator")),
    # Each room's place in Locust's events and pages, and the plugin that calls them in order.
    (
        "wiring",
        (
            "metrics.pooling_reports",
            "metrics.clientload",
            "metrics.tokengap",
            "consistency.consistency_report",
            "repeats.repeat_runs",
            "charts.chart_tabs",
            "servermetrics.server_metrics",
            "capacity.capacity_tab",
            "results.json_result",
            "exporter.prometheus_endpoint",
            "plugin",
            "cli",
            "",  # the package itself: importing a User class from it loads the plugin
        ),
    ),
]
WIRING = {f"poolbench_locust.{m}" for m in LAYERS[-1][1] if m and m not in ("plugin", "cli")}
ONLY_PLUGIN_IMPORTS = WIRING
PLUGIN_IMPORTERS = {"poolbench_locust", "poolbench_locust.cli"}


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file: at the top, inside functions,
    under `if TYPE_CHECKING:` (what `from x import y` names, when y is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*kept, base]).strip(".")
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names):  # names the module itself defines
                found.add(base)
    return {m for m in found if m in known and m != name}


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(root)
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def layer_of(module: str) -> int:
    """The index of the module's layer: its most specific prefix in LAYERS."""
    inner = module.partition(".")[2]
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = inner == prefix or (prefix and inner.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    if best is None and (declared := declared_layer(module)) is not None:
        best = next((i for i, (name, _) in enumerate(LAYERS) if name == declared), None)
    if best is None:
        raise LookupError(f'{module} is in no layer: a new room says `LAYER = "<layer>"` in its package\'s __init__.py')
    return best


def declared_layer(module: str, root: Path = PACKAGE) -> str | None:
    """The layer a room names itself, `LAYER = "..."` in its package's __init__.py: adding a room edits
    no shared file (this one included)."""
    parts = module.split(".")
    init = root.joinpath(*parts[1:2], "__init__.py") if len(parts) > 1 else None
    if init is None or not init.is_file():
        return None
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["LAYER"]:  # noqa: SIM102
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def upward_edges(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(source):
                wrong.append(
                    f"{source} ({LAYERS[layer_of(source)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                )
            elif target in ONLY_PLUGIN_IMPORTS and source != "poolbench_locust.plugin":
                wrong.append(f"{source} imports {target}, which wires a room into Locust: only plugin.py may")
            elif target == "poolbench_locust.plugin" and source not in PLUGIN_IMPORTERS:
                wrong.append(f"{source} imports the plugin")
    return wrong


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def room_of(module: str) -> str:
    """The top-level room a module belongs to: `capacity` for poolbench_locust.capacity.capacity_tab, `wire`
    for poolbench_locust.wire, the package itself for its __init__."""
    return module.split(".")[1] if "." in module else module


def rooms_importing_each_other(edges: dict[str, set[str]]) -> list[str]:
    """Each pair of top-level rooms in which each imports the other (any module of one, any of the other,
    every import counted): a room-level loop the module-level graph hides when no one module closes it."""
    between: dict[tuple[str, str], list[str]] = {}
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if room_of(source) != room_of(target):
                between.setdefault((room_of(source), room_of(target)), []).append(f"{source} -> {target}")
    return [
        f"{a} and {b} import each other: {', '.join(between[a, b])}; {', '.join(between[b, a])}"
        for a, b in sorted(between)
        if a < b and (b, a) in between
    ]


@functools.cache
def package_graph() -> dict[str, set[str]]:
    """The package's import graph, read by the first test that asks: not at import, which every xdist worker pays
    to collect this module (a second of CPU each)."""
    return graph()


def test_every_module_imports():
    for name in package_graph():
        if name.endswith("__main__"):
            continue
        importlib.import_module(name)
    assert {"poolbench_locust.engine.user", "poolbench_locust.plugin", "poolbench_locust.store"} <= set(package_graph())


def test_every_module_has_a_layer():
    for name in package_graph():
        layer_of(name)


def test_no_import_cycle():
    assert cycles(package_graph()) == []


def test_no_module_imports_a_layer_above_its_own():
    assert upward_edges(package_graph()) == []


def test_no_two_rooms_import_each_other():
    assert rooms_importing_each_other(package_graph()) == []


def test_the_wiring_modules_are_leaves():
    importers = {m: {s for s, targets in package_graph().items() if m in targets} for m in WIRING}
    assert set(importers) <= set(package_graph()), "a wiring module named in LAYERS is gone"
    assert {m: i for m, i in importers.items() if i != {"poolbench_locust.plugin"}} == {}


@pytest.mark.parametrize(
    "planted",
    [
        "from poolbench_locust.metrics.collector import PoolingStats\n",
        "if TYPE_CHECKING:\n    from poolbench_locust.metrics.collector import PoolingStats\n",
        "def later():\n    from poolbench_locust.metrics import collector\n    return collector\n",
    ],
    ids=["top-level", "type-checking", "function-local"],
)
def test_a_planted_upward_import_is_found(tmp_path, planted):
    """The guard on a copy of the package with one upward import planted in the engine, in each form."""
    copy = tmp_path / "poolbench_locust"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    body = copy / "engine" / "body.py"
    body.write_text(body.read_text() + "\n" + planted)
    planted_graph = graph(copy)
    assert "poolbench_locust.metrics.collector" in planted_graph["poolbench_locust.engine.body"]
    assert upward_edges(planted_graph) == [
        "poolbench_locust.engine.body (engine) imports poolbench_locust.metrics.collector (metrics)"
    ]


def test_a_planted_cycle_is_found(tmp_path):
    copy = tmp_path / "poolbench_locust"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    store = copy / "store.py"
    store.write_text(store.read_text() + "\ndef later():\n    from poolbench_locust import access\n")
    assert ["poolbench_locust.access", "poolbench_locust.store"] in cycles(graph(copy))


def test_two_rooms_that_import_each_other_are_found(tmp_path):
    """A function-local import planted in the engine, of a module of the metrics room that imports the
    engine: no module-level cycle, and still two rooms that import each other."""
    copy = tmp_path / "poolbench_locust"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    body = copy / "engine" / "failure_messages.py"
    body.write_text(body.read_text() + "\ndef later():\n    from poolbench_locust.metrics import histogram\n")
    planted = graph(copy)
    assert cycles(planted) == cycles(package_graph())
    found = [line for line in rooms_importing_each_other(planted) if line.startswith("engine and metrics ")]
    planted_edge = "poolbench_locust.engine.failure_messages -> poolbench_locust.metrics.histogram"
    assert len(found) == 1 and planted_edge in found[0]


def test_the_architecture_page_shows_the_layers_in_order():
    text = ARCHITECTURE.read_text()
    section = text.partition("## Layers")[2].partition("\n## ")[0]
    shown = re.findall(r"^\|\s*\d+\s*\|\s*([a-z]+)\s*\|", section, flags=re.MULTILINE)
    assert shown == [name for name, _ in reversed(LAYERS)], "docs/architecture.md's layer table, top first"

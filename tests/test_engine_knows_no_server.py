"""The engine knows no server: no module of engine/ names a server's header or answer format, nor imports a
server's declarations. What a server's answers look like is each endpoint's declaration (endpoints/spec.py,
`Endpoint.forms`; endpoints/forms.py), which the engine reads through one interface.

Read from the code (names and string constants, not comments or docstrings, which may cite a server as an
example); proven on a copy of the engine with one such name planted."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

import poolbench_locust
from poolbench_locust import wire

ENGINE = Path(poolbench_locust.__file__).parent / "engine"

SERVER_NAMES = frozenset(
    name for name in vars(wire) if name.startswith(("TEI_", "METADATA_", "COHERE_")) and name.isupper()
)
"""wire.py's names of a server's headers and texts (TEI's x-compute-* set, vLLM's metadata header, Cohere's)."""
SERVER_TEXTS = ("metadata", "x-compute", "inference-header", "bytes_only", "tei", "kserve", "triton")
"""Words of a server's header or answer format that a string constant of the engine may not hold."""
SERVER_MODULES = frozenset(
    f"poolbench_locust.endpoints.{path.stem}"
    for path in (ENGINE.parent / "endpoints").glob("*.py")
    if path.stem not in ("__init__", "spec", "forms")
)
"""A server's own declarations: the engine reads an endpoint through spec.py's and forms.py's interface only."""


def _docstrings(tree: ast.AST) -> set[int]:
    """The string constants that stand alone as statements: a module's, class's, function's or attribute's
    docstring, prose for the reader."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def server_knowledge(folder: Path) -> list[str]:
    """Each place a module of `folder` names a server's header, format or declarations."""
    found = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Name | ast.alias) and (node.id if isinstance(node, ast.Name) else node.name) in (
                SERVER_NAMES
            ):
                found.append(f"{where} names {ast.unparse(node) if isinstance(node, ast.Name) else node.name}")
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
                if modules & SERVER_MODULES:
                    found.append(f"{where} imports {sorted(modules & SERVER_MODULES)[0]}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                lower = node.value.lower()
                if any(text in lower for text in SERVER_TEXTS):
                    found.append(f"{where} says {node.value[:60]!r}")
    return found


def test_no_module_of_the_engine_names_a_server():
    assert server_knowledge(ENGINE) == []


@pytest.mark.parametrize(
    "planted",
    [
        "from poolbench_locust.wire import TEI_TOKENS_HEADER\n",
        "HEADER = 'metadata'\n",
        "from poolbench_locust.endpoints import vllm\n",
        "from poolbench_locust.endpoints.kserve import KSERVE_INFER\n",
    ],
)
def test_a_planted_server_name_is_found(tmp_path, planted):
    copy = tmp_path / "engine"
    shutil.copytree(ENGINE, copy)
    (copy / "planted.py").write_text('"""A module that knows vLLM (a docstring may say so)."""\n' + planted)
    assert len(server_knowledge(copy)) == 1, server_knowledge(copy)

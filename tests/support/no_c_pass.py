"""A subprocess's environment in which lazyjson's C pass cannot be imported, as in an install without a C
compiler: a sitecustomize.py, first on its PYTHONPATH, puts a finder before Python's that refuses
`poolbench_locust._jsonscan` (Locust's forked --processes workers inherit it). The package is not touched."""

from __future__ import annotations

import os
from pathlib import Path

SITECUSTOMIZE = '''
import importlib.abc
import sys


class _NoCPass(importlib.abc.MetaPathFinder):
    """As an install without a C compiler: the extension cannot be imported."""

    def find_spec(self, name, path=None, target=None):
        if name == "poolbench_locust._jsonscan":
            raise ImportError("hidden by the test: no C pass here")
        return None


sys.meta_path.insert(0, _NoCPass())
'''


def without_c_pass(folder: Path) -> dict[str, str]:
    """The variables to add to a subprocess's environment; `folder` (made if missing) holds the sitecustomize.py."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)}

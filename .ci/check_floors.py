"""Fails unless every dependency of pyproject.toml (and of the extras named) is installed at exactly
its lower bound: `make test-floor` runs it before the suite, so that a bound nothing can install (a
dependency's own requirement lifted it, as Locust 2.47 lifts pytest to 8.3.3) is caught, not
silently tested at a higher version. Each bound is therefore a release that exists (gevent 25.9.1,
not 25.9).

Usage: python .ci/check_floors.py [EXTRA ...]
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version


def floors(pyproject: Path, extras: list[str]) -> list[tuple[str, Version]]:
    """(name, lower bound) of each requirement with a `>=` or `==` bound."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    found: dict[str, Version] = {}
    for line in lines:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator in (">=", "=="):
                found[requirement.name] = Version(spec.version)
    return sorted(found.items())


def main(extras: list[str]) -> int:
    wrong = []
    for name, floor in floors(Path(__file__).resolve().parent.parent / "pyproject.toml", extras):
        try:
            installed = Version(version(name))
        except PackageNotFoundError:
            installed = None
        ok = installed == floor
        print(f"{name:<22} bound {floor!s:<10} installed {installed!s:<10} {'' if ok else 'NOT THE BOUND'}")
        if not ok:
            wrong.append(name)
    if wrong:
        print(f"installed above (or without) their lower bound: {', '.join(wrong)}; raise the bound in pyproject.toml")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The user docs (README.md, docs/) describe the software as it is, and every link works where it is read:

- no issue number, commit hash or bug history (CHANGELOG.md and bench/ keep history);
- on GitHub: each relative link of README.md, docs/, k8s/README.md and CHANGELOG.md names a file of the
  repository, and its #anchor a heading of that file as GitHub makes anchors;
- in the site: each link of a page under docs/ (after docsgen/hooks.py's rewrite) names a file the site
  holds, its #anchor a heading as MkDocs makes anchors; and `mkdocs build --strict` passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from docsgen.site_links import IMAGES_IN_SITE, IMAGES_ON_GITHUB
from tests.support.locust_run import ROOT

DOCS = ROOT / "docs"
USER_DOCS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
ON_GITHUB = [*USER_DOCS, ROOT / "k8s" / "README.md", ROOT / "CHANGELOG.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HISTORY = {
    "an issue number": re.compile(r"\bissues? #?\d+|(?<![\w&])#\d+\b|\bPR \d+", re.I),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "a bug's history": re.compile(r"\b(were|was) broken\b|\b(is|are|was|were) fixed\b|\bno longer\b(?! allowed)", re.I),
}


def _prose(path: Path) -> str:
    """The file without its code blocks and code spans: a failure message quoted there is not the docs' own words."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_issue_number_commit_hash_or_bug_history(path: Path) -> None:
    text = _prose(path)
    for what, pattern in HISTORY.items():
        found = [m.group(0) for m in pattern.finditer(text)]
        assert not found, f"{path.relative_to(ROOT)} holds {what}: {found} (history goes to CHANGELOG.md)"


def _headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)]


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
    return text.replace(" ", "-")


def mkdocs_anchor(heading: str) -> str:
    """Python-Markdown's toc slugify, as MkDocs uses it: ASCII, punctuation dropped, each run of spaces and
    hyphens one hyphen."""
    text = unicodedata.normalize("NFKD", heading.replace("`", "")).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _links(path: Path, text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def _broken(source: Path, target: str, base: Path, inside: Path, anchor_of) -> str | None:
    file, _, anchor = target.partition("#")
    resolved = Path(os.path.normpath(base / file)) if file else source
    if not resolved.is_relative_to(inside) or not resolved.exists():
        return f"{target}: no such file"
    if anchor and resolved.suffix == ".md" and anchor not in {anchor_of(h) for h in _headings(resolved)}:
        return f"{target}: no such heading"
    return None


@pytest.mark.parametrize("path", ON_GITHUB, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_works_on_github(path: Path) -> None:
    links = _links(path, path.read_text(encoding="utf-8"))
    broken = [b for t in links if (b := _broken(path, t, path.parent, ROOT, github_anchor))]
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("path", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_link_works_in_the_site(path: Path, tmp_path: Path) -> None:
    # The site is docs/ plus what the hook adds: bench/results/ at its root.
    site = tmp_path / "site"
    site.mkdir()
    for page in DOCS.glob("*.md"):
        (site / page.name).symlink_to(page)
    (site / "bench").mkdir()
    (site / "bench" / "results").symlink_to(ROOT / "bench" / "results")
    text = path.read_text(encoding="utf-8").replace(IMAGES_ON_GITHUB, IMAGES_IN_SITE)
    links = _links(path, text)
    broken = [b for t in links if (b := _broken(site / path.name, t, site, site, mkdocs_anchor))]
    assert not broken, f"docs/{path.name} in the site: {broken}"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]

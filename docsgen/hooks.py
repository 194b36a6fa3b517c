"""MkDocs hooks (mkdocs.yml `hooks:`): the pages and images that come from the code and the repository.

- options.md: its `<!-- options-table -->` line becomes the tables of every option, from the declarations.
- kubernetes.md: k8s/README.md itself (the one text, kept beside the manifests it explains).
- bench/results/**.png: the screenshots and charts the pages show, where the pages point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from options_page import render  # MkDocs puts a hook's own folder on sys.path while loading it

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config: Any) -> Files:
    kubernetes = (ROOT / "k8s" / "README.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "kubernetes.md", content=kubernetes))
    for image in sorted((ROOT / "bench" / "results").rglob("*.png")):
        uri = image.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(image)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "options.md":
        return render(markdown)
    return markdown

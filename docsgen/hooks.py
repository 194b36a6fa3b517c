"""MkDocs hooks (mkdocs.yml `hooks:`): the pages and images that come from the code and the repository.

- options.md: its tables of every option are made again from the declarations (the file holds them too,
  written by `python -m docsgen.options_page`, for GitHub; tests/test_docs.py checks they match).
- bench/results/**.png: the screenshots and charts the pages show. A page links them as
  `../bench/results/...` (where they are on GitHub, beside docs/); the site serves them at
  `bench/results/...` inside it, and every page's links are rewritten to point there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from options_page import render  # MkDocs puts a hook's own folder on sys.path while loading it
from site_links import IMAGES_IN_SITE, IMAGES_ON_GITHUB

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config: Any) -> Files:
    for image in sorted((ROOT / "bench" / "results").rglob("*.png")):
        uri = image.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(image)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    markdown = markdown.replace(IMAGES_ON_GITHUB, IMAGES_IN_SITE)
    if page.file.src_uri == "options.md":
        return render(markdown)
    return markdown

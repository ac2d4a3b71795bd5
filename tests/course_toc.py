"""What the site should contain, read from _toc.yml and _config.yml (helpers for the site tests).

Written independently of the Sphinx extensions in _ext/, so the tests check them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def source_of(docname: str) -> Path:
    """The .md or .ipynb file a toc entry names."""
    for suffix in (".md", ".ipynb"):
        path = ROOT / f"{docname}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(f"_toc.yml names {docname!r}, but no {docname}.md or .ipynb exists")


def _walk(entries: list[dict], visit) -> None:
    for entry in entries:
        visit(entry)
        _walk(entry.get("sections", []), visit)
        _walk(entry.get("chapters", []), visit)


def _walk_toc(visit) -> None:
    toc = _toc()
    for part in toc.get("parts", []):
        _walk(part.get("chapters", []), visit)
    _walk(toc.get("chapters", []), visit)


def toc_pages() -> list[str]:
    """Docnames of every page in the toc, root first, in reading order."""
    pages = [_toc()["root"]]
    _walk_toc(lambda entry: pages.append(entry["file"]) if "file" in entry else None)
    return pages


def toc_notebooks() -> list[str]:
    """Paths of the notebooks the toc publishes, e.g. 'chapters/02-prefill/prefill.ipynb'."""
    return [f"{p}.ipynb" for p in toc_pages() if source_of(p).suffix == ".ipynb"]


def chapters_with_notebooks() -> dict[str, list[str]]:
    """{prose page: [its notebook sections]}, e.g.
    {'chapters/02-prefill/index': ['chapters/02-prefill/prefill.ipynb']}."""
    found: dict[str, list[str]] = {}

    def visit(entry: dict) -> None:
        if "file" not in entry or source_of(entry["file"]).suffix == ".ipynb":
            return
        notebooks = [
            f"{s['file']}.ipynb"
            for s in entry.get("sections", [])
            if "file" in s and source_of(s["file"]).suffix == ".ipynb"
        ]
        if notebooks:
            found[entry["file"]] = notebooks

    _walk_toc(visit)
    return found


def expected_colab_url(notebook: str) -> str:
    """Colab's URL for a notebook of this repository, written out from _config.yml."""
    repository = config()["repository"]
    org, repo = repository["url"].rstrip("/").split("/")[-2:]
    book = (repository.get("path_to_book") or "").strip("/")
    path = f"{book}/{notebook}" if book else notebook
    return f"https://colab.research.google.com/github/{org}/{repo}/blob/{repository['branch']}/{path}"


def source_title(docname: str) -> str:
    """The page's title as written in its source: the first '# ' heading, markup removed."""
    path = source_of(docname)
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells
            if c["cell_type"] == "markdown"
        )
    else:
        text = re.sub(r"\A---\n.*?\n---\n", "", path.read_text(encoding="utf-8"), flags=re.S)
    match = re.search(r"^# +(.+?)\s*$", text, re.M)
    if not match:
        raise ValueError(f"{path} has no '# ' title")
    return re.sub(r"[*_`$]", "", match.group(1)).strip()

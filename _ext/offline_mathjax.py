"""Serve MathJax from the site itself, so pages with math render offline.

Sphinx loads MathJax from a CDN by default. The PyPI package ``sphinx-mathjax-offline`` ships
MathJax 3's files; this extension copies the part a TeX-to-HTML page can load (the combined
``tex-chtml-full.js``, its fonts and the components it may load lazily: accessibility, menu, TeX
extensions) into ``_static/mathjax`` of the built site, and points ``mathjax_path`` there.

The files are copied into the output, not into the book's ``_static/`` folder: Jupyter Book
adds every ``.js`` file under ``_static/`` to every page.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError
from sphinx.util.fileutil import copy_asset

PACKAGE = "sphinx-mathjax-offline"  # its import name has dashes; it is used for its files only
ENTRY = "tex-chtml-full.js"
# What tex-chtml-full.js may fetch after it loads, relative to its own folder.
LAZY_PARTS = ("a11y", "sre", "ui", "input", "adaptors", "output/chtml")


def mathjax_source() -> Path:
    """Folder of the packaged MathJax 3 distribution."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            f"offline_mathjax: the package {PACKAGE!r} is not installed; "
            "install the course extras (pip install -e '.[course]')"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    if not (folder / ENTRY).is_file():
        raise ExtensionError(f"offline_mathjax: {folder / ENTRY} is missing")
    return folder


def _wanted(relpath: str) -> bool:
    """True for the files to copy: the entry script and the lazily loaded components.

    `relpath` is relative to the MathJax folder, as ``copy_asset`` passes it (``./x`` at the top).
    """
    rel = relpath.removeprefix("./")
    if rel == ENTRY:
        return True
    return any(rel == part or rel.startswith(part + "/") or part.startswith(rel + "/") for part in LAZY_PARTS)


def use_local_mathjax(app: Sphinx, config: Config) -> None:
    """Point Sphinx's MathJax at the copy in ``_static/mathjax`` unless a local one is set."""
    if str(config.mathjax_path).startswith(("http://", "https://", "//")):
        config.mathjax_path = f"mathjax/{ENTRY}"


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    copy_asset(
        str(mathjax_source()),
        str(Path(app.outdir) / "_static" / "mathjax"),
        excluded=lambda path: not _wanted(path),
    )


def setup(app: Sphinx) -> dict[str, Any]:
    mathjax_source()  # fail at start, not after the whole build, when the files are missing
    app.connect("config-inited", use_local_mathjax)
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}

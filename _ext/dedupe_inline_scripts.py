"""Write each inline <script> once per page.

Sphinx 7.4 adds the inline scripts that extensions register after the builder starts (those of
sphinx-thebe and sphinx-togglebutton) twice: once as they are registered, once again when it
prepares writing, with the empty file name ``''`` instead of ``None``, so its duplicate check
misses them. sphinx-thebe's copy declares ``const THEBE_JS_URL``, and its second copy is a
JavaScript error on every page ("Identifier 'THEBE_JS_URL' has already been declared").
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx


def _key(script: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    attributes = getattr(script, "attributes", {}) or {}
    return (
        str(getattr(script, "filename", script) or ""),
        tuple(sorted((str(k), str(v)) for k, v in attributes.items())),
    )


def drop_duplicate_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # A new list: the builder's own list is restored after each page anyway.
    context["script_files"] = unique


def setup(app: Sphinx) -> dict[str, Any]:
    # Last, after every extension and theme has added its page scripts.
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}

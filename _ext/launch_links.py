"""Launch links (Colab first, then Binder and JupyterHub) on every page that has a notebook.

sphinx-book-theme puts a launch menu only on pages built from notebooks, but readers arrive on a
chapter's prose page (``index.md``), whose lab notebook is a sub-page. This extension

- gives a prose page the same header launch menu, pointing at the notebook(s) in its toctree;
- puts a visible "Run the lab" box under the title of the prose page and of the notebook page,
  with Colab as the primary button (it has a free GPU);
- lists Colab first in the theme's own launch menu on notebook pages.

Every URL is built from `repository` and `launch_buttons` in ``_config.yml``, which Jupyter Book
hands to Sphinx as ``html_theme_options``; nothing here names the repository.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlencode

from docutils import nodes
from sphinx.application import Sphinx

PROVIDERS = ("Colab", "Binder", "JupyterHub")  # the order buttons are shown in
ICONS = {
    "Colab": "_static/images/logo_colab.png",
    "Binder": "_static/images/logo_binder.svg",
    "JupyterHub": "_static/images/logo_jupyterhub.svg",
}
INTERFACE_PREFIXES = {"classic": "tree", "jupyterlab": "lab/tree"}


@dataclass(frozen=True)
class LaunchSettings:
    """Where the course lives and which launch services to offer (from ``_config.yml``)."""

    repository_url: str  # https://github.com/<org>/<repo>
    branch: str
    path_to_book: str = ""  # the book's folder inside the repository; "" for its root
    colab_url: str = ""
    binderhub_url: str = ""
    jupyterhub_url: str = ""
    notebook_interface: str = "classic"

    def __post_init__(self) -> None:
        for name in ("repository_url", "colab_url", "binderhub_url", "jupyterhub_url"):
            object.__setattr__(self, name, getattr(self, name).rstrip("/"))
        object.__setattr__(self, "path_to_book", self.path_to_book.strip("/"))
        if not self.repository_url.startswith("https://github.com/"):
            raise ValueError(
                f"launch links need a GitHub repository url, got {self.repository_url!r}: "
                "set repository.url in _config.yml to https://github.com/<org>/<repo>"
            )
        if len(self.repository_url.split("/")) != 5:
            raise ValueError(f"repository url {self.repository_url!r} should be https://github.com/<org>/<repo>")
        if not self.branch:
            raise ValueError("repository.branch is empty in _config.yml: name the branch (main)")
        if self.notebook_interface not in INTERFACE_PREFIXES:
            raise ValueError(
                f"launch_buttons.notebook_interface {self.notebook_interface!r} is not one of "
                f"{', '.join(INTERFACE_PREFIXES)}"
            )

    @classmethod
    def from_theme_options(cls, options: dict[str, Any]) -> LaunchSettings:
        """Read the settings Jupyter Book passes to sphinx-book-theme."""
        launch = options.get("launch_buttons") or {}
        return cls(
            repository_url=str(options.get("repository_url", "")),
            branch=str(options.get("repository_branch", "")),
            path_to_book=str(options.get("path_to_docs", "") or ""),
            colab_url=str(launch.get("colab_url", "") or ""),
            binderhub_url=str(launch.get("binderhub_url", "") or ""),
            jupyterhub_url=str(launch.get("jupyterhub_url", "") or ""),
            notebook_interface=str(launch.get("notebook_interface", "classic")),
        )

    @property
    def org_and_repo(self) -> tuple[str, str]:
        org, repo = self.repository_url.split("/")[-2:]
        return org, repo


def launch_urls(settings: LaunchSettings, notebook: str) -> dict[str, str]:
    """Launch URL of each configured service for `notebook`, a path relative to the book root.

    The formats are sphinx-book-theme's, so a prose page and its notebook page open the same
    thing. Services without a URL in ``launch_buttons`` are left out.
    """
    if not notebook.endswith(".ipynb"):
        raise ValueError(f"launch links open notebooks, got {notebook!r} (expected *.ipynb)")
    path = str(PurePosixPath(settings.path_to_book, notebook)) if settings.path_to_book else notebook
    org, repo = settings.org_and_repo
    ui = INTERFACE_PREFIXES[settings.notebook_interface]
    urls = {}
    if settings.colab_url:
        urls["Colab"] = f"{settings.colab_url}/github/{org}/{repo}/blob/{settings.branch}/{path}"
    if settings.binderhub_url:
        urls["Binder"] = f"{settings.binderhub_url}/v2/gh/{org}/{repo}/{settings.branch}?urlpath={ui}/{path}"
    if settings.jupyterhub_url:
        query = urlencode(
            {
                "repo": settings.repository_url,
                "urlpath": f"{ui}/{repo}/{path}",
                "branch": settings.branch,
            },
            safe="/",
        )
        urls["JupyterHub"] = f"{settings.jupyterhub_url}/hub/user-redirect/git-pull?{query}"
    return urls


def _is_notebook(app: Sphinx, docname: str) -> bool:
    return str(app.env.doc2path(docname)).endswith(".ipynb")


def page_notebooks(app: Sphinx, docname: str) -> list[str]:
    """Docnames of the notebooks a page offers to launch: itself, or those in its toctree.

    The root page is left out: its toctree is the whole course.
    """
    if _is_notebook(app, docname):
        return [docname]
    if docname == app.config.root_doc:
        return []
    children = app.env.toctree_includes.get(docname, [])
    return [child for child in children if _is_notebook(app, child)]


def _settings(app: Sphinx) -> LaunchSettings | None:
    options = app.config.html_theme_options or {}
    if not options.get("repository_url"):
        return None
    return LaunchSettings.from_theme_options(options)


def _launch_box(app: Sphinx, docname: str, notebooks: list[str], settings: LaunchSettings) -> str:
    """HTML of the box under the page title: one row of buttons per notebook."""
    to_root = "../" * docname.count("/")
    rows = []
    for notebook in notebooks:
        urls = launch_urls(settings, notebook + ".ipynb")
        if not urls:
            continue
        if notebook == docname:
            label = "Run this notebook"
        else:
            title = app.env.titles[notebook].astext() if notebook in app.env.titles else notebook
            href = app.builder.get_relative_uri(docname, notebook)
            label = (
                f'Run this chapter\'s notebook: <a class="reference internal" href="{href}">{html.escape(title)}</a>'
            )
        buttons = []
        for provider in PROVIDERS:
            if provider not in urls:
                continue
            kind = "primary" if provider == "Colab" else "secondary"
            text = "Open in Colab" if provider == "Colab" else provider
            buttons.append(
                f'<a class="launch-button launch-{kind} launch-{provider.lower()}" '
                f'href="{html.escape(urls[provider])}" target="_blank" rel="noopener">'
                f'<img src="{to_root}{ICONS[provider]}" alt="" aria-hidden="true">{text}</a>'
            )
        rows.append(f'<p class="launch-box-label">{label}</p><p class="launch-box-buttons">{"".join(buttons)}</p>')
    if not rows:
        return ""
    note = (
        '<p class="launch-box-note">Colab gives a free GPU: Runtime &gt; Change runtime type. '
        "The notebook's first cell installs the course package there.</p>"
    )
    return f'<div class="launch-box" role="region" aria-label="Run the notebook">{"".join(rows)}{note}</div>'


def add_launch_box(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Insert the launch box right after the page's first title."""
    if app.builder.format != "html":
        return
    settings = _settings(app)
    notebooks = page_notebooks(app, docname)
    if settings is None or not notebooks:
        return
    box = _launch_box(app, docname, notebooks, settings)
    title = next(iter(doctree.findall(nodes.title)), None)
    if not box or title is None:
        return
    title.parent.insert(title.parent.index(title) + 1, nodes.raw("", box, format="html"))


def add_header_menu(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """Header launch menu: Colab first on notebook pages; added to prose pages with a lab."""
    header_buttons = context.get("header_buttons")
    settings = _settings(app)
    if header_buttons is None or settings is None or pagename not in app.env.all_docs:
        return
    for group in header_buttons:
        if group.get("label") == "launch-buttons":
            group["buttons"].sort(key=lambda b: b.get("text") != "Colab")
            return
    notebooks = page_notebooks(app, pagename)
    if len(notebooks) != 1:
        return
    urls = launch_urls(settings, notebooks[0] + ".ipynb")
    buttons = [
        {
            "type": "link",
            "text": provider,
            "tooltip": f"Open the lab on {provider}",
            "icon": ICONS[provider],
            "url": urls[provider],
        }
        for provider in PROVIDERS
        if provider in urls
    ]
    if buttons:
        # First, where the theme puts the launch menu on notebook pages.
        header_buttons.insert(
            0,
            {
                "type": "group",
                "tooltip": "Launch this chapter's lab",
                "icon": "fas fa-rocket",
                "buttons": buttons,
                "label": "launch-buttons",
            },
        )


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-resolved", add_launch_box)
    # After sphinx-book-theme's own launch menu (priority 501).
    app.connect("html-page-context", add_header_menu, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}

"""Notebooks are committed clean and start with the setup cell; launch links open the right file.

The launch-link checks here need no browser: they read _config.yml and _toc.yml and the HTML of
the built site. tests/test_site.py checks the same site in a browser.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from types import ModuleType

import pytest
from course_toc import chapters_with_notebooks, config, expected_colab_url, toc_notebooks

from utils.notebook_setup import setup_cell

ROOT = Path(__file__).resolve().parents[1]
# Folders whose notebooks a learner runs: they start with the setup cell.
LEARNER_FOLDERS = ("chapters", "solutions", "exercises")
SKIPPED_PARTS = {".venv", "_build", "grading", ".ipynb_checkpoints", ".jupyter_cache", "node_modules"}


def repository_notebooks() -> list[Path]:
    """Every notebook of the repository (tracked or new, not ignored), except test fixtures."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.ipynb"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        paths = sorted({ROOT / p for p in listed if (ROOT / p).exists()})
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        paths = sorted(p for p in ROOT.rglob("*.ipynb") if not SKIPPED_PARTS & set(p.parts))
    return [p for p in paths if not p.relative_to(ROOT).as_posix().startswith("tests/fixtures/")]


NOTEBOOKS = repository_notebooks()


def notebook_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_repository_has_notebooks() -> None:
    assert any(notebook_id(p).startswith("chapters/") for p in NOTEBOOKS), "no chapter notebooks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=notebook_id)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    cells = load(path)["cells"]
    dirty = [
        i
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{notebook_id(path)}: code cells {dirty} have outputs or execution counts; clear them "
        "(jupyter nbconvert --clear-output --inplace) before committing"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=notebook_id)
def test_notebook_has_python3_kernelspec(path: Path) -> None:
    kernelspec = load(path).get("metadata", {}).get("kernelspec", {})
    assert kernelspec.get("name") == "python3", (
        f"{notebook_id(path)}: kernelspec name is {kernelspec.get('name')!r}, expected 'python3'"
    )


LEARNER_NOTEBOOKS = [p for p in NOTEBOOKS if notebook_id(p).split("/")[0] in LEARNER_FOLDERS]


@pytest.mark.parametrize("path", LEARNER_NOTEBOOKS, ids=notebook_id)
def test_first_code_cell_is_the_setup_cell(path: Path) -> None:
    code = [c for c in load(path)["cells"] if c["cell_type"] == "code"]
    assert code, f"{notebook_id(path)} has no code cell"
    source = code[0]["source"]
    source = "".join(source) if isinstance(source, list) else source
    assert source == setup_cell(), (
        f"{notebook_id(path)}: the first code cell is not utils.notebook_setup.setup_cell(); "
        "paste its output there unchanged"
    )


# --- Launch links -------------------------------------------------------------------------


def load_launch_links() -> ModuleType:
    spec = importlib.util.spec_from_file_location("launch_links", ROOT / "_ext" / "launch_links.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_launch_urls_follow_each_service_format() -> None:
    links = load_launch_links()
    settings = links.LaunchSettings(
        repository_url="https://github.com/acme/course",
        branch="dev",
        path_to_book="book",
        colab_url="https://colab.research.google.com",
        binderhub_url="https://mybinder.org/",
        jupyterhub_url="https://hub.acme.edu",
        notebook_interface="jupyterlab",
    )
    urls = links.launch_urls(settings, "chapters/03-decode/decode.ipynb")
    assert urls == {
        "Colab": "https://colab.research.google.com/github/acme/course/blob/dev/book/chapters/03-decode/decode.ipynb",
        "Binder": "https://mybinder.org/v2/gh/acme/course/dev?urlpath=lab/tree/book/chapters/03-decode/decode.ipynb",
        "JupyterHub": "https://hub.acme.edu/hub/user-redirect/git-pull"
        "?repo=https%3A//github.com/acme/course"
        "&urlpath=lab/tree/course/book/chapters/03-decode/decode.ipynb&branch=dev",
    }
    assert list(urls)[0] == "Colab", "Colab is the primary launch service: it comes first"


def test_launch_settings_reject_what_they_cannot_link() -> None:
    links = load_launch_links()
    with pytest.raises(ValueError, match="GitHub"):
        links.LaunchSettings(repository_url="https://gitlab.com/acme/course", branch="main")
    with pytest.raises(ValueError, match="branch"):
        links.LaunchSettings(repository_url="https://github.com/acme/course", branch="")
    settings = links.LaunchSettings(repository_url="https://github.com/acme/course", branch="main")
    with pytest.raises(ValueError, match="ipynb"):
        links.launch_urls(settings, "chapters/intro.md")


def test_config_names_the_repository_and_every_launch_service() -> None:
    cfg = config()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", cfg["repository"]["url"])
    assert cfg["repository"].get("branch"), "set repository.branch (the theme defaults to master)"
    for key in ("colab_url", "binderhub_url", "jupyterhub_url"):
        assert cfg["launch_buttons"].get(key), f"launch_buttons.{key} is not set in _config.yml"
    setup = setup_cell()
    assert f'REPO = "{cfg["repository"]["url"]}"' in setup, "setup cell names another repository"
    assert f"@{cfg['repository']['branch']}" in setup, "setup cell installs another branch"


def test_solutions_are_excluded_and_exercises_are_not_executed() -> None:
    cfg = config()
    assert "solutions" in cfg["exclude_patterns"], "solutions/ must be in exclude_patterns"
    patterns = cfg["execute"].get("exclude_patterns", [])
    for notebook in toc_notebooks():
        assert not notebook.startswith("solutions/"), f"_toc.yml publishes {notebook}"
        if notebook.startswith("exercises/"):
            # myst-nb's test: PurePosixPath(<absolute path>).match(pattern), anchored at the end.
            path = PurePosixPath((ROOT / notebook).as_posix())
            assert any(path.match(p) for p in patterns), (
                f"{notebook} is a student version (its answers raise): add it to "
                "execute.exclude_patterns in _config.yml"
            )


def colab_links(page: Path) -> list[str]:
    """Colab URLs of a built page: the launch box's and the header menu's."""
    return [
        u.replace("&amp;", "&")
        for u in re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', page.read_text())
    ]


def test_every_chapter_page_opens_its_notebook_in_colab(site_html: Path) -> None:
    chapters = chapters_with_notebooks()
    assert chapters, "_toc.yml has no chapter page with a notebook"
    for page, notebooks in chapters.items():
        html = (site_html / f"{page}.html").read_text()
        box = re.search(r'<div class="launch-box".*?</div>', html, re.S)
        assert box, f"{page}.html has no launch box"
        primary = re.findall(r'class="launch-button launch-primary launch-colab" href="([^"]+)"', box.group(0))
        assert primary == [expected_colab_url(nb) for nb in notebooks], (
            f"{page}.html: Colab buttons {primary}, expected one per notebook {notebooks}"
        )
        assert set(colab_links(site_html / f"{page}.html")) == {expected_colab_url(nb) for nb in notebooks}, (
            f"{page}.html links Colab to something other than its notebooks"
        )


def test_every_notebook_page_opens_itself_in_colab(site_html: Path) -> None:
    notebooks = toc_notebooks()
    assert notebooks, "_toc.yml publishes no notebook"
    for notebook in notebooks:
        page = site_html / notebook.replace(".ipynb", ".html")
        assert set(colab_links(page)) == {expected_colab_url(notebook)}, (
            f"{page.name}: Colab links {colab_links(page)}, expected {expected_colab_url(notebook)}"
        )


def test_prose_and_notebook_pages_offer_the_same_launch_links(site_html: Path) -> None:
    """The header menu the theme builds on a notebook page matches ours on its chapter page."""

    def header_links(page: Path) -> set[str]:
        menu = re.search(r"dropdown-launch-buttons.*?</ul>", page.read_text(), re.S)
        assert menu, f"{page} has no launch menu"
        return {u.replace("&amp;", "&") for u in re.findall(r'href="([^"]+)"', menu.group(0))}

    for page, notebooks in chapters_with_notebooks().items():
        if len(notebooks) != 1:
            continue
        chapter = header_links(site_html / f"{page}.html")
        lab = header_links(site_html / notebooks[0].replace(".ipynb", ".html"))
        assert chapter == lab and len(chapter) == 3, f"{page}: {chapter} != {lab}"


def test_nothing_links_to_solutions(site_html: Path) -> None:
    offenders = [
        f"{page.relative_to(site_html)}: {href}"
        for page in site_html.rglob("*.html")
        for href in re.findall(r'href="([^"]*)"', page.read_text(errors="replace"))
        if re.search(r"(^|/)solutions/", href)
    ]
    assert not offenders, f"pages link to solutions/: {offenders[:5]}"


def test_assignments_are_published_unexecuted(site_html: Path) -> None:
    exercises = [nb for nb in toc_notebooks() if nb.startswith("exercises/")]
    for notebook in exercises:
        page = (site_html / notebook.replace(".ipynb", ".html")).read_text()
        assert 'class="cell docutils container"' in page, f"{notebook}: no code cells shown"
        assert 'class="cell_output' not in page, f"{notebook} was executed: students would see outputs"

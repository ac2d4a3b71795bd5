"""The GitHub workflows build and test what the Makefile does, with the same pins."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

WORKFLOWS = Path(__file__).resolve().parents[1] / ".github" / "workflows"


def workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(data: dict) -> list[dict]:
    return [step for job in data["jobs"].values() for step in job.get("steps", [])]


def makefile_torch_version(root: Path) -> str:
    match = re.search(r"^TORCH_SPEC\s*\?=\s*torch==(\S+)", (root / "Makefile").read_text(), re.M)
    assert match, "the Makefile pins no TORCH_SPEC"
    return match.group(1)


def test_deploy_builds_with_the_cache_and_publishes_the_html_on_main(root: Path) -> None:
    data = workflow("deploy.yml")
    assert data["on"]["push"]["branches"] == ["main"]
    assert data["permissions"]["pages"] == "write" and data["permissions"]["id-token"] == "write"
    runs = [s.get("run", "") for s in steps(data)]
    assert any(r.strip() == "make book" for r in runs), "deploy should build with `make book`"
    uses = {s.get("uses", "").split("@")[0]: s for s in steps(data)}
    assert uses["actions/upload-pages-artifact"]["with"]["path"] == "_build/html"
    assert "actions/deploy-pages" in uses
    cache = uses["actions/cache"]["with"]
    # Jupyter Book keeps the jupyter-cache in _build/.jupyter_cache unless execute.cache moves it.
    config = yaml.safe_load((root / "_config.yml").read_text())
    assert config["execute"].get("cache", "") in ("", "_build/.jupyter_cache")
    assert cache["path"] == "_build/.jupyter_cache"
    assert "utils/**/*.py" in cache["key"], "a change in utils/ must re-execute the notebooks"


def test_tests_workflow_runs_make_test_on_pull_requests() -> None:
    data = workflow("tests.yml")
    assert "pull_request" in data["on"]
    assert any(s.get("run", "").strip() == "make test" for s in steps(data))


def test_workflows_install_the_makefile_torch_as_a_cpu_build(root: Path) -> None:
    version = makefile_torch_version(root)
    for name, job in (("deploy.yml", "build"), ("tests.yml", "test")):
        env = workflow(name)["jobs"][job].get("env", {})
        assert env.get("TORCH_SPEC") == f"torch=={version}+cpu", f"{name}: {env.get('TORCH_SPEC')}"
        assert env.get("PIP_EXTRA_INDEX_URL", "").endswith("/whl/cpu"), name

"""The graded assignments and the nbgrader pipeline, tested for real.

Fast tests check the notebooks and the pipeline's pieces. The tests marked `grading` (run alone
with `pytest -m grading tests/test_grading.py`) regenerate the student versions with the same
nbgrader command as `make assignments`, autograde every fixture submission of
tests/fixtures/submissions (one nbgrader run per student, two at a time), generate feedback and
export the grades, then compare each outcome with the fixture's expected.json.
"""

from __future__ import annotations

import csv
import datetime as dt
import filecmp
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

from utils import grading
from utils.grading import Course, Result

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FIXTURES = ROOT / "tests" / "fixtures" / "submissions"
ASSIGNMENTS = grading.assignments(ROOT)
POINTS = {"ps1-arithmetic-intensity": 18, "ps2-ttft-tpot": 20, "ps3-batching-and-memory": 16,
          "ps4-profiling-lab": 16}
TEST_TIMEOUT = 10  # seconds per cell for ps1's fixtures (one loops forever); the course uses 60
JOBS = 3  # students graded at once


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def source_nb(assignment: str) -> nbformat.NotebookNode:
    (name,) = ASSIGNMENTS[assignment]
    return nbformat.read(ROOT / "solutions" / assignment / f"{name}.ipynb", 4)


def release_nb(assignment: str) -> nbformat.NotebookNode:
    (name,) = ASSIGNMENTS[assignment]
    return nbformat.read(ROOT / "exercises" / assignment / f"{name}.ipynb", 4)


def expected(assignment: str) -> dict[str, dict]:
    return json.loads((FIXTURES / assignment / "expected.json").read_text())["students"]


def regions(source: str, begin: str, end: str) -> list[str]:
    """The lines between `begin` and `end` marker lines."""
    found, inside = [], False
    for line in source.split("\n"):
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside:
            found.append(line)
    return found


# ---- the notebooks -----------------------------------------------------------------------------

def test_the_four_assignments_exist() -> None:
    assert list(ASSIGNMENTS) == list(POINTS)


def test_source_notebooks_are_what_make_notebooks_builds() -> None:
    builder = load_module(ROOT / "solutions" / "make_notebooks.py", "make_notebooks")
    assert builder.main(["--check"]) == 0, "run .venv/bin/python solutions/make_notebooks.py"


@pytest.mark.parametrize("assignment", list(POINTS))
def test_points(assignment: str) -> None:
    total = sum(c.metadata.nbgrader["points"] for c in source_nb(assignment).cells
                if c.metadata.get("nbgrader", {}).get("grade"))
    assert total == POINTS[assignment]


@pytest.mark.parametrize("assignment", list(POINTS))
def test_student_version_hides_solutions_and_hidden_tests(assignment: str) -> None:
    release = release_nb(assignment)
    text = "\n".join(c.source for c in release.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in text
    secret, visible = [], []
    for cell in source_nb(assignment).cells:
        hidden = (regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")
                  + regions(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
        secret += hidden
        visible += [ln for ln in cell.source.split("\n") if ln not in hidden]
    distinctive = {ln.strip() for ln in secret if len(ln.strip()) >= 16}
    assert distinctive, "no solution or hidden-test lines found: the markers changed?"
    shown = {ln.strip() for ln in visible}  # e.g. a signature's last line, also in the answer
    released = {ln.strip() for ln in text.split("\n")}
    leaked = [ln for ln in distinctive if ln in released and ln not in shown]
    assert not leaked, f"solution or hidden-test lines in the student version: {leaked}"
    for cell in release.cells:
        assert not cell.get("outputs"), "a student version carries outputs"
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            assert "raise NotImplementedError()" in cell.source
        if meta.get("grade") and not meta.get("solution"):
            assert meta.get("locked") and cell.metadata.get("editable") is False


@pytest.mark.parametrize("assignment", list(POINTS))
def test_each_notebook_has_one_title_and_states_the_rules(assignment: str) -> None:
    for nb in (source_nb(assignment), release_nb(assignment)):
        titles = [ln for c in nb.cells if c.cell_type == "markdown"
                  for ln in c.source.split("\n") if ln.startswith("# ")]
        assert len(titles) == 1, titles
        intro = nb.cells[0].source
        assert "utils.roofline" in intro and "not allowed" in intro
        if assignment != "ps4-profiling-lab":  # the spec-sheet problem sets
            assert "sparse" in "\n".join(c.source for c in nb.cells)
        assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("assignment", list(POINTS))
def test_every_answered_function_is_checked_for_shortcuts(assignment: str) -> None:
    """Each `def` a student writes is named in a hidden check_no_shortcut."""
    nb = source_nb(assignment)
    hidden = "\n".join("\n".join(regions(c.source, "BEGIN HIDDEN", "END HIDDEN")) for c in nb.cells)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            for name in re.findall(r"^def (\w+)\(", cell.source, re.M):
                assert f"check_no_shortcut({name}," in hidden, name


def test_fixtures_are_current(tmp_path: Path) -> None:
    maker = load_module(ROOT / "tests" / "fixtures" / "make_submissions.py", "make_submissions")
    maker.main([str(tmp_path)])
    for assignment in POINTS:
        fresh, committed = tmp_path / assignment, FIXTURES / assignment
        compared = filecmp.dircmp(fresh, committed)
        assert not (compared.left_only or compared.right_only), (
            f"{assignment}: fixture folders differ; run tests/fixtures/make_submissions.py")
        for student in sorted(p.name for p in fresh.iterdir() if p.is_dir()):
            for file in sorted((fresh / student).iterdir()):
                assert file.read_bytes() == (committed / student / file.name).read_bytes(), (
                    f"{assignment}/{student}/{file.name} is stale: run "
                    "tests/fixtures/make_submissions.py")
        assert (fresh / "expected.json").read_text() == (committed / "expected.json").read_text()


def test_every_assignment_has_its_fixtures() -> None:
    for assignment in POINTS:
        students = expected(assignment)
        assert {"solution", "blank"} <= set(students)
        wrong = [s for s in students if s.startswith("wrong-")]
        assert len(wrong) >= (2 if assignment == "ps4-profiling-lab" else 8), assignment
        for s in wrong:
            assert students[s]["messages"], f"{s} names no misconception"


# ---- the pipeline's pieces -------------------------------------------------------------------

def code_nb(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


def test_tamper_scan_names_what_the_code_touches() -> None:
    scan = grading.scan_for_tampering
    assert scan(code_nb("def f(x):\n    return 2 * x", "import math")) == []
    found = scan(code_nb("ip = get_ipython()\nip.input_transformers_post.append(lambda l: [])"))
    assert found == ["input transformers", "get_ipython"]
    assert "showtraceback" in scan(code_nb("get_ipython().showtraceback = print"))
    assert "sys.excepthook" in scan(code_nb("import sys\nsys.excepthook = print"))
    assert "AST transformers" in scan(code_nb("shell.ast_transformers.append(t)"))
    markdown = nbformat.v4.new_notebook()
    markdown.cells = [nbformat.v4.new_markdown_cell("I did not use get_ipython().showtraceback")]
    assert scan(markdown) == []  # only code runs


def test_precheck_records_missing_and_malformed_notebooks(tmp_path: Path) -> None:
    course = Course(grading=tmp_path)
    folder = course.submitted("s1", "ps9")
    folder.mkdir(parents=True)
    missing = grading.precheck(course, "ps9", "s1", ["lab"])
    assert missing.status == "missing" and missing.reason == "no lab.ipynb in the submission"
    (folder / "lab (1).ipynb").write_text("{}")
    assert "found: lab (1).ipynb" in grading.precheck(course, "ps9", "s1", ["lab"]).reason
    (folder / "lab.ipynb").write_text('{"cells": [')
    assert grading.precheck(course, "ps9", "s1", ["lab"]).status == "malformed"
    (folder / "lab.ipynb").write_text('{"cells": "none"}')
    assert "not an nbformat-4 notebook" in grading.precheck(course, "ps9", "s1", ["lab"]).reason
    (folder / "lab.ipynb").write_text(nbformat.writes(code_nb("x = 1")))
    assert grading.precheck(course, "ps9", "s1", ["lab"]) is None


def test_late_penalty_per_started_day() -> None:
    plugin = grading.LatePenaltyPerDay(percent_per_day=10.0)
    assert plugin.late_submission_penalty("s", 18.0, 0) is None
    assert plugin.late_submission_penalty("s", 18.0, 60) == pytest.approx(1.8)  # 1 started day
    assert plugin.late_submission_penalty("s", 18.0, 36 * 3600) == pytest.approx(3.6)  # 2 days
    assert plugin.late_submission_penalty("s", 18.0, 30 * 86400) == pytest.approx(18.0)  # all


def grade_cell(source: str, outputs: list | None = None, **meta: object) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata.nbgrader = {"grade": True, "grade_id": "t", "locked": True, "points": 1,
                              "schema_version": 3, "solution": False, "task": False, **meta}
    cell.outputs = outputs or []
    return cell


def test_feedback_preprocessor_removes_hidden_tests_and_tracebacks() -> None:
    error = nbformat.v4.new_output("error", ename="FeedbackError", evalue="too large by 8",
                                   traceback=["check_close(f(13e9), 26e9 / 1.6e12)", "..."])
    test = grade_cell("check(f(1))\n### BEGIN HIDDEN TESTS\ncheck_close(f(13e9), 26e9)\n"
                      "### END HIDDEN TESTS", [error])
    student = nbformat.v4.new_code_cell("# my notes: ### BEGIN HIDDEN TESTS")
    student.metadata.nbgrader = {"grade": False, "grade_id": "a", "locked": False,
                                 "schema_version": 3, "solution": True, "task": False}
    nb = nbformat.v4.new_notebook()
    nb.cells = [student, test]
    nb, _ = grading.FeedbackWithoutHiddenTests().preprocess(nb, {})
    assert nb.cells[1].source == "check(f(1))"
    assert nb.cells[1].outputs[0].traceback == ["FeedbackError: too large by 8"]
    assert nb.cells[0].source == "# my notes: ### BEGIN HIDDEN TESTS"  # students' own cells
    broken = grade_cell("check(f(1))\n### BEGIN HIDDEN TESTS\nsecret()")
    nb.cells = [broken]
    nb, _ = grading.FeedbackWithoutHiddenTests().preprocess(nb, {})
    assert "secret" not in nb.cells[0].source


def test_duplicated_cells_lose_their_metadata_except_the_last() -> None:
    first, second = grade_cell("part 1"), grade_cell("part 2")
    nb = nbformat.v4.new_notebook()
    nb.cells = [first, second]
    nb, _ = grading.DeduplicateIdsCleanly().preprocess(nb, {})
    assert "nbgrader" not in nb.cells[0].metadata
    assert nb.cells[1].metadata.nbgrader["grade_id"] == "t"


def test_config_makes_grading_survive_real_students() -> None:
    cfg = Course().config()
    assert cfg.IgnorePattern.enabled and re.search(cfg.IgnorePattern.pattern, "UserWarning: x")
    assert cfg.OverwriteCells.add_missing_cells is True
    assert cfg.Execute.timeout == 60 and cfg.LimitOutput.max_lines <= 1000
    assert grading.FeedbackWithoutHiddenTests in cfg.GenerateFeedback.preprocessors
    assert grading.DeduplicateIdsCleanly in cfg.Autograde.sanitize_preprocessors
    assert cfg.CourseDirectory.source_directory.endswith("solutions")
    assert cfg.CourseDirectory.release_directory.endswith("exercises")
    assert Path(cfg.CourseDirectory.db_url.removeprefix("sqlite:///")).parent == ROOT / "grading"


# ---- the whole pipeline on the fixtures (slow) --------------------------------------------------

STUDENTS = [(a, s) for a in POINTS for s in sorted(expected(a))]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Generate, autograde every fixture, generate feedback, export: once for the module."""
    tmp = tmp_path_factory.mktemp("course")
    # 120 s per cell: ps4 measures, and this machine may be busy (the course uses 60 s)
    course = Course(grading=tmp / "grading", release=tmp / "exercises", timeout=120)
    quick = Course(grading=tmp / "grading", release=tmp / "exercises", timeout=TEST_TIMEOUT)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    start = time.perf_counter()
    course.grading.mkdir(parents=True)
    generated = subprocess.run(  # exactly `make assignments`, redirected
        [str(BIN / "nbgrader"), "generate_assignment", "ps*", "--force",
         f"--CourseDirectory.release_directory={course.release}",
         f"--CourseDirectory.db_url={course.db_url}"],
        cwd=ROOT, env=env, capture_output=True, text=True)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    results: dict[tuple[str, str], Result] = {}
    seconds: dict[str, float] = {}
    for assignment in POINTS:
        grading.set_due_date(course, assignment, dt.datetime(2026, 3, 2, 17, 0))
        students = grading.stage(course, assignment, FIXTURES / assignment)
        t0 = time.perf_counter()
        # ps1 has the endless loop: a short timeout keeps the test fast
        timed = quick if assignment == "ps1-arithmetic-intensity" else course
        for r in grading.grade_class(timed, assignment, students, jobs=JOBS):
            results[(assignment, r.student)] = r
        seconds[assignment] = time.perf_counter() - t0
    grades = grading.export_grades(course, list(results.values()))
    validate = {  # after grading, in parallel: the CPU is free again
        a: subprocess.Popen([str(BIN / "nbgrader"), "validate",
                             str(ROOT / "solutions" / a / f"{ASSIGNMENTS[a][0]}.ipynb")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
        for a in POINTS}
    validated = {a: (p.wait(timeout=600), p.stdout.read()) for a, p in validate.items()}
    print(grading.summary(list(results.values())))
    print({a: round(s, 1) for a, s in seconds.items()}, f"total {time.perf_counter() - start:.0f}s")
    return {"course": course, "results": results, "grades": grades, "validated": validated}


def feedback_text(course: Course, assignment: str, student: str) -> str:
    (name,) = ASSIGNMENTS[assignment]
    path = course.feedback(student, assignment) / f"{name}.html"
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


@pytest.mark.grading
def test_generate_assignment_reproduces_the_committed_exercises(graded: dict) -> None:
    course = graded["course"]
    for assignment, names in ASSIGNMENTS.items():
        for name in names:
            fresh = nbformat.read(course.release / assignment / f"{name}.ipynb", 4)
            assert fresh == release_nb(assignment), (
                f"exercises/{assignment}/{name}.ipynb is stale: run `make assignments`")


@pytest.mark.grading
@pytest.mark.parametrize("assignment, student", STUDENTS, ids=[f"{a[:3]}-{s}" for a, s in STUDENTS])
def test_fixture_outcome(graded: dict, assignment: str, student: str) -> None:
    want = expected(assignment)[student]
    got = graded["results"][(assignment, student)]
    assert got.status == want["status"], got.reason
    assert got.max_score == want["max_score"]
    assert got.score == pytest.approx(want["score"])
    assert got.autograde_score == pytest.approx(want["autograde_score"])
    assert got.late_penalty == pytest.approx(want["late_penalty"])
    assert got.flags == want["flags"]
    if want["status"] in ("graded", "flagged"):
        zero = sorted(cell for cell, score in got.cells.items()
                      if score == 0 and cell not in want["manual"])
        assert zero == want["failed"]
        for cell in want["manual"]:
            assert got.cells[cell] is None, f"{cell} should wait for a human grader"
        text = feedback_text(graded["course"], assignment, student)
        for words in want["messages"]:
            assert words in text, f"the feedback does not say {words!r}"
    else:
        assert got.reason, "a submission that was not graded must say why"


@pytest.mark.grading
def test_every_submission_has_a_row_in_the_grades(graded: dict) -> None:
    with graded["grades"].open(newline="") as fh:
        rows = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(fh)}
    for assignment, student in STUDENTS:
        row = rows[(assignment, student)]
        want = expected(assignment)[student]
        assert row["status"] == want["status"]
        assert float(row["score"]) == pytest.approx(want["score"])
        if want["status"] != "graded":
            assert row["reason"]
    # students of one assignment appear, with 0, under the others they did not submit
    assert rows[("ps2-ttft-tpot", "adv-late")]["status"] == "no submission"
    assert float(rows[("ps2-ttft-tpot", "adv-late")]["score"]) == 0


@pytest.mark.grading
def test_feedback_never_shows_hidden_tests_or_autograded_notebooks(graded: dict) -> None:
    course = graded["course"]
    files = [p for p in (course.grading / "feedback").rglob("*") if p.is_file()]
    assert any(p.suffix == ".html" for p in files)
    assert not [p for p in files if p.suffix == ".ipynb"], "autograded notebooks in feedback"
    for assignment in POINTS:
        cells = source_nb(assignment).cells
        answers = {ln.strip() for c in cells
                   for ln in regions(c.source, "BEGIN SOLUTION", "END SOLUTION")}
        hidden = {ln.strip() for c in cells
                  for ln in regions(c.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
                  if len(ln.strip()) >= 16} - answers  # a solution line is the student's
        for student in expected(assignment):
            if not course.feedback(student, assignment).exists():
                continue
            text = feedback_text(course, assignment, student)
            assert "HIDDEN TESTS" not in text
            leaked = [ln for ln in hidden if ln in text]
            assert not leaked, f"{assignment}/{student} feedback shows hidden tests: {leaked}"


@pytest.mark.grading
def test_huge_output_is_cut_in_the_autograded_notebook(graded: dict) -> None:
    course = graded["course"]
    nb = nbformat.read(course.autograded("adv-noisy", "ps1-arithmetic-intensity")
                       / "arithmetic_intensity.ipynb", 4)
    limit = course.config().LimitOutput.max_lines
    for cell in nb.cells:
        lines = sum(o.get("text", "").count("\n") for o in cell.get("outputs", []))
        assert lines <= limit + 1
    feedback = course.feedback("adv-noisy", "ps1-arithmetic-intensity")
    assert (feedback / "arithmetic_intensity.html").stat().st_size < 1_000_000


@pytest.mark.grading
def test_nbgrader_validate_passes_on_every_source_notebook(graded: dict) -> None:
    for assignment, (code, log) in graded["validated"].items():
        assert code == 0 and "Success! Your notebook passes all the tests." in log, (
            f"{assignment}: {log[-3000:]}")

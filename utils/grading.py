"""The grading pipeline: nbgrader, run so that one broken notebook cannot stop a class.

    python -m utils.grading demo                  # what `make grade` runs
    python -m utils.grading grade ps1-arithmetic-intensity [--jobs 2]

Steps for one assignment (each is real nbgrader, configured by nbgrader_config.py):
1. precheck every submission folder: the expected notebook is there, it is a readable notebook,
   and its code does not touch the kernel machinery that could hide failing tests (IPython
   input transformers, showtraceback, sys.excepthook, ...). A missing or malformed notebook gets
   a 0 with its reason; a tampering one is graded but held for review (score 0 in grades.csv).
2. `autograde` ONE student per run, so a notebook that makes nbgrader fail (a kernel that dies,
   corrupted metadata) costs that student a recorded failure, not the class its grades.
3. `generate_feedback` per student: HTML whose test cells have no hidden tests and whose errors
   have no tracebacks (FeedbackWithoutHiddenTests). The autograded .ipynb files contain the
   hidden tests and stay with the instructor.
4. `export`: nbgrader's CSV, then grades.csv with one row per student and assignment, including
   the status, the flags and the reason.

This module holds no answers; it only needs nbgrader (the `course` extra).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import sqlalchemy.exc
from nbgrader import utils as nbutils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.preprocessors import ClearHiddenTests, DeduplicateIds
from traitlets import Float
from traitlets.config import Config, PyFileConfigLoader

__all__ = ["Course", "DeduplicateIdsCleanly", "FeedbackWithoutHiddenTests", "LatePenaltyPerDay",
           "Result", "assignments", "demo", "export_grades", "generate", "grade_class",
           "grade_student", "precheck", "scan_for_tampering", "set_due_date", "stage", "summary"]

ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILE = ROOT / "nbgrader_config.py"

# Code that reaches into the kernel's machinery can hide failing tests from the grader
# (an input transformer that blanks test cells, a silenced traceback). The names are listed as
# they appear in source; a student who needs none of them for these assignments never writes them.
TAMPER_PATTERNS: dict[str, str] = {
    "input transformers": r"input_transformers?\w*|input_splitter|input_transformer_manager",
    "AST transformers": r"ast_transformers",
    "showtraceback": r"showtraceback|showsyntaxerror",
    "sys.excepthook": r"excepthook|set_custom_exc",
    "IPython events": r"\.events\s*\.\s*register|register_magic_function",
    "get_ipython": r"get_ipython|InteractiveShell",  # not IPython.display: that is harmless
    "NBGRADER_EXECUTION": r"NBGRADER_EXECUTION",
}

STATUS_GRADED, STATUS_FLAGGED = "graded", "flagged"
STATUS_MISSING, STATUS_MALFORMED, STATUS_FAILED = "missing", "malformed", "failed"


# ---- nbgrader plugins used by nbgrader_config.py ---------------------------------------------

class FeedbackWithoutHiddenTests(ClearHiddenTests):
    """For feedback: remove the hidden part of every autograder test cell and reduce each of
    their errors to one line (`AssertionError: <message>`).

    A traceback would print the failing hidden line, with its inputs and its formula. The
    message is what the student needs: the checks in utils.feedback name the misconception
    without the expected value. Cells the student writes are left alone, whatever they contain.
    """

    def preprocess_cell(self, cell, resources, cell_index):  # type: ignore[no-untyped-def]
        if not nbutils.is_grade(cell) or nbutils.is_solution(cell):
            return cell, resources
        try:
            self._remove_hidden_test_region(cell)
        except RuntimeError:  # unbalanced markers: hide the whole cell rather than leak it
            cell.source = "# (test code hidden)"
        if cell.cell_type == "code":
            for output in cell.outputs:
                if output.output_type == "error":
                    output.traceback = [f"{output.ename}: {output.evalue}"]
        return cell, resources


class DeduplicateIdsCleanly(DeduplicateIds):
    """nbgrader's DeduplicateIds, fixed: when a student duplicates or splits a cell, the last
    copy keeps the nbgrader metadata and the earlier copies lose it entirely. (The original sets
    it to {}, which OverwriteCells then fails to read, and the whole submission is not graded.)
    """

    def preprocess_cell(self, cell, resources, cell_index):  # type: ignore[no-untyped-def]
        if not (nbutils.is_grade(cell) or nbutils.is_solution(cell) or nbutils.is_locked(cell)):
            return cell, resources
        grade_id = cell.metadata.nbgrader.get("grade_id")
        if grade_id in self.grade_ids:
            self.log.warning("Cell with id '%s' exists multiple times: grading the last one",
                             grade_id)
            del cell.metadata["nbgrader"]
            cell.metadata.pop("editable", None)
            cell.metadata.pop("deletable", None)
        else:
            self.grade_ids.add(grade_id)
        return cell, resources


class LatePenaltyPerDay(LateSubmissionPlugin):
    """Late work loses `percent_per_day` percent of its score per started day, down to zero."""

    percent_per_day = Float(10.0, help="Percent of the score lost per started day late.").tag(
        config=True)

    def late_submission_penalty(self, student_id: str, score: float,
                                total_seconds_late: float) -> float | None:
        if total_seconds_late <= 0:
            return None
        days = math.ceil(total_seconds_late / 86400)
        return score * min(1.0, days * self.percent_per_day / 100)


# ---- the course --------------------------------------------------------------------------------

@dataclass
class Course:
    """Where nbgrader reads and writes. Defaults: the repository's layout (nbgrader_config.py).

    root: the folder holding `solutions/`. grading: submissions, autograded, feedback and the
    gradebook. release: where student versions go. timeout: seconds per cell, if not the
    config's.
    """

    root: Path = ROOT
    grading: Path = ROOT / "grading"
    release: Path | None = None
    timeout: int | None = None

    def __post_init__(self) -> None:
        self.root, self.grading = Path(self.root).resolve(), Path(self.grading).resolve()
        self.release = Path(self.release).resolve() if self.release else self.root / "exercises"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.grading / 'gradebook.db'}"

    def submitted(self, student: str, assignment: str) -> Path:
        return self.grading / "submitted" / student / assignment

    def autograded(self, student: str, assignment: str) -> Path:
        return self.grading / "autograded" / student / assignment

    def feedback(self, student: str, assignment: str) -> Path:
        return self.grading / "feedback" / student / assignment

    def config(self) -> Config:
        """nbgrader_config.py, with the folders pointed at this course."""
        cfg = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
        cd = cfg.CourseDirectory
        cd.root = str(self.root)
        cd.source_directory = str(self.root / "solutions")
        cd.release_directory = str(self.release)
        for step in ("submitted", "autograded", "feedback", "solution", "source_with_tests"):
            setattr(cd, f"{step}_directory", str(self.grading / step))
        cd.db_url = self.db_url
        if self.timeout is not None:
            cfg.Execute.timeout = self.timeout
        self.grading.mkdir(parents=True, exist_ok=True)
        _venv_tools_on_path()
        return cfg


def _venv_tools_on_path() -> None:
    """nbgrader runs `alembic` (installed next to this Python) when it creates a gradebook."""
    tools = str(Path(sys.executable).parent)
    if tools not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = tools + os.pathsep + os.environ.get("PATH", "")


def assignments(root: Path = ROOT) -> dict[str, list[str]]:
    """{assignment id: [notebook names]} from solutions/."""
    found = {}
    for folder in sorted((Path(root) / "solutions").iterdir()):
        notebooks = sorted(p.stem for p in folder.glob("*.ipynb")) if folder.is_dir() else []
        if notebooks:
            found[folder.name] = notebooks
    return found


def _run_converter(converter_cls: type, course: Course, assignment: str,
                   student: str = ".", **config_updates: object) -> dict:
    """Run one nbgrader converter (Autograde, GenerateFeedback, GenerateAssignment) for one
    assignment and one student, the way `nbgrader <command> <assignment> --student=<id>` does,
    in this process. Returns nbgrader's {'success', 'log', 'error'} record."""
    cfg = course.config()
    for key, value in config_updates.items():
        section, name = key.split(".")
        setattr(cfg[section], name, value)
    coursedir = CourseDirectory(config=cfg)
    coursedir.assignment_id = assignment
    coursedir.student_id = student
    converter = converter_cls(coursedir=coursedir, config=cfg)
    converter.force = True
    return nbutils.capture_log(converter)


def generate(course: Course, assignment: str) -> None:
    """`nbgrader generate_assignment`: student version into course.release, source cells into
    the gradebook (needed to restore and check test cells when grading)."""
    from nbgrader.converters import GenerateAssignment

    result = _run_converter(GenerateAssignment, course, assignment)
    if not result["success"]:
        raise RuntimeError(f"generate_assignment {assignment} failed:\n{result.get('log', '')}"
                           f"\n{result.get('error', '')}")


def set_due_date(course: Course, assignment: str, due: dt.datetime) -> None:
    """Record a due date (UTC) in the gradebook; late submissions are then penalised."""
    with Gradebook(course.db_url, course.config().CourseDirectory.course_id) as gb:
        gb.update_or_create_assignment(assignment, duedate=due)


# ---- one submission ------------------------------------------------------------------------

@dataclass
class Result:
    """What happened to one student's submission of one assignment."""

    assignment: str
    student: str
    status: str = STATUS_GRADED
    score: float = 0.0
    max_score: float = 0.0
    autograde_score: float = 0.0
    late_penalty: float = 0.0
    flags: list[str] = field(default_factory=list)
    reason: str = ""
    cells: dict[str, float | None] = field(default_factory=dict)
    seconds: float = 0.0


def scan_for_tampering(nb: nbformat.NotebookNode) -> list[str]:
    """Names of the TAMPER_PATTERNS that the notebook's code cells contain."""
    code = "\n".join(c.get("source", "") for c in nb.get("cells", [])
                     if c.get("cell_type") == "code" and isinstance(c.get("source"), str))
    return [name for name, pattern in TAMPER_PATTERNS.items() if re.search(pattern, code)]


def precheck(course: Course, assignment: str, student: str,
             notebooks: list[str]) -> Result | None:
    """A Result with a final status if the submission cannot be graded (missing or malformed
    notebook); None if it can. Tamper flags are attached by `grade_student`."""
    folder = course.submitted(student, assignment)
    result = Result(assignment, student)
    present = sorted(p.name for p in folder.glob("*.ipynb")) if folder.is_dir() else []
    for name in notebooks:
        path = folder / f"{name}.ipynb"
        if not path.is_file():
            result.status = STATUS_MISSING
            others = f" (found: {', '.join(present)})" if present else ""
            result.reason = f"no {name}.ipynb in the submission{others}"
            return result
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            result.status = STATUS_MALFORMED
            result.reason = f"{name}.ipynb is not a readable notebook: {err}"
            return result
        if not (isinstance(nb, dict) and isinstance(nb.get("cells"), list)
                and nb.get("nbformat") == 4):
            result.status = STATUS_MALFORMED
            result.reason = f"{name}.ipynb is JSON but not an nbformat-4 notebook"
            return result
    return None


def _read_scores(course: Course, result: Result) -> None:
    with Gradebook(course.db_url) as gb:
        try:
            sub = gb.find_submission(result.assignment, result.student)
        except MissingEntry:
            return
        result.max_score = float(sub.max_score)
        result.late_penalty = float(sub.late_submission_penalty or 0.0)
        result.autograde_score = float(sub.score) - result.late_penalty
        for notebook in sub.notebooks:
            for grade in notebook.grades:  # None: a written answer waiting for a human
                result.cells[grade.name] = None if grade.needs_manual_grade else grade.score


def _max_score(course: Course, assignment: str) -> float:
    with Gradebook(course.db_url) as gb:
        return float(gb.find_assignment(assignment).max_score)


def _retry_if_locked(action: Callable[[], object], attempts: int = 4) -> object:
    """Run a gradebook action, again after a pause if SQLite says another job holds the lock."""
    for attempt in range(attempts):
        try:
            return action()
        except sqlalchemy.exc.OperationalError as err:
            if "locked" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    return None


def _converter_with_retries(converter_cls: type, course: Course, assignment: str,
                            student: str, attempts: int = 4) -> dict:
    """`_run_converter`, again when it failed only because the gradebook was locked."""
    for attempt in range(attempts):
        record = _run_converter(converter_cls, course, assignment, student)
        if record["success"] or "database is locked" not in str(record):
            return record
        time.sleep(0.5 * (attempt + 1))
    return record


def _failure_reason(record: dict) -> str:
    """The root cause of a failed nbgrader run, in one line (the exception nbgrader logged)."""
    text = (record.get("log") or "") + "\n" + (record.get("error") or "")
    causes = re.findall(r"^\s*((?:[\w.]+\.)?\w+(?:Error|Exception|Exit)\b:?.*)$", text, re.M)
    causes = [c.strip() for c in causes if "NbGraderException" not in c]
    return causes[0][:300] if causes else "nbgrader failed (see its log)"


def grade_student(course: Course, assignment: str, student: str,
                  notebooks: list[str] | None = None, feedback: bool = True) -> Result:
    """Precheck, autograde and (optionally) generate feedback for one student. Never raises:
    whatever goes wrong becomes the Result's status and reason."""
    start = time.perf_counter()
    try:
        return _grade_student(course, assignment, student, notebooks, feedback, start)
    except Exception as err:  # one submission must never stop the class
        return Result(assignment, student, status=STATUS_FAILED,
                      reason=f"grading error: {type(err).__name__}: {err}"[:300],
                      seconds=time.perf_counter() - start)


def _grade_student(course: Course, assignment: str, student: str, notebooks: list[str] | None,
                   feedback: bool, start: float) -> Result:
    from nbgrader.converters import Autograde, GenerateFeedback

    notebooks = notebooks or assignments(course.root)[assignment]

    def add_student() -> None:  # every student gets a row in the export
        with Gradebook(course.db_url) as gb:
            gb.update_or_create_student(student)

    _retry_if_locked(add_student)
    early = precheck(course, assignment, student, notebooks)
    if early is not None:
        early.max_score = _max_score(course, assignment)
        early.seconds = time.perf_counter() - start
        return early
    result = Result(assignment, student)
    for name in notebooks:
        try:
            nb = nbformat.read(course.submitted(student, assignment) / f"{name}.ipynb",
                               as_version=4)
        except Exception as err:  # JSON, but not a notebook nbformat can read
            result.status, result.max_score = STATUS_MALFORMED, _max_score(course, assignment)
            result.reason = f"{name}.ipynb is not a readable notebook: {err}"[:300]
            result.seconds = time.perf_counter() - start
            return result
        result.flags += [f for f in scan_for_tampering(nb) if f not in result.flags]
    record = _converter_with_retries(Autograde, course, assignment, student)
    _retry_if_locked(lambda: _read_scores(course, result))
    result.max_score = result.max_score or _max_score(course, assignment)
    if not record["success"]:
        result.status = STATUS_FAILED
        result.reason = f"autograde failed: {_failure_reason(record)}"
        result.autograde_score = 0.0
    elif feedback:
        fb = _converter_with_retries(GenerateFeedback, course, assignment, student)
        if not fb["success"]:
            result.reason = f"feedback failed: {_failure_reason(fb)}"
    result.score = result.autograde_score
    if result.flags and result.status == STATUS_GRADED:
        result.status = STATUS_FLAGGED
        result.score = 0.0
        result.reason = (f"held for review: the code touches {', '.join(result.flags)} "
                         f"(autograde score {result.autograde_score:g}/{result.max_score:g})")
    if result.late_penalty and not result.reason:
        result.reason = f"late: penalty {result.late_penalty:g} points"
    waiting = [cell for cell, score in result.cells.items() if score is None]
    if waiting and not result.reason:
        result.reason = f"to grade by hand: {', '.join(waiting)}"
    result.seconds = time.perf_counter() - start
    return result


def _grade_student_job(args: tuple) -> Result:
    return grade_student(*args)


def grade_class(course: Course, assignment: str, students: list[str] | None = None,
                jobs: int = 1, feedback: bool = True) -> list[Result]:
    """Grade every submission folder of `assignment` (or `students`), one nbgrader run per
    student, `jobs` at a time (each in its own process)."""
    notebooks = assignments(course.root)[assignment]
    if students is None:
        base = course.grading / "submitted"
        students = sorted(p.name for p in base.iterdir() if (p / assignment).is_dir()) \
            if base.is_dir() else []
    work = [(course, assignment, s, notebooks, feedback) for s in students]
    if jobs <= 1:
        return [grade_student(*w) for w in work]
    # fork: a worker starts at once (spawn would import nbgrader again, ~3 s of CPU each)
    context = mp.get_context("fork") if sys.platform == "linux" else None
    results = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(_grade_student_job, w) for w in work]
        for w, future in zip(work, futures, strict=True):
            try:
                results.append(future.result())
            except Exception as err:  # the worker process itself died
                results.append(Result(assignment, w[2], status=STATUS_FAILED,
                                      reason=f"grading process failed: {err!r}"[:300]))
    return results


# ---- grades ------------------------------------------------------------------------------------

GRADE_COLUMNS = ["assignment", "student_id", "status", "score", "max_score", "autograde_score",
                 "late_penalty", "flags", "reason", "timestamp"]


def export_grades(course: Course, results: list[Result], path: Path | None = None) -> Path:
    """`nbgrader export` (grading/nbgrader_grades.csv), then grades.csv: every student and
    assignment in the gradebook, with the status, flags and reason of each graded submission."""
    from nbgrader.plugins import CsvExportPlugin

    path = Path(path) if path else course.grading / "grades.csv"
    raw = path.with_name("nbgrader_grades.csv")
    with Gradebook(course.db_url) as gb:
        CsvExportPlugin(to=str(raw)).export(gb)
        submitted = {(a.name, sub.student_id) for a in gb.assignments for sub in a.submissions}
    by_key = {(r.assignment, r.student): r for r in results}
    rows = []
    with raw.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            key = (row["assignment"], row["student_id"])
            rows.append(_grade_row(row, by_key.pop(key, None), key in submitted))
    for r in by_key.values():  # graded here but unknown to the gradebook: never drop a row
        rows.append(_grade_row({"assignment": r.assignment, "student_id": r.student}, r, True))
    rows.sort(key=lambda x: (x["assignment"], x["student_id"]))
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=GRADE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _grade_row(row: dict, r: Result | None, submitted: bool) -> dict:
    if r is None:  # not graded in this run: what the gradebook holds
        score = float(row.get("score") or 0) if submitted else 0.0
        return {"assignment": row["assignment"], "student_id": row["student_id"],
                "status": "graded earlier" if submitted else "no submission", "score": score,
                "max_score": row.get("max_score", ""), "autograde_score": score,
                "late_penalty": float(row.get("late_submission_penalty") or 0), "flags": "",
                "reason": "" if submitted else "nothing submitted",
                "timestamp": row.get("timestamp", "")}
    return {"assignment": r.assignment, "student_id": r.student, "status": r.status,
            "score": round(r.score, 4), "max_score": r.max_score,
            "autograde_score": round(r.autograde_score, 4),
            "late_penalty": round(r.late_penalty, 4), "flags": "; ".join(r.flags),
            "reason": r.reason, "timestamp": row.get("timestamp", "") or ""}


def summary(results: list[Result]) -> str:
    """A table an instructor reads before releasing grades."""
    lines = [f"{'assignment':26s} {'student':28s} {'status':9s} {'score':>11s} {'time':>6s}  "
             "reason"]
    for r in sorted(results, key=lambda r: (r.assignment, r.student)):
        lines.append(f"{r.assignment:26s} {r.student:28s} {r.status:9s} "
                     f"{r.score:5.4g}/{r.max_score:<5.4g} {r.seconds:5.1f}s  {r.reason}")
    review = [r for r in results if r.status != STATUS_GRADED or r.late_penalty]
    lines.append(f"{len(results)} submissions, {len(review)} to look at (not graded, flagged or "
                 "late).")
    return "\n".join(lines)


# ---- staging submissions (tests and the demo) ------------------------------------------------

def stage(course: Course, assignment: str, fixtures: Path,
          students: list[str] | None = None) -> list[str]:
    """Copy fixture submissions `fixtures/<student>/...` into the course's submitted folder,
    as `nbgrader collect` would. Returns the student ids."""
    staged = []
    for folder in sorted(p for p in Path(fixtures).iterdir() if p.is_dir()):
        if students is not None and folder.name not in students:
            continue
        dest = course.submitted(folder.name, assignment)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(folder, dest)
        staged.append(folder.name)
    return staged


DEMO_STUDENTS = {  # a small class per assignment; `--all` grades every fixture
    "ps1-arithmetic-intensity": ["solution", "blank", "wrong-flop-per-mac", "wrong-bits-vs-bytes",
                                 "adv-cell-surgery", "adv-input-transformer",
                                 "adv-malformed-json", "adv-renamed-notebook", "adv-late"],
    "ps2-ttft-tpot": ["solution", "wrong-gb-vs-gib", "wrong-ms-vs-s", "wrong-forgot-kv"],
    "ps3-batching-and-memory": ["solution", "wrong-per-sequence", "wrong-sparse-peak"],
    "ps4-profiling-lab": ["solution", "blank"],
}
DEMO_DUE = dt.datetime(2026, 3, 2, 17, 0)  # UTC; the fixtures' late submission is after it


def demo(course: Course | None = None, all_fixtures: bool = False, jobs: int = 1) -> Path:
    """Grade a sample class built from tests/fixtures/submissions: what `make grade` runs.

    It works in grading/demo/ (submissions, autograded, feedback, gradebook, grades.csv, and a
    release folder of its own), so a real class in grading/ is never touched."""
    course = course or Course(grading=ROOT / "grading" / "demo",
                              release=ROOT / "grading" / "demo" / "release")
    fixtures = course.root / "tests" / "fixtures" / "submissions"
    shutil.rmtree(course.grading, ignore_errors=True)
    results: list[Result] = []
    for assignment in assignments(course.root):
        if not (fixtures / assignment).is_dir():
            continue
        generate(course, assignment)
        set_due_date(course, assignment, DEMO_DUE)
        chosen = None if all_fixtures else DEMO_STUDENTS.get(assignment)
        students = stage(course, assignment, fixtures / assignment, chosen)
        print(f"autograding {assignment}: {len(students)} submissions", flush=True)
        results += grade_class(course, assignment, students, jobs=jobs)
    path = export_grades(course, results)
    print(summary(results))
    print(f"grades: {path}")
    print(f"feedback (HTML, hidden tests removed): {course.grading / 'feedback'}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utils.grading", description=__doc__.split(
        "\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="grade a sample class from the test fixtures (make grade)")
    d.add_argument("--all", action="store_true", help="every fixture, not a sample")
    d.add_argument("--jobs", type=int, default=1)
    g = sub.add_parser("grade", help="grade grading/submitted/*/<assignment>")
    g.add_argument("assignment")
    g.add_argument("--jobs", type=int, default=1, help="students graded in parallel")
    g.add_argument("--timeout", type=int, default=None, help="seconds per cell")
    g.add_argument("--student", action="append", default=None,
                   help="grade only this student (repeatable); default: every submission")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(all_fixtures=args.all, jobs=args.jobs)
        return 0
    course = Course(timeout=args.timeout)
    known = assignments(course.root)
    if args.assignment not in known:
        print(f"unknown assignment {args.assignment!r}: choose one of {', '.join(known)}",
              file=sys.stderr)
        return 2
    results = grade_class(course, args.assignment, args.student, jobs=args.jobs)
    print(summary(results))
    print(f"grades: {export_grades(course, results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

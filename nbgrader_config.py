"""nbgrader configuration of the course, mapped onto the repository's layout.

    solutions/<assignment>/<notebook>.ipynb   instructor versions (nbgrader's "source")
    exercises/<assignment>/<notebook>.ipynb   student versions ("release"): `make assignments`
    grading/                                   ignored by git: submissions, autograded copies,
                                               feedback, gradebook.db, grades.csv

Every nbgrader command run from the repository root reads this file; so does the pipeline
driver, utils/grading.py (`make grade`), which only redirects the folders for tests. The choices
below are the ones a real class needs; chapters/instructors.md explains each.
"""

from pathlib import Path

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    GetGrades,
    OverwriteCells,
    OverwriteKernelspec,
)

from utils.grading import DeduplicateIdsCleanly, FeedbackWithoutHiddenTests

c = get_config()  # noqa: F821 (nbgrader provides it)

ROOT = Path(__file__).resolve().parent
(ROOT / "grading").mkdir(exist_ok=True)  # sqlite creates the database file, not its folder

c.CourseDirectory.course_id = "prefill-decode"
c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
c.CourseDirectory.solution_directory = "grading/solution"
c.CourseDirectory.source_with_tests_directory = "grading/source_with_tests"
c.CourseDirectory.db_url = f"sqlite:///{ROOT / 'grading' / 'gradebook.db'}"

# Student versions: the usual stubs; answers and hidden tests are removed.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding.
c.Execute.timeout = 60  # seconds per cell; an endless loop is cut here, the rest still runs
c.Execute.interrupt_on_timeout = True
c.Execute.shutdown_kernel = "immediate"  # a graded kernel has nothing to save
# A test cell that writes to stderr scores 0 in nbgrader. Our tests fail only by raising, so
# stderr (a harmless warning, a progress bar) must not cost a right answer any points.
c.IgnorePattern.enabled = True  # off by default in nbgrader 0.9
c.IgnorePattern.pattern = r"[\s\S]"
c.LimitOutput.max_lines = 300  # a notebook that prints a million lines stays gradable
c.LimitOutput.max_traceback = 40
c.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back, then run
# A duplicated or split test cell makes nbgrader 0.9.6's sanitizer stop with KeyError 'grade_id'
# (DeduplicateIds leaves an empty metadata dict that OverwriteCells cannot read): keep the last
# copy graded and turn the earlier ones into plain cells.
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIdsCleanly, OverwriteKernelspec,
                                      OverwriteCells, CheckCellMetadata]

# Late work: with a due date in the gradebook, 10% of the score per started day late.
c.AssignLatePenalties.plugin_class = "utils.grading.LatePenaltyPerDay"
c.LatePenaltyPerDay.percent_per_day = 10.0

# Feedback (HTML) shows test cells without their hidden part and errors without tracebacks.
# Autograded .ipynb files contain the hidden tests: never return them to students.
c.GenerateFeedback.preprocessors = [GetGrades, FeedbackWithoutHiddenTests,
                                    CSSHTMLHeaderPreprocessor]

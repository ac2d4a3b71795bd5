"""Build the nbgrader source notebooks of the graded assignments.

    .venv/bin/python solutions/make_notebooks.py          # rewrite solutions/<id>/<name>.ipynb
    .venv/bin/python solutions/make_notebooks.py --check  # exit 1 if a committed one differs

Each notebook is written here cell by cell, with stable cell ids and nbgrader metadata, so the
committed notebooks are reproducible (tests/test_grading.py checks that) and a change to a
question is reviewed as code. Then `make assignments` turns them into the student versions in
exercises/ with `nbgrader generate_assignment`.

Cell kinds: md (instructions), setup (the course's first cell, locked), given (locked code the
students run but do not edit), answer (autograded solution cell: the ### BEGIN/END SOLUTION part
is replaced by a stub), tests (grade cell, locked: visible type/sign checks, then hidden value
checks between ### BEGIN/END HIDDEN TESTS), written (manually graded markdown answer).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utils.notebook_setup import setup_cell  # noqa: E402

SCHEMA = 3


def _nbgrader(cid: str, *, grade: bool = False, solution: bool = False, locked: bool = False,
              points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": cid, "locked": locked, "schema_version": SCHEMA,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def md(cid: str, text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(text.strip("\n"))
    cell.id = cid
    return cell


def setup(cid: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(setup_cell())
    cell.id = cid
    cell.metadata = {"deletable": False, "editable": False, "nbgrader": _nbgrader(cid, locked=True)}
    return cell


def given(cid: str, code: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(code.strip("\n"))
    cell.id = cid
    cell.metadata = {"deletable": False, "editable": False, "nbgrader": _nbgrader(cid, locked=True)}
    return cell


def answer(cid: str, code: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(code.strip("\n"))
    cell.id = cid
    cell.metadata = {"nbgrader": _nbgrader(cid, solution=True)}
    return cell


def tests(cid: str, points: float, code: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(code.strip("\n"))
    cell.id = cid
    cell.metadata = {"deletable": False, "editable": False,
                     "nbgrader": _nbgrader(cid, grade=True, locked=True, points=points)}
    return cell


def written(cid: str, points: float, text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(text.strip("\n"))
    cell.id = cid
    cell.metadata = {"nbgrader": _nbgrader(cid, grade=True, solution=True, points=points)}
    return cell


RULES = """
**Rules.**
- Return plain numbers (`int` or `float`) in the units each question states. Unless a question
  says otherwise, that is SI base units: FLOP, bytes, seconds, FLOP/s, bytes/s. GB means
  $10^9$ bytes and TB/s means $10^{12}$ bytes/s, as on spec sheets.
- Below each answer, a test cell checks types and signs. Hidden tests, run when your work is
  graded, check values on *other* numbers than the ones in the chapters. When a value is off by a
  recognisable factor (8, 2, 1000, GB vs GiB, the batch size, ...), the feedback names the likely
  misconception.
- Write the formulas yourself. Calling `utils.roofline` (or anything else that already computes
  the asked quantity) inside an answer is not allowed, and a hidden test checks for it. You may
  call it in a scratch cell of your own to check your work.
- Keep the function names and arguments as given. Do not edit, delete or move the test cells:
  grading restores them from the original anyway.
- Before you submit: Kernel, then Restart Kernel and Run All Cells, and check that no cell fails.
"""

SPEC_SHEET = '''
# Spec-sheet peaks, from utils.hardware (the chapters use the same table).
from utils.hardware import get_hardware

print(f"{'device':10s} {'bf16 dense':>12s} {'bf16 sparse':>12s} {'fp8 dense':>10s} "
      f"{'bandwidth':>10s} {'memory':>7s}")
for name in ["h100-sxm", "a100-80gb", "l4"]:
    hw = get_hardware(name)
    fp8 = f"{hw.peak_flops('fp8') / 1e12:.1f}" if "fp8" in hw.dense_flops else "-"
    print(f"{name:10s} {hw.peak_flops('bf16') / 1e12:>12.1f} "
          f"{hw.peak_flops('bf16', sparse=True) / 1e12:>12.1f} {fp8:>10s} "
          f"{hw.bandwidth / 1e12:>10.3f} {hw.memory_bytes / 1e9:>7.0f}")
print("units: TFLOP/s (10^12 FLOP/s), TB/s (10^12 bytes/s), GB (10^9 bytes)")
'''

SPEC_SHEET_NOTE = """
The table prints each GPU's dense peak and the *sparse* headline next to it. NVIDIA's headline
tensor-core figures assume 2:4 structured sparsity (half the weights zero in a fixed pattern) and
are twice the dense peak. An ordinary model gets the dense peak at best: use the dense column.
"""


BEFORE_YOU_SUBMIT = """
## Before you submit

Restart the kernel and run all cells. The checks above only test types and signs: a cell that
passes here can still lose points on the hidden tests.
"""


# ---- ps1: arithmetic intensity --------------------------------------------------------------

def ps1() -> list[nbformat.NotebookNode]:
    return [
        md("ps1-title", """
# Problem set 1: arithmetic intensity

In this problem set you count the FLOP and the bytes of the work a model does, divide one by
the other, and compare the result with a GPU's ridge point. That comparison tells you whether an
operation waits on arithmetic (compute-bound) or on memory (memory-bound). It is the reason
prefill is fast per token and decode is not.

You will need chapters 2 (prefill), 3 (decode) and 5 (the roofline).
""" + RULES),
        setup("ps1-setup"),
        md("ps1-spec-intro", """
## The spec sheets

Run the cell below. It prints the numbers you need for the questions about real GPUs.
""" + SPEC_SHEET_NOTE),
        given("ps1-spec-sheet", SPEC_SHEET),
        md("ps1-q1-text", """
## Question 1: FLOP of a matrix product (2 points)

A matrix product $C = A B$ with $A$ of shape $m \\times k$ and $B$ of shape $k \\times n$ computes
$m \\cdot n$ outputs, each a sum of $k$ products. Write `matmul_flops(m, k, n)` that returns the
number of floating-point operations (FLOP) of the product. Count a multiply and an add as one
FLOP each.
"""),
        answer("ps1-q1-answer", '''
def matmul_flops(m: int, k: int, n: int) -> float:
    """FLOP of an (m x k) @ (k x n) matrix product."""
    ### BEGIN SOLUTION
    return 2.0 * m * k * n
    ### END SOLUTION
'''),
        tests("ps1-q1-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(matmul_flops(4, 8, 16), what="matmul_flops(4, 8, 16)", units="FLOP")
### BEGIN HIDDEN TESTS
for m, k, n in [(37, 1024, 96), (1, 5120, 13824)]:
    check_close(matmul_flops(m, k, n), 2.0 * m * k * n, what="matmul_flops (hidden case)",
                units="FLOP", factors=("flop-per-mac", "milli"))
check_no_shortcut(matmul_flops, what="matmul_flops")
### END HIDDEN TESTS
'''),
        md("ps1-q2-text", """
## Question 2: bytes of a matrix product (2 points)

At the least, the product must read $A$ and $B$ from memory once and write $C$ once. Write
`matmul_bytes(m, k, n, bytes_per_element)` that returns those bytes. `bytes_per_element` is 2
for bf16, 4 for fp32, 1 for fp8.
"""),
        answer("ps1-q2-answer", '''
def matmul_bytes(m: int, k: int, n: int, bytes_per_element: float) -> float:
    """Bytes moved by an (m x k) @ (k x n) product: read A and B once, write C once."""
    ### BEGIN SOLUTION
    return bytes_per_element * (m * k + k * n + m * n)
    ### END SOLUTION
'''),
        tests("ps1-q2-tests", 2, '''
from utils.feedback import Misconception, check_close, check_no_shortcut, check_positive

check_positive(matmul_bytes(4, 8, 16, 2), what="matmul_bytes(4, 8, 16, 2)", units="bytes")
### BEGIN HIDDEN TESTS
for m, k, n, b in [(37, 1024, 96, 2), (1, 5120, 13824, 1), (300, 300, 300, 4)]:
    check_close(matmul_bytes(m, k, n, b), b * (m * k + k * n + m * n),
                what="matmul_bytes (hidden case)", units="bytes",
                factors=("bits-vs-bytes", "bytes-per-bf16"),
                alternatives=[(b * (m * k + k * n), "the output C is written to memory too: "
                               "count m*n elements for it."),
                              (m * k + k * n + m * n, "multiply the element count by "
                               "bytes_per_element.")])
check_no_shortcut(matmul_bytes, what="matmul_bytes")
### END HIDDEN TESTS
'''),
        md("ps1-q3-text", """
## Question 3: the ridge point (2 points)

A GPU can do at most $F$ FLOP/s and move at most $W$ bytes/s. Write
`ridge_point(peak_flops_per_s, bandwidth_bytes_per_s)`: the arithmetic intensity, in FLOP/byte,
at which an operation's compute time equals its memory time.
"""),
        answer("ps1-q3-answer", '''
def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Arithmetic intensity (FLOP/byte) where compute time equals memory time."""
    ### BEGIN SOLUTION
    return peak_flops_per_s / bandwidth_bytes_per_s
    ### END SOLUTION
'''),
        tests("ps1-q3-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(ridge_point(100e12, 1e12), what="ridge_point(100e12, 1e12)", units="FLOP/byte")
### BEGIN HIDDEN TESTS
for peak, bandwidth in [(377e12, 1.6e12), (45e12, 0.9e12)]:
    check_close(ridge_point(peak, bandwidth), peak / bandwidth, what="ridge_point (hidden case)",
                units="FLOP/byte", factors=("milli", "bits-vs-bytes"))
check_no_shortcut(ridge_point, what="ridge_point")
### END HIDDEN TESTS
'''),
        md("ps1-q4-text", """
## Question 4: ridge points of real GPUs (2 points)

From the spec sheet printed above, set `RIDGE_A100_BF16` and `RIDGE_L4_BF16` to the bf16 ridge
points of the A100-80GB and the L4, in FLOP/byte. Type the spec-sheet numbers in (you may use
your `ridge_point`).
"""),
        answer("ps1-q4-answer", '''
### BEGIN SOLUTION
RIDGE_A100_BF16 = ridge_point(312e12, 2.039e12)
RIDGE_L4_BF16 = ridge_point(121e12, 300e9)
### END SOLUTION
'''),
        tests("ps1-q4-tests", 2, '''
from utils.feedback import check_close, check_positive

check_positive(RIDGE_A100_BF16, what="RIDGE_A100_BF16", units="FLOP/byte")
check_positive(RIDGE_L4_BF16, what="RIDGE_L4_BF16", units="FLOP/byte")
### BEGIN HIDDEN TESTS
check_close(RIDGE_A100_BF16, 312e12 / 2.039e12, what="RIDGE_A100_BF16", units="FLOP/byte",
            rel=0.01, factors=("sparse-vs-dense", "milli", "bits-vs-bytes"))
check_close(RIDGE_L4_BF16, 121e12 / 300e9, what="RIDGE_L4_BF16", units="FLOP/byte", rel=0.01,
            factors=("sparse-vs-dense", "milli", "bits-vs-bytes"))
### END HIDDEN TESTS
'''),
        md("ps1-q5-text", """
## Question 5: intensity of prefill (2 points)

A prefill runs a model of $N$ parameters over a prompt of $P$ tokens in one pass. Each parameter
takes part in one multiply-add per token, and every weight is read from memory once for the whole
pass. Ignore the KV cache, the attention scores and the activations (they are small here).

Write `prefill_intensity(n_params, prompt_tokens, bytes_per_param)` in FLOP/byte. Does the
answer depend on $N$?
"""),
        answer("ps1-q5-answer", '''
def prefill_intensity(n_params: float, prompt_tokens: int, bytes_per_param: float) -> float:
    """FLOP per byte of a prefill over prompt_tokens tokens (weights read once)."""
    ### BEGIN SOLUTION
    flops = 2.0 * n_params * prompt_tokens
    weight_bytes = n_params * bytes_per_param
    return flops / weight_bytes
    ### END SOLUTION
'''),
        tests("ps1-q5-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(prefill_intensity(1e9, 100, 2), what="prefill_intensity(1e9, 100, 2)",
               units="FLOP/byte")
### BEGIN HIDDEN TESTS
for n, p, b in [(13e9, 1500, 2), (3e9, 700, 1), (70e9, 64, 0.5)]:
    check_close(prefill_intensity(n, p, b), 2.0 * n * p / (n * b),
                what="prefill_intensity (hidden case)", units="FLOP/byte",
                factors=("flop-per-mac", "bytes-per-bf16", "bits-vs-bytes"))
check_no_shortcut(prefill_intensity, what="prefill_intensity")
### END HIDDEN TESTS
'''),
        md("ps1-q6-text", """
## Question 6: intensity of decode at batch B (2 points)

A decode step produces one new token for each of $B$ sequences. All $B$ tokens share one read of
the weights. Ignore the KV cache again.

Write `decode_intensity(n_params, batch, bytes_per_param)` in FLOP/byte.
"""),
        answer("ps1-q6-answer", '''
def decode_intensity(n_params: float, batch: int, bytes_per_param: float) -> float:
    """FLOP per byte of one decode step for `batch` sequences (weights read once per step)."""
    ### BEGIN SOLUTION
    return 2.0 * n_params * batch / (n_params * bytes_per_param)
    ### END SOLUTION
'''),
        tests("ps1-q6-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(decode_intensity(1e9, 1, 2), what="decode_intensity(1e9, 1, 2)", units="FLOP/byte")
### BEGIN HIDDEN TESTS
for n, batch, b in [(13e9, 24, 2), (3e9, 7, 1)]:
    check_close(decode_intensity(n, batch, b), 2.0 * batch / b,
                what="decode_intensity (hidden case)", units="FLOP/byte", batch=batch,
                factors=("flop-per-mac", "bytes-per-bf16", "bits-vs-bytes"))
check_no_shortcut(decode_intensity, what="decode_intensity")
### END HIDDEN TESTS
'''),
        md("ps1-q7-text", """
## Question 7: compute-bound or memory-bound? (2 points)

Write `is_compute_bound(flops, bytes_moved, peak_flops_per_s, bandwidth_bytes_per_s)`: `True`
when the operation's time is set by arithmetic, `False` when it is set by memory traffic. Call
an operation exactly on the ridge compute-bound.
"""),
        answer("ps1-q7-answer", '''
def is_compute_bound(flops: float, bytes_moved: float, peak_flops_per_s: float,
                     bandwidth_bytes_per_s: float) -> bool:
    """True if compute time >= memory time for this operation."""
    ### BEGIN SOLUTION
    return flops / peak_flops_per_s >= bytes_moved / bandwidth_bytes_per_s
    ### END SOLUTION
'''),
        tests("ps1-q7-tests", 2, '''
from utils.feedback import check_bool, check_bool_equals, check_no_shortcut

check_bool(is_compute_bound(1e12, 1e9, 100e12, 1e12), what="is_compute_bound(1e12, 1e9, 100e12, 1e12)")
### BEGIN HIDDEN TESTS
hint = ("An operation is memory-bound when its intensity (FLOP/byte) is below the ridge point: "
        "too few FLOP per byte to keep the arithmetic units busy while data arrives.")
for flops, nbytes, peak, bandwidth in [(2 * 13e9 * 4, 26e9, 377e12, 1.6e12),
                                       (2 * 13e9 * 3000, 26e9, 377e12, 1.6e12),
                                       (1e9, 1e9, 45e12, 0.9e12), (5e14, 1e10, 45e12, 0.9e12)]:
    expected = flops / peak >= nbytes / bandwidth
    check_bool_equals(is_compute_bound(flops, nbytes, peak, bandwidth), expected,
                      what="is_compute_bound (hidden case)", hint=hint)
check_no_shortcut(is_compute_bound, what="is_compute_bound")
### END HIDDEN TESTS
'''),
        md("ps1-q8-text", """
## Question 8: when does prefill turn compute-bound? (2 points)

Using your answers to questions 3 and 5, write
`min_prompt_tokens_compute_bound(peak_flops_per_s, bandwidth_bytes_per_s, bytes_per_param)`: the
smallest whole number of prompt tokens whose prefill is compute-bound (intensity at or above the
ridge). Return an `int`.
"""),
        answer("ps1-q8-answer", '''
import math


def min_prompt_tokens_compute_bound(peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                                    bytes_per_param: float) -> int:
    """Smallest prompt length (tokens) whose prefill intensity reaches the ridge point."""
    ### BEGIN SOLUTION
    ridge = ridge_point(peak_flops_per_s, bandwidth_bytes_per_s)
    # prefill intensity 2 * P / bytes_per_param >= ridge
    return math.ceil(ridge * bytes_per_param / 2)
    ### END SOLUTION
'''),
        tests("ps1-q8-tests", 2, '''
from utils.feedback import check_close, check_integer, check_no_shortcut

check_integer(min_prompt_tokens_compute_bound(100e12, 1e12, 2),
              what="min_prompt_tokens_compute_bound(100e12, 1e12, 2)", minimum=1)
### BEGIN HIDDEN TESTS
import math as _math

for peak, bandwidth, b in [(377e12, 1.6e12, 2), (45e12, 0.8e12, 1), (150e12, 0.7e12, 0.5)]:
    exact = peak / bandwidth * b / 2
    got = min_prompt_tokens_compute_bound(peak, bandwidth, b)
    check_integer(got, what="min_prompt_tokens_compute_bound (hidden case)", minimum=1)
    check_close(got, _math.ceil(exact), what="min_prompt_tokens_compute_bound (hidden case)",
                units="tokens", rel=0,
                factors=("flop-per-mac", "bytes-per-bf16", "milli"),
                alternatives=[(_math.floor(exact), "rounded down: with fewer tokens than the "
                               "exact crossover the prefill is still memory-bound. Round up "
                               "(math.ceil).")])
check_no_shortcut(min_prompt_tokens_compute_bound, what="min_prompt_tokens_compute_bound")
### END HIDDEN TESTS
'''),
        md("ps1-q9-text", """
## Question 9: the precision's effect (2 points)

Quantising weights changes the bytes, not the FLOP: the math still happens in 16 bits.

- Set `INTENSITY_GAIN_INT4` to the factor by which decode's intensity (batch 1) grows when the
  weights go from bf16 (2 bytes) to int4 (half a byte per parameter).
- fp8 both halves the bytes per weight and doubles the peak. Set `MIN_PROMPT_TOKENS_L4_FP8` to
  the smallest compute-bound prompt on the L4 with fp8 weights and fp8 math, and compare it with
  the bf16 answer (`min_prompt_tokens_compute_bound(121e12, 300e9, 2)`).
"""),
        answer("ps1-q9-answer", '''
### BEGIN SOLUTION
INTENSITY_GAIN_INT4 = decode_intensity(1e9, 1, 0.5) / decode_intensity(1e9, 1, 2)
MIN_PROMPT_TOKENS_L4_FP8 = min_prompt_tokens_compute_bound(242.5e12, 300e9, 1)
### END SOLUTION
print("bf16:", min_prompt_tokens_compute_bound(121e12, 300e9, 2), "tokens;",
      "fp8:", MIN_PROMPT_TOKENS_L4_FP8, "tokens")
'''),
        tests("ps1-q9-tests", 2, '''
from utils.feedback import check_close, check_integer, check_positive

check_positive(INTENSITY_GAIN_INT4, what="INTENSITY_GAIN_INT4")
check_integer(MIN_PROMPT_TOKENS_L4_FP8, what="MIN_PROMPT_TOKENS_L4_FP8", minimum=1)
### BEGIN HIDDEN TESTS
check_close(INTENSITY_GAIN_INT4, 4.0, what="INTENSITY_GAIN_INT4", rel=1e-6,
            alternatives=[(0.25, "inverted: fewer bytes per weight means MORE FLOP per byte.")])
check_close(MIN_PROMPT_TOKENS_L4_FP8, 405, what="MIN_PROMPT_TOKENS_L4_FP8", units="tokens",
            rel=0.003, factors=("sparse-vs-dense", "bytes-per-bf16", "milli"))
### END HIDDEN TESTS
'''),
        md("ps1-end", BEFORE_YOU_SUBMIT),
    ]


# ---- ps2: TTFT and TPOT ---------------------------------------------------------------------

MODEL_SHAPES = """
# Model shapes, from utils.models (the published config.json of each model).
from utils.models import get_model

for name in ["mistral-7b", "llama-2-7b", "smollm2-135m"]:
    m = get_model(name)
    print(f"{name}: n_layers={m.n_layers} d_model={m.d_model} n_heads={m.n_heads} "
          f"n_kv_heads={m.n_kv_heads} head_dim={m.head_dim} d_ff={m.d_ff} "
          f"vocab_size={m.vocab_size} tied_embeddings={m.tied_embeddings}")
"""

def ps2() -> list[nbformat.NotebookNode]:
    return [
        md("ps2-title", """
# Problem set 2: TTFT and TPOT from first principles

A request waits for its first token while the prompt is prefilled (time to first token, TTFT),
then receives one token per decode step (time per output token, TPOT). In this problem set you
compute lower bounds on both from a model's shapes and a GPU's spec sheet, the way an engineer
sizes a deployment before running anything.

You will need chapters 2 (prefill), 3 (decode) and 4 (the KV cache).
""" + RULES),
        setup("ps2-setup"),
        md("ps2-spec-intro", """
## The spec sheets and the models

Run the two cells below: they print the GPU figures and the model shapes the questions use.
""" + SPEC_SHEET_NOTE),
        given("ps2-spec-sheet", SPEC_SHEET),
        given("ps2-model-shapes", MODEL_SHAPES),
        md("ps2-q1-text", """
## Question 1: parameters from shapes (2 points)

A Llama-style decoder layer holds:
- attention: a query projection ($d_{model} \\times n_{heads} d_{head}$), an output projection of
  the same size, and key and value projections ($d_{model} \\times n_{kv} d_{head}$ each: with
  grouped-query attention there are fewer key/value heads than query heads);
- a SwiGLU MLP: three matrices of $d_{model} \\times d_{ff}$ (gate, up, down);
- two norm weight vectors of $d_{model}$.

Around the layers sit the token embedding table ($vocab \\times d_{model}$), a final norm
($d_{model}$), and an output projection of the same size as the embedding table, unless it is
*tied* (shared with the embedding table). Write `count_params(...)`. The norms are tiny: the
hidden test accepts the count with or without them.
"""),
        answer("ps2-q1-answer", '''
def count_params(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 d_ff: int, vocab_size: int, tied_embeddings: bool) -> int:
    """Number of parameters of a Llama-style decoder."""
    ### BEGIN SOLUTION
    attention = 2 * d_model * n_heads * head_dim + 2 * d_model * n_kv_heads * head_dim
    mlp = 3 * d_model * d_ff
    per_layer = attention + mlp + 2 * d_model
    embeddings = vocab_size * d_model
    output = 0 if tied_embeddings else vocab_size * d_model
    return embeddings + n_layers * per_layer + d_model + output
    ### END SOLUTION
'''),
        tests("ps2-q1-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(count_params(2, 64, 4, 2, 16, 128, 1000, True), what="count_params(...)",
               units="parameters")
### BEGIN HIDDEN TESTS
for L, d, h, kv, hd, ff, vocab, tied in [(28, 3072, 24, 8, 128, 8192, 100_000, False),
                                         (22, 2048, 32, 4, 64, 5632, 32_000, True)]:
    attention = 2 * d * h * hd + 2 * d * kv * hd
    layer = attention + 3 * d * ff
    embed = vocab * d
    expected = embed * (1 if tied else 2) + L * layer
    check_close(count_params(L, d, h, kv, hd, ff, vocab, tied), expected,
                what="count_params (hidden case)", units="parameters", rel=1e-3,
                factors=("milli",),
                alternatives=[
                    (expected - (0 if tied else embed), "an untied model stores a second "
                     "vocab x d_model matrix for the output projection (lm_head)."),
                    (expected + (embed if tied else 0), "tied embeddings share one matrix "
                     "between the input embedding and the output projection: count it once."),
                    (expected + L * 2 * d * (h - kv) * hd, "with grouped-query attention the "
                     "key and value projections have n_kv_heads heads, not n_heads."),
                    (expected - L * d * ff, "a SwiGLU MLP has three matrices: gate, up, down.")])
check_no_shortcut(count_params, what="count_params")
### END HIDDEN TESTS
'''),
        md("ps2-q2-text", """
## Question 2: weights in GB (2 points)

Write `weight_gb(n_params, bytes_per_param)`: the size of the weights in GB ($10^9$ bytes, the
unit of spec sheets and model cards).
"""),
        answer("ps2-q2-answer", '''
def weight_gb(n_params: float, bytes_per_param: float) -> float:
    """Size of the weights in GB (10^9 bytes)."""
    ### BEGIN SOLUTION
    return n_params * bytes_per_param / 1e9
    ### END SOLUTION
'''),
        tests("ps2-q2-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(weight_gb(1e9, 2), what="weight_gb(1e9, 2)", units="GB")
### BEGIN HIDDEN TESTS
for n, b in [(13e9, 2), (46.7e9, 0.5), (3.8e9, 4)]:
    check_close(weight_gb(n, b), n * b / 1e9, what="weight_gb (hidden case)", units="GB",
                factors=("gb-vs-gib", "bits-vs-bytes", "milli", "bytes-per-bf16"))
check_no_shortcut(weight_gb, what="weight_gb")
### END HIDDEN TESTS
'''),
        md("ps2-q3-text", """
## Question 3: the decode step's lower bound (2 points)

At batch 1 and a short context, one decode step must at least read every weight once from
memory. Write `decode_step_seconds(n_params, bytes_per_param, bandwidth_bytes_per_s)`, in
seconds.
"""),
        answer("ps2-q3-answer", '''
def decode_step_seconds(n_params: float, bytes_per_param: float,
                        bandwidth_bytes_per_s: float) -> float:
    """Lower bound on one batch-1 decode step (s): read every weight once."""
    ### BEGIN SOLUTION
    return n_params * bytes_per_param / bandwidth_bytes_per_s
    ### END SOLUTION
'''),
        tests("ps2-q3-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(decode_step_seconds(1e9, 2, 1e12), what="decode_step_seconds(1e9, 2, 1e12)",
               units="s")
### BEGIN HIDDEN TESTS
for n, b, bandwidth in [(13e9, 2, 1.6e12), (3e9, 1, 0.9e12)]:
    check_close(decode_step_seconds(n, b, bandwidth), n * b / bandwidth,
                what="decode_step_seconds (hidden case)", units="s",
                factors=("milli", "bits-vs-bytes", "bytes-per-bf16", "gb-vs-gib"))
check_no_shortcut(decode_step_seconds, what="decode_step_seconds")
### END HIDDEN TESTS
'''),
        md("ps2-q4-text", """
## Question 4: the tokens/s ceiling (2 points)

Write `tokens_per_second_ceiling(n_params, bytes_per_param, bandwidth_bytes_per_s)`: the most
tokens per second one sequence can get from decode at batch 1.
"""),
        answer("ps2-q4-answer", '''
def tokens_per_second_ceiling(n_params: float, bytes_per_param: float,
                              bandwidth_bytes_per_s: float) -> float:
    """Upper bound on decode tokens/s for one sequence at batch 1."""
    ### BEGIN SOLUTION
    return 1.0 / decode_step_seconds(n_params, bytes_per_param, bandwidth_bytes_per_s)
    ### END SOLUTION
'''),
        tests("ps2-q4-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(tokens_per_second_ceiling(1e9, 2, 1e12),
               what="tokens_per_second_ceiling(1e9, 2, 1e12)", units="tokens/s")
### BEGIN HIDDEN TESTS
for n, b, bandwidth in [(13e9, 2, 1.6e12), (3e9, 1, 0.9e12)]:
    check_close(tokens_per_second_ceiling(n, b, bandwidth), bandwidth / (n * b),
                what="tokens_per_second_ceiling (hidden case)", units="tokens/s",
                factors=("bits-vs-bytes", "milli", "bytes-per-bf16", "gb-vs-gib"))
check_no_shortcut(tokens_per_second_ceiling, what="tokens_per_second_ceiling")
### END HIDDEN TESTS
'''),
        md("ps2-q5-text", """
## Question 5: the prefill's lower bound, TTFT (2 points)

A prefill of $P$ tokens does about $2NP$ FLOP and reads the weights once. Its time is at least
the larger of its compute time and its memory time (the roofline). Write
`prefill_seconds(n_params, prompt_tokens, bytes_per_param, peak_flops_per_s,
bandwidth_bytes_per_s)`, in seconds. Ignore the attention scores and the KV cache writes.
"""),
        answer("ps2-q5-answer", '''
def prefill_seconds(n_params: float, prompt_tokens: int, bytes_per_param: float,
                    peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Lower bound on a prefill of prompt_tokens tokens (s): max(compute, memory)."""
    ### BEGIN SOLUTION
    compute = 2.0 * n_params * prompt_tokens / peak_flops_per_s
    memory = n_params * bytes_per_param / bandwidth_bytes_per_s
    return max(compute, memory)
    ### END SOLUTION
'''),
        tests("ps2-q5-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(prefill_seconds(1e9, 100, 2, 100e12, 1e12), what="prefill_seconds(...)", units="s")
### BEGIN HIDDEN TESTS
for n, p, b, peak, bandwidth in [(13e9, 1500, 2, 377e12, 1.6e12), (3e9, 5000, 1, 45e12, 0.9e12),
                                 (13e9, 6, 2, 377e12, 1.6e12)]:
    compute = 2.0 * n * p / peak
    memory = n * b / bandwidth
    check_close(prefill_seconds(n, p, b, peak, bandwidth), max(compute, memory),
                what="prefill_seconds (hidden case)", units="s",
                factors=("flop-per-mac", "milli"),
                alternatives=[(compute, "a short prompt is memory-bound: the prefill cannot "
                               "take less time than one read of the weights. Take the max of "
                               "the compute time and the memory time."),
                              (compute + memory, "the roofline bound is the max of the two "
                               "times, not their sum: compute and memory traffic overlap.")])
check_no_shortcut(prefill_seconds, what="prefill_seconds")
### END HIDDEN TESTS
'''),
        md("ps2-q6-text", """
## Question 6: a prefill in decode steps (2 points)

Write `prefill_in_decode_steps(n_params, prompt_tokens, bytes_per_param, peak_flops_per_s,
bandwidth_bytes_per_s)`: how many batch-1 decode steps take as long as one prefill of
`prompt_tokens` tokens.
"""),
        answer("ps2-q6-answer", '''
def prefill_in_decode_steps(n_params: float, prompt_tokens: int, bytes_per_param: float,
                            peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Prefill time divided by one batch-1 decode step time."""
    ### BEGIN SOLUTION
    prefill = prefill_seconds(n_params, prompt_tokens, bytes_per_param, peak_flops_per_s,
                              bandwidth_bytes_per_s)
    return prefill / decode_step_seconds(n_params, bytes_per_param, bandwidth_bytes_per_s)
    ### END SOLUTION
'''),
        tests("ps2-q6-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(prefill_in_decode_steps(1e9, 1000, 2, 100e12, 1e12),
               what="prefill_in_decode_steps(...)", units="steps")
### BEGIN HIDDEN TESTS
for n, p, b, peak, bandwidth in [(13e9, 1500, 2, 377e12, 1.6e12), (3e9, 5000, 1, 45e12, 0.9e12)]:
    prefill = max(2.0 * n * p / peak, n * b / bandwidth)
    check_close(prefill_in_decode_steps(n, p, b, peak, bandwidth), prefill / (n * b / bandwidth),
                what="prefill_in_decode_steps (hidden case)", units="steps",
                factors=("flop-per-mac", "milli", "bytes-per-bf16", "bits-vs-bytes"))
check_no_shortcut(prefill_in_decode_steps, what="prefill_in_decode_steps")
### END HIDDEN TESTS
'''),
        md("ps2-q7-text", """
## Question 7: a real TTFT (2 points)

Set `TTFT_MISTRAL_7B_A100_S` to the TTFT lower bound, in seconds, of a 3,000-token prompt for
Mistral-7B in bf16 on one A100-80GB. Use the spec sheet and the shapes printed above (your
`count_params` gives $N$).
"""),
        answer("ps2-q7-answer", '''
### BEGIN SOLUTION
N_MISTRAL = count_params(32, 4096, 32, 8, 128, 14336, 32000, False)
TTFT_MISTRAL_7B_A100_S = prefill_seconds(N_MISTRAL, 3000, 2, 312e12, 2.039e12)
### END SOLUTION
print(f"TTFT lower bound: {TTFT_MISTRAL_7B_A100_S * 1e3:.0f} ms")
'''),
        tests("ps2-q7-tests", 2, '''
from utils.feedback import check_close, check_positive

check_positive(TTFT_MISTRAL_7B_A100_S, what="TTFT_MISTRAL_7B_A100_S", units="s")
### BEGIN HIDDEN TESTS
_n = 7_241_732_096
check_close(TTFT_MISTRAL_7B_A100_S, 2.0 * _n * 3000 / 312e12, what="TTFT_MISTRAL_7B_A100_S",
            units="s", rel=0.01,
            factors=("sparse-vs-dense", "flop-per-mac", "milli", "gb-vs-gib"),
            alternatives=[(_n * 2 / 2.039e12, "a 3,000-token prompt is compute-bound on an "
                           "A100: its time is set by the FLOP, not by the weight read.")])
### END HIDDEN TESTS
'''),
        md("ps2-q8-text", """
## Question 8: KV cache bytes per token (2 points)

For every token in the context, each layer keeps a key vector and a value vector for each
*key/value* head. Write `kv_cache_bytes_per_token(n_layers, n_heads, n_kv_heads, head_dim,
bytes_per_element)`. With multi-head attention (MHA) `n_kv_heads == n_heads`; with grouped-query
attention (GQA) several query heads share one key/value head.
"""),
        answer("ps2-q8-answer", '''
def kv_cache_bytes_per_token(n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int,
                             bytes_per_element: float) -> float:
    """KV cache bytes stored per token of context, all layers."""
    ### BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * head_dim * bytes_per_element
    ### END SOLUTION
'''),
        tests("ps2-q8-tests", 2, '''
from utils.feedback import Misconception, check_close, check_no_shortcut, check_positive

check_positive(kv_cache_bytes_per_token(2, 4, 2, 16, 2), what="kv_cache_bytes_per_token(...)",
               units="bytes/token")
### BEGIN HIDDEN TESTS
k_and_v = Misconception("k-and-v", 2, "each layer caches two vectors per head and token: a key "
                        "AND a value.")
for L, h, kv, hd, b in [(40, 40, 8, 128, 2), (26, 16, 16, 96, 1), (60, 48, 4, 160, 2)]:
    expected = 2 * L * kv * hd * b
    check_close(kv_cache_bytes_per_token(L, h, kv, hd, b), expected,
                what="kv_cache_bytes_per_token (hidden case)", units="bytes/token",
                factors=(k_and_v, "bits-vs-bytes", "bytes-per-bf16"),
                alternatives=[(2 * L * h * hd * b, "MHA vs GQA: only the key/value heads are "
                               "cached; use n_kv_heads, not n_heads.")])
check_no_shortcut(kv_cache_bytes_per_token, what="kv_cache_bytes_per_token")
### END HIDDEN TESTS
'''),
        md("ps2-q9-text", """
## Question 9: TPOT at a long context (2 points)

At a long context, each decode step reads the weights *and* the whole KV cache of the sequence.
Write `tpot_seconds(n_params, bytes_per_param, kv_bytes_per_token, context_tokens,
bandwidth_bytes_per_s)`: the batch-1 decode step's lower bound, in seconds.
"""),
        answer("ps2-q9-answer", '''
def tpot_seconds(n_params: float, bytes_per_param: float, kv_bytes_per_token: float,
                 context_tokens: int, bandwidth_bytes_per_s: float) -> float:
    """Lower bound on one batch-1 decode step (s) at `context_tokens` tokens of context."""
    ### BEGIN SOLUTION
    nbytes = n_params * bytes_per_param + context_tokens * kv_bytes_per_token
    return nbytes / bandwidth_bytes_per_s
    ### END SOLUTION
'''),
        tests("ps2-q9-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(tpot_seconds(1e9, 2, 1e5, 1000, 1e12), what="tpot_seconds(...)", units="s")
### BEGIN HIDDEN TESTS
for n, b, kv, ctx, bandwidth in [(13e9, 2, 163840, 50_000, 1.6e12),
                                 (3e9, 1, 57344, 120_000, 0.9e12)]:
    weights = n * b / bandwidth
    check_close(tpot_seconds(n, b, kv, ctx, bandwidth), (n * b + ctx * kv) / bandwidth,
                what="tpot_seconds (hidden case)", units="s",
                factors=("milli", "bits-vs-bytes"),
                alternatives=[(weights, "the KV cache term is missing: at a long context "
                               "every step also reads the cached keys and values of all "
                               "context tokens.")])
check_no_shortcut(tpot_seconds, what="tpot_seconds")
### END HIDDEN TESTS
'''),
        md("ps2-q10-text", """
## Question 10: a real TPOT, in milliseconds (2 points)

Set `TPOT_MISTRAL_7B_A100_32K_MS` to the TPOT lower bound of Mistral-7B in bf16 on an A100-80GB
at a context of 32,768 tokens, **in milliseconds**. How much of it is the KV cache?
"""),
        answer("ps2-q10-answer", '''
### BEGIN SOLUTION
KV_MISTRAL = kv_cache_bytes_per_token(32, 32, 8, 128, 2)
TPOT_MISTRAL_7B_A100_32K_MS = tpot_seconds(N_MISTRAL, 2, KV_MISTRAL, 32768, 2.039e12) * 1e3
### END SOLUTION
print(f"TPOT lower bound at 32k context: {TPOT_MISTRAL_7B_A100_32K_MS:.2f} ms")
'''),
        tests("ps2-q10-tests", 2, '''
from utils.feedback import check_close, check_positive

check_positive(TPOT_MISTRAL_7B_A100_32K_MS, what="TPOT_MISTRAL_7B_A100_32K_MS", units="ms")
### BEGIN HIDDEN TESTS
_w, _kv = 7_241_732_096 * 2, 2 * 32 * 8 * 128 * 2
check_close(TPOT_MISTRAL_7B_A100_32K_MS, (_w + 32768 * _kv) / 2.039e12 * 1e3,
            what="TPOT_MISTRAL_7B_A100_32K_MS", units="ms", rel=0.01,
            factors=("milli", "bits-vs-bytes", "gb-vs-gib"),
            alternatives=[(_w / 2.039e12 * 1e3, "the KV cache read is missing."),
                          ((_w + 32768 * 2 * 32 * 32 * 128 * 2) / 2.039e12 * 1e3,
                           "MHA vs GQA: Mistral-7B caches 8 key/value heads, not 32.")])
### END HIDDEN TESTS
'''),
        md("ps2-end", BEFORE_YOU_SUBMIT),
    ]


# ---- ps3: batching and memory ---------------------------------------------------------------

def ps3() -> list[nbformat.NotebookNode]:
    return [
        md("ps3-title", """
# Problem set 3: batching and memory

Decode is memory-bound at batch 1: most of the arithmetic units wait while the weights stream
in. Serving many sequences at once shares each weight read among them. In this problem set you
find how far batching helps (the critical batch size), what stops it (KV cache memory, TPOT
targets), and what a million tokens then costs.

You will need chapters 4 (the KV cache), 5 (the roofline) and 6 (batching).
""" + RULES),
        setup("ps3-setup"),
        md("ps3-spec-intro", """
## The spec sheets and the models

Run the two cells below: they print the GPU figures and the model shapes the questions use.
""" + SPEC_SHEET_NOTE),
        given("ps3-spec-sheet", SPEC_SHEET),
        given("ps3-model-shapes", MODEL_SHAPES),
        md("ps3-q1-text", """
## Question 1: one decode step at batch B (2 points)

A decode step for $B$ sequences, each with `context_tokens` tokens of context, reads the weights
once for all of them, reads each sequence's own KV cache, and does $2N$ FLOP per sequence.
Ignore the attention FLOP and the new tokens' KV writes. Write
`decode_step_seconds(n_params, bytes_per_param, batch, context_tokens, kv_bytes_per_token,
peak_flops_per_s, bandwidth_bytes_per_s)`: the roofline lower bound in seconds (the larger of
the compute time and the memory time). It is the TPOT every sequence in the batch sees.
"""),
        answer("ps3-q1-answer", '''
def decode_step_seconds(n_params: float, bytes_per_param: float, batch: int, context_tokens: int,
                        kv_bytes_per_token: float, peak_flops_per_s: float,
                        bandwidth_bytes_per_s: float) -> float:
    """Lower bound on one decode step (s) for `batch` sequences of `context_tokens` tokens."""
    ### BEGIN SOLUTION
    compute = 2.0 * n_params * batch / peak_flops_per_s
    nbytes = n_params * bytes_per_param + batch * context_tokens * kv_bytes_per_token
    return max(compute, nbytes / bandwidth_bytes_per_s)
    ### END SOLUTION
'''),
        tests("ps3-q1-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(decode_step_seconds(1e9, 2, 4, 1000, 1e5, 100e12, 1e12),
               what="decode_step_seconds(...)", units="s")
### BEGIN HIDDEN TESTS
for n, b, batch, ctx, kv, peak, bandwidth in [(13e9, 2, 24, 4096, 163840, 377e12, 1.6e12),
                                              (3e9, 1, 48, 20_000, 57344, 45e12, 0.9e12),
                                              (3e9, 2, 900, 16, 57344, 45e12, 0.9e12)]:
    compute = 2.0 * n * batch / peak
    weights = n * b
    kv_all = batch * ctx * kv
    check_close(decode_step_seconds(n, b, batch, ctx, kv, peak, bandwidth),
                max(compute, (weights + kv_all) / bandwidth),
                what="decode_step_seconds (hidden case)", units="s",
                factors=("milli", "bits-vs-bytes", "flop-per-mac"),
                alternatives=[
                    (max(compute, (weights + ctx * kv) / bandwidth), "each of the B sequences "
                     "has its own KV cache: the step reads batch * context_tokens * "
                     "kv_bytes_per_token bytes of cache, not one sequence's worth."),
                    (max(compute, weights / bandwidth), "the KV cache term is missing: every "
                     "step reads the cached keys and values of every sequence."),
                    ((weights + kv_all) / bandwidth, "a large batch can turn the step "
                     "compute-bound: take the max of the compute time and the memory time.")])
check_no_shortcut(decode_step_seconds, what="decode_step_seconds")
### END HIDDEN TESTS
'''),
        md("ps3-q2-text", """
## Question 2: throughput against batch size (2 points)

Write `throughput_tokens_per_s(...)`, with the same arguments: the tokens per second the whole
batch produces. The cell after it prints how TPOT and throughput change with the batch size.
"""),
        answer("ps3-q2-answer", '''
def throughput_tokens_per_s(n_params: float, bytes_per_param: float, batch: int,
                            context_tokens: int, kv_bytes_per_token: float,
                            peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Tokens per second produced by the whole batch."""
    ### BEGIN SOLUTION
    step = decode_step_seconds(n_params, bytes_per_param, batch, context_tokens,
                               kv_bytes_per_token, peak_flops_per_s, bandwidth_bytes_per_s)
    return batch / step
    ### END SOLUTION
'''),
        given("ps3-q2-table", '''
# Mistral-7B in bf16 on an A100-80GB at 2,000 tokens of context (runs once your answers do).
for batch in [1, 8, 32, 64, 128, 256]:
    args = (7.24e9, 2, batch, 2000, 131072, 312e12, 2.039e12)
    print(f"batch {batch:4d}: TPOT {decode_step_seconds(*args) * 1e3:6.2f} ms, "
          f"throughput {throughput_tokens_per_s(*args):8.0f} tokens/s")
'''),
        tests("ps3-q2-tests", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(throughput_tokens_per_s(1e9, 2, 4, 1000, 1e5, 100e12, 1e12),
               what="throughput_tokens_per_s(...)", units="tokens/s")
### BEGIN HIDDEN TESTS
for n, b, batch, ctx, kv, peak, bandwidth in [(13e9, 2, 24, 4096, 163840, 377e12, 1.6e12),
                                              (3e9, 1, 48, 20_000, 57344, 45e12, 0.9e12)]:
    step = max(2.0 * n * batch / peak, (n * b + batch * ctx * kv) / bandwidth)
    check_close(throughput_tokens_per_s(n, b, batch, ctx, kv, peak, bandwidth), batch / step,
                what="throughput_tokens_per_s (hidden case)", units="tokens/s", batch=batch,
                factors=("milli", "bits-vs-bytes"))
check_no_shortcut(throughput_tokens_per_s, what="throughput_tokens_per_s")
### END HIDDEN TESTS
'''),
        md("ps3-q3-text", """
## Question 3: the critical batch size (2 points)

Ignoring the KV cache, decode at batch $B$ does $2NB$ FLOP per read of the $N \\cdot b$ bytes of
weights ($b$ bytes per parameter). Write `critical_batch_size(peak_flops_per_s,
bandwidth_bytes_per_s, bytes_per_param)`: the smallest whole batch at which the step becomes
compute-bound. Return an `int`.
"""),
        answer("ps3-q3-answer", '''
import math


def critical_batch_size(peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                        bytes_per_param: float) -> int:
    """Smallest batch whose decode step (weights only) is compute-bound."""
    ### BEGIN SOLUTION
    ridge = peak_flops_per_s / bandwidth_bytes_per_s
    return math.ceil(ridge * bytes_per_param / 2)
    ### END SOLUTION
'''),
        tests("ps3-q3-tests", 2, '''
from utils.feedback import check_close, check_integer, check_no_shortcut

check_integer(critical_batch_size(100e12, 1e12, 2), what="critical_batch_size(100e12, 1e12, 2)",
              minimum=1)
### BEGIN HIDDEN TESTS
import math as _math

for peak, bandwidth, b in [(377e12, 1.6e12, 2), (45e12, 0.8e12, 1), (150e12, 0.7e12, 0.5)]:
    exact = peak / bandwidth * b / 2
    got = critical_batch_size(peak, bandwidth, b)
    check_integer(got, what="critical_batch_size (hidden case)", minimum=1)
    check_close(got, _math.ceil(exact), what="critical_batch_size (hidden case)",
                units="sequences", rel=0, factors=("flop-per-mac", "bytes-per-bf16", "milli"),
                alternatives=[(_math.floor(exact), "rounded down: below the exact crossover the "
                               "step is still memory-bound. Round up (math.ceil).")])
check_no_shortcut(critical_batch_size, what="critical_batch_size")
### END HIDDEN TESTS
'''),
        md("ps3-q4-text", """
## Question 4: the critical batch of a real GPU (2 points)

Set `CRITICAL_BATCH_A100_BF16` to the critical batch size of bf16 decode on an A100-80GB, from
the spec sheet.
"""),
        answer("ps3-q4-answer", '''
### BEGIN SOLUTION
CRITICAL_BATCH_A100_BF16 = critical_batch_size(312e12, 2.039e12, 2)
### END SOLUTION
print("critical batch:", CRITICAL_BATCH_A100_BF16)
'''),
        tests("ps3-q4-tests", 2, '''
from utils.feedback import check_close, check_integer

check_integer(CRITICAL_BATCH_A100_BF16, what="CRITICAL_BATCH_A100_BF16", minimum=1)
### BEGIN HIDDEN TESTS
check_close(CRITICAL_BATCH_A100_BF16, 154, what="CRITICAL_BATCH_A100_BF16", units="sequences",
            rel=0.01, factors=("sparse-vs-dense", "flop-per-mac", "milli"))
### END HIDDEN TESTS
'''),
        md("ps3-q5-text", """
## Question 5: the largest batch that fits (2 points)

The GPU's memory holds the weights and the KV caches of all sequences. Write
`max_batch_in_memory(memory_bytes, weight_bytes, kv_bytes_per_token, context_tokens)`: the
largest number of sequences of `context_tokens` tokens whose KV caches fit beside the weights
(0 if none fits). Return an `int`.
"""),
        answer("ps3-q5-answer", '''
def max_batch_in_memory(memory_bytes: float, weight_bytes: float, kv_bytes_per_token: float,
                        context_tokens: int) -> int:
    """Largest number of sequences whose KV caches fit in memory beside the weights."""
    ### BEGIN SOLUTION
    free = memory_bytes - weight_bytes
    if free <= 0:
        return 0
    return int(free // (context_tokens * kv_bytes_per_token))
    ### END SOLUTION
'''),
        tests("ps3-q5-tests", 2, '''
from utils.feedback import check_close, check_integer, check_no_shortcut

check_integer(max_batch_in_memory(80e9, 14e9, 131072, 4096), what="max_batch_in_memory(...)",
              minimum=0)
### BEGIN HIDDEN TESTS
import math as _math

for mem, w, kv, ctx in [(141e9, 26e9, 163840, 12_000), (24e9, 6e9, 57344, 30_000),
                        (48e9, 36e9, 327680, 8192)]:
    expected = _math.floor((mem - w) / (ctx * kv))
    got = max_batch_in_memory(mem, w, kv, ctx)
    check_integer(got, what="max_batch_in_memory (hidden case)", minimum=0)
    check_close(got, expected, what="max_batch_in_memory (hidden case)", units="sequences",
                rel=0, factors=("bits-vs-bytes", "milli"),
                alternatives=[(_math.floor(mem / (ctx * kv)), "the weights take memory too: "
                               "subtract them before dividing by one sequence's KV cache."),
                              (_math.ceil((mem - w) / (ctx * kv)), "rounded up: a sequence "
                               "that does not fully fit does not fit. Round down.")])
_what = "max_batch_in_memory when the weights alone do not fit"
check_integer(max_batch_in_memory(16e9, 20e9, 57344, 1000), what=_what, minimum=0)
check_close(max_batch_in_memory(16e9, 20e9, 57344, 1000), 0, what=_what, rel=0)
check_no_shortcut(max_batch_in_memory, what="max_batch_in_memory")
### END HIDDEN TESTS
'''),
        md("ps3-q6-text", """
## Question 6: a real memory limit (2 points)

Set `MAX_BATCH_MISTRAL_A100_16K` to the largest batch of 16,384-token sequences that Mistral-7B
in bf16 can serve on one A100-80GB (weights and KV cache in bf16, nothing else in memory).
"""),
        answer("ps3-q6-answer", '''
### BEGIN SOLUTION
N_MISTRAL = 7_241_732_096
KV_MISTRAL = 2 * 32 * 8 * 128 * 2
MAX_BATCH_MISTRAL_A100_16K = max_batch_in_memory(80e9, N_MISTRAL * 2, KV_MISTRAL, 16384)
### END SOLUTION
print("max batch:", MAX_BATCH_MISTRAL_A100_16K)
'''),
        tests("ps3-q6-tests", 2, '''
from utils.feedback import check_close, check_integer

check_integer(MAX_BATCH_MISTRAL_A100_16K, what="MAX_BATCH_MISTRAL_A100_16K", minimum=0)
### BEGIN HIDDEN TESTS
import math as _math

_w, _kv = 7_241_732_096 * 2, 2 * 32 * 8 * 128 * 2
check_close(MAX_BATCH_MISTRAL_A100_16K, _math.floor((80e9 - _w) / (16384 * _kv)),
            what="MAX_BATCH_MISTRAL_A100_16K", units="sequences", rel=0,
            factors=("milli", "bits-vs-bytes"),
            alternatives=[(_math.floor((80 * 2**30 - _w) / (16384 * _kv)), "GB vs GiB: the "
                           "A100-80GB has 80 GB = 80 * 10^9 bytes, not 80 GiB."),
                          (_math.floor(80e9 / (16384 * _kv)), "the weights take memory too."),
                          (_math.floor((80e9 - _w) / (16384 * 2 * 32 * 32 * 128 * 2)),
                           "MHA vs GQA: Mistral-7B caches 8 key/value heads, not 32.")])
### END HIDDEN TESTS
'''),
        md("ps3-q7-text", """
## Question 7: cost per million tokens (2 points)

A GPU rents for `gpu_dollars_per_hour` and produces `tokens_per_second` tokens per second in
total. Write `cost_per_million_tokens(gpu_dollars_per_hour, tokens_per_second)`: the dollars
one million output tokens cost.
"""),
        answer("ps3-q7-answer", '''
def cost_per_million_tokens(gpu_dollars_per_hour: float, tokens_per_second: float) -> float:
    """Dollars per 10^6 tokens at a given total throughput."""
    ### BEGIN SOLUTION
    dollars_per_second = gpu_dollars_per_hour / 3600
    return dollars_per_second / tokens_per_second * 1e6
    ### END SOLUTION
'''),
        given("ps3-q7-table", '''
# What batching does to the price: Mistral-7B as above, at $2.50 per GPU-hour.
for batch in [1, 32, 128]:
    tps = throughput_tokens_per_s(7.24e9, 2, batch, 2000, 131072, 312e12, 2.039e12)
    print(f"batch {batch:4d}: ${cost_per_million_tokens(2.50, tps):7.2f} per million tokens")
'''),
        tests("ps3-q7-tests", 2, '''
from utils.feedback import Misconception, check_close, check_no_shortcut, check_positive

check_positive(cost_per_million_tokens(2.0, 1000.0), what="cost_per_million_tokens(2.0, 1000.0)",
               units="$")
### BEGIN HIDDEN TESTS
per_hour = Misconception("per-hour", 3600, "an hour has 3600 seconds: convert the hourly price "
                         "to dollars per second before dividing by tokens per second.")
for price, tps in [(4.1, 2750.0), (0.75, 410.0)]:
    check_close(cost_per_million_tokens(price, tps), price / 3600 / tps * 1e6,
                what="cost_per_million_tokens (hidden case)", units="$",
                factors=(per_hour, "milli"))
check_no_shortcut(cost_per_million_tokens, what="cost_per_million_tokens")
### END HIDDEN TESTS
'''),
        md("ps3-q8-text", """
## Question 8: the largest batch within a TPOT target (2 points)

A service promises each user a TPOT of at most `tpot_slo_s` seconds. Using your
`decode_step_seconds`, write `largest_batch_within_tpot(n_params, bytes_per_param,
context_tokens, kv_bytes_per_token, peak_flops_per_s, bandwidth_bytes_per_s, tpot_slo_s)`: the
largest batch whose decode step meets the target (0 if even batch 1 misses it). Return an `int`.
A loop over batch sizes is fine (stop at 100,000).
"""),
        answer("ps3-q8-answer", '''
def largest_batch_within_tpot(n_params: float, bytes_per_param: float, context_tokens: int,
                              kv_bytes_per_token: float, peak_flops_per_s: float,
                              bandwidth_bytes_per_s: float, tpot_slo_s: float) -> int:
    """Largest batch whose decode step time is at most tpot_slo_s seconds."""
    ### BEGIN SOLUTION
    best = 0
    for batch in range(1, 100_001):
        step = decode_step_seconds(n_params, bytes_per_param, batch, context_tokens,
                                   kv_bytes_per_token, peak_flops_per_s, bandwidth_bytes_per_s)
        if step > tpot_slo_s:
            break
        best = batch
    return best
    ### END SOLUTION
'''),
        tests("ps3-q8-tests", 2, '''
from utils.feedback import check_close, check_integer, check_no_shortcut

check_integer(largest_batch_within_tpot(1e9, 2, 1000, 1e5, 100e12, 1e12, 0.01),
              what="largest_batch_within_tpot(...)", minimum=0)
### BEGIN HIDDEN TESTS
def _largest(n, b, ctx, kv, peak, bandwidth, slo):
    best = 0
    for batch in range(1, 100_001):
        if max(2.0 * n * batch / peak, (n * b + batch * ctx * kv) / bandwidth) > slo:
            break
        best = batch
    return best


for args in [(13e9, 2, 4096, 163840, 377e12, 1.6e12, 0.03),
             (3e9, 1, 8000, 57344, 45e12, 0.9e12, 0.05),
             (13e9, 2, 4096, 163840, 377e12, 1.6e12, 0.01)]:
    got = largest_batch_within_tpot(*args)
    check_integer(got, what="largest_batch_within_tpot (hidden case)", minimum=0)
    check_close(got, _largest(*args), what="largest_batch_within_tpot (hidden case)",
                units="sequences", rel=0,
                alternatives=[(_largest(*args) + 1, "one too many: the batch you return must "
                               "itself meet the target.")])
check_no_shortcut(largest_batch_within_tpot, what="largest_batch_within_tpot")
### END HIDDEN TESTS
'''),
        md("ps3-end", BEFORE_YOU_SUBMIT),
    ]


# ---- ps4: profiling lab ---------------------------------------------------------------------

def ps4() -> list[nbformat.NotebookNode]:
    return [
        md("ps4-title", """
# Lab 4: profile the course model on your own device

So far you predicted speeds from spec sheets. Now you measure: your device's memory bandwidth
and FLOP/s, then the course model's TPOT and TTFT. You predict both times from your own
measurements, and you explain the gap between prediction and measurement.

The lab runs anywhere: on a laptop CPU, on Colab's T4, on a data-centre GPU. The autograded
checks compare your numbers with each other, not with fixed values, so they hold on any device.
When your work is graded, the notebook runs again on the grader's machine: type the numbers you
measured into your written answer at the end. The measurements are short: the whole notebook runs
in well under a minute on a laptop CPU.

You will need chapters 3 (decode), 5 (the roofline) and the measurement sections of chapter 2.
Here you *measure* with `utils.profile` (questions 1 and 4); the predictions of question 3 you
write yourself.
""" + RULES),
        setup("ps4-setup"),
        md("ps4-device-text", """
## Your device

The cell below picks the device (a CUDA GPU if there is one, else the CPU) and the precision the
course uses there, and builds the course model, SmolLM2-135M, with random weights. The time of a
forward pass depends on the shapes and the precision, not on the values of the weights, and random
weights skip reading and unpacking the trained ones (slow on a CPU).
"""),
        given("ps4-device", '''
import utils
from utils.device import describe, dtype_name, start_notebook

device, dtype = start_notebook(seed=0)
DTYPE = dtype_name(dtype)
model, _ = utils.load_model("smollm2-135m", device=device, dtype=dtype, weights="random")
N_PARAMS = model.config.n_params
PROMPT_TOKENS = 32  # the prompt length of the TTFT measurement
print(describe(device, dtype))
print(f"{model.config.name}: {N_PARAMS / 1e6:.1f} M parameters in {DTYPE}")
'''),
        md("ps4-q1-text", """
## Question 1: your device's roofline (2 points)

`utils.profile.measure_hardware(device, dtype, quick=True)` measures the read bandwidth of a
buffer much larger than the caches and the FLOP/s of a large matrix product, and returns a
`Hardware` record (`.bandwidth` in bytes/s, `.peak_flops(DTYPE)` in FLOP/s). Call it and set
`MEASURED_BANDWIDTH_BYTES_PER_S` and `MEASURED_FLOPS_PER_S`.
"""),
        answer("ps4-q1-answer", '''
from utils.profile import measure_hardware

### BEGIN SOLUTION
hw = measure_hardware(device, dtype, quick=True)
MEASURED_BANDWIDTH_BYTES_PER_S = hw.bandwidth
MEASURED_FLOPS_PER_S = hw.peak_flops(DTYPE)
### END SOLUTION
print(f"bandwidth {MEASURED_BANDWIDTH_BYTES_PER_S / 1e9:.1f} GB/s, "
      f"matmul {MEASURED_FLOPS_PER_S / 1e12:.3f} TFLOP/s in {DTYPE}")
'''),
        tests("ps4-q1-tests", 2, '''
from utils.feedback import check_in_range, check_positive

check_positive(MEASURED_BANDWIDTH_BYTES_PER_S, what="MEASURED_BANDWIDTH_BYTES_PER_S",
               units="bytes/s")
check_positive(MEASURED_FLOPS_PER_S, what="MEASURED_FLOPS_PER_S", units="FLOP/s")
### BEGIN HIDDEN TESTS
check_in_range(MEASURED_BANDWIDTH_BYTES_PER_S, 1e9, 3e13, what="MEASURED_BANDWIDTH_BYTES_PER_S",
               units="bytes/s", why="any device from a phone to a B200 moves 1 GB/s to 30 TB/s",
               factors=("milli", "bits-vs-bytes"))
check_in_range(MEASURED_FLOPS_PER_S, 1e9, 1e16, what="MEASURED_FLOPS_PER_S", units="FLOP/s",
               why="any device does 1 GFLOP/s to 10 PFLOP/s", factors=("milli",))
### END HIDDEN TESTS
'''),
        md("ps4-q2-text", """
## Question 2: the bytes of the weights (2 points)

Set `WEIGHT_BYTES` to the bytes the model's parameters occupy on your device, from the model
itself: each tensor of `model.parameters()` has `.numel()` elements of `.element_size()` bytes.
"""),
        answer("ps4-q2-answer", '''
### BEGIN SOLUTION
WEIGHT_BYTES = sum(p.numel() * p.element_size() for p in model.parameters())
### END SOLUTION
print(f"weights: {WEIGHT_BYTES / 1e6:.0f} MB")
'''),
        tests("ps4-q2-tests", 2, '''
from utils.feedback import check_close, check_positive

check_positive(WEIGHT_BYTES, what="WEIGHT_BYTES", units="bytes")
### BEGIN HIDDEN TESTS
check_close(WEIGHT_BYTES, sum(p.numel() * p.element_size() for p in model.parameters()),
            what="WEIGHT_BYTES", units="bytes", rel=0.01,
            factors=("bits-vs-bytes", "bytes-per-bf16", "milli", "gb-vs-gib"),
            alternatives=[(N_PARAMS, "that is the parameter count: multiply by the bytes per "
                           "element of the model's dtype.")])
### END HIDDEN TESTS
'''),
        md("ps4-q3-text", """
## Question 3: predictions (4 points)

Write the two roofline predictions as functions of plain numbers:
- `predicted_tpot_seconds(weight_bytes, bandwidth_bytes_per_s)`: one batch-1 decode step at a
  short context reads every weight once;
- `predicted_ttft_seconds(n_params, prompt_tokens, weight_bytes, flops_per_s,
  bandwidth_bytes_per_s)`: a prefill does $2N$ FLOP per prompt token and reads the weights once;
  its time is the larger of its compute time and its memory time.
"""),
        answer("ps4-q3-answer", '''
def predicted_tpot_seconds(weight_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """Roofline lower bound of a batch-1 decode step, in seconds."""
    ### BEGIN SOLUTION
    return weight_bytes / bandwidth_bytes_per_s
    ### END SOLUTION


def predicted_ttft_seconds(n_params: float, prompt_tokens: int, weight_bytes: float,
                           flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Roofline lower bound of a prefill of prompt_tokens tokens, in seconds."""
    ### BEGIN SOLUTION
    return max(2.0 * n_params * prompt_tokens / flops_per_s, weight_bytes / bandwidth_bytes_per_s)
    ### END SOLUTION
'''),
        tests("ps4-q3-tests-tpot", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(predicted_tpot_seconds(1e9, 1e11), what="predicted_tpot_seconds(1e9, 1e11)",
               units="s")
### BEGIN HIDDEN TESTS
for nbytes, bandwidth in [(2.7e8, 3.9e12), (5.4e8, 2.3e10)]:
    check_close(predicted_tpot_seconds(nbytes, bandwidth), nbytes / bandwidth,
                what="predicted_tpot_seconds (hidden case)", units="s",
                factors=("milli", "bits-vs-bytes", "bytes-per-bf16"))
check_no_shortcut(predicted_tpot_seconds, what="predicted_tpot_seconds",
                  forbidden=("utils.roofline", "utils.profile"))
### END HIDDEN TESTS
'''),
        tests("ps4-q3-tests-ttft", 2, '''
from utils.feedback import check_close, check_no_shortcut, check_positive

check_positive(predicted_ttft_seconds(1e8, 64, 4e8, 1e11, 1e10),
               what="predicted_ttft_seconds(1e8, 64, 4e8, 1e11, 1e10)", units="s")
### BEGIN HIDDEN TESTS
for n, p, nbytes, flops, bandwidth in [(1.35e8, 96, 5.4e8, 4.5e10, 2.3e10),
                                       (1.35e8, 40, 2.7e8, 6.0e14, 3.9e12)]:
    compute, memory = 2.0 * n * p / flops, nbytes / bandwidth
    check_close(predicted_ttft_seconds(n, p, nbytes, flops, bandwidth), max(compute, memory),
                what="predicted_ttft_seconds (hidden case)", units="s",
                factors=("flop-per-mac", "milli"),
                alternatives=[(compute, "a short prompt on a fast GPU is memory-bound: take the "
                               "max of the compute time and the memory time."),
                              (compute + memory, "the roofline takes the max of the two times, "
                               "not their sum.")])
check_no_shortcut(predicted_ttft_seconds, what="predicted_ttft_seconds",
                  forbidden=("utils.roofline", "utils.profile"))
### END HIDDEN TESTS
'''),
        md("ps4-q4-text", """
## Question 4: measure TPOT and TTFT (2 points)

`utils.profile.time_decode(model, batch=1, context=PROMPT_TOKENS, steps=4, warmup=1)` returns the
seconds of each of 4 decode steps (after one warm-up step);
`utils.profile.time_prefill(model, PROMPT_TOKENS, repeats=2, warmup=1)` the seconds of each of 2
prefills of a `PROMPT_TOKENS`-token prompt. Both synchronise a GPU before reading the clock. Set
`MEASURED_TPOT_S` and `MEASURED_TTFT_S` to the medians (`utils.timing.median`), in seconds.
"""),
        answer("ps4-q4-answer", '''
from utils.profile import time_decode, time_prefill
from utils.timing import median

### BEGIN SOLUTION
MEASURED_TPOT_S = median(time_decode(model, batch=1, context=PROMPT_TOKENS, steps=4, warmup=1))
MEASURED_TTFT_S = median(time_prefill(model, PROMPT_TOKENS, repeats=2, warmup=1))
### END SOLUTION
print(f"TPOT {MEASURED_TPOT_S * 1e3:.2f} ms, TTFT {MEASURED_TTFT_S * 1e3:.1f} ms")
'''),
        tests("ps4-q4-tests", 2, '''
from utils.feedback import check_in_range, check_positive

check_positive(MEASURED_TPOT_S, what="MEASURED_TPOT_S", units="s")
check_positive(MEASURED_TTFT_S, what="MEASURED_TTFT_S", units="s")
### BEGIN HIDDEN TESTS
# A small model on a fast GPU spends most of a step launching kernels: its times can be
# hundreds of times the bound. On a CPU the bound is close. Never much below it.
_high = 300 if device.type == "cpu" else 5000
_why = (f"on this {device.type}, a measured time lies between 0.3x and {_high}x its roofline "
        "bound: never much faster than the memory allows")
_tpot = WEIGHT_BYTES / MEASURED_BANDWIDTH_BYTES_PER_S
_ttft = max(2.0 * N_PARAMS * PROMPT_TOKENS / MEASURED_FLOPS_PER_S, _tpot)
check_in_range(MEASURED_TPOT_S / _tpot, 0.3, _high,
               what="MEASURED_TPOT_S / its roofline bound", why=_why)
check_in_range(MEASURED_TTFT_S / _ttft, 0.3, _high,
               what="MEASURED_TTFT_S / its roofline bound", why=_why)
### END HIDDEN TESTS
'''),
        md("ps4-q5-text", """
## Question 5: prediction against measurement (2 points)

Set `PREDICTED_TPOT_S` and `PREDICTED_TTFT_S` from your functions and your measurements of
questions 1 and 2 (prompt of `PROMPT_TOKENS` tokens), and `TPOT_GAP` and `TTFT_GAP` to measured
divided by predicted.
"""),
        answer("ps4-q5-answer", '''
### BEGIN SOLUTION
PREDICTED_TPOT_S = predicted_tpot_seconds(WEIGHT_BYTES, MEASURED_BANDWIDTH_BYTES_PER_S)
PREDICTED_TTFT_S = predicted_ttft_seconds(N_PARAMS, PROMPT_TOKENS, WEIGHT_BYTES,
                                          MEASURED_FLOPS_PER_S, MEASURED_BANDWIDTH_BYTES_PER_S)
TPOT_GAP = MEASURED_TPOT_S / PREDICTED_TPOT_S
TTFT_GAP = MEASURED_TTFT_S / PREDICTED_TTFT_S
### END SOLUTION
print(f"TPOT: predicted {PREDICTED_TPOT_S * 1e3:.2f} ms, measured {MEASURED_TPOT_S * 1e3:.2f} ms "
      f"({TPOT_GAP:.1f}x)")
print(f"TTFT: predicted {PREDICTED_TTFT_S * 1e3:.1f} ms, measured {MEASURED_TTFT_S * 1e3:.1f} ms "
      f"({TTFT_GAP:.1f}x)")
'''),
        tests("ps4-q5-tests", 2, '''
from utils.feedback import check_close, check_positive

for _name in ["PREDICTED_TPOT_S", "PREDICTED_TTFT_S", "TPOT_GAP", "TTFT_GAP"]:
    check_positive(globals()[_name], what=_name)
### BEGIN HIDDEN TESTS
_tpot = WEIGHT_BYTES / MEASURED_BANDWIDTH_BYTES_PER_S
_ttft = max(2.0 * N_PARAMS * PROMPT_TOKENS / MEASURED_FLOPS_PER_S, _tpot)
check_close(PREDICTED_TPOT_S, _tpot, what="PREDICTED_TPOT_S", units="s", rel=1e-3,
            factors=("milli", "bits-vs-bytes", "bytes-per-bf16"))
check_close(PREDICTED_TTFT_S, _ttft, what="PREDICTED_TTFT_S", units="s", rel=1e-3,
            factors=("flop-per-mac", "milli"))
check_close(TPOT_GAP, MEASURED_TPOT_S / PREDICTED_TPOT_S, what="TPOT_GAP", rel=1e-3,
            alternatives=[(PREDICTED_TPOT_S / MEASURED_TPOT_S, "inverted: measured / predicted.")])
check_close(TTFT_GAP, MEASURED_TTFT_S / PREDICTED_TTFT_S, what="TTFT_GAP", rel=1e-3,
            alternatives=[(PREDICTED_TTFT_S / MEASURED_TTFT_S, "inverted: measured / predicted.")])
### END HIDDEN TESTS
'''),
        md("ps4-q6-text", """
## Question 6: explain the gap (4 points, graded by hand)

In a few sentences: on which device did you measure (and with which precision), what were your
four numbers (predicted and measured TPOT and TTFT), and which of the two times is closer to its
roofline bound? Give the two most likely reasons for the larger gap, from what the roofline leaves
out: for example fixed costs per step (launching hundreds of small kernels, Python), work the
count ignores (attention, normalisation, activations), a matrix product of 32 rows that runs
below the large-GEMM FLOP/s you measured, or a measurement disturbed by other programs.
"""),
        written("ps4-q6-answer", 4, """
### BEGIN SOLUTION
On the 2-core CPU of the grading machine (fp32), decode read the 538 MB of weights about 1.5 to 3
times slower than the read bandwidth the benchmark reached, while the prefill of 32 tokens ran at
a larger multiple of its compute bound. Decode is closer to its bound: one step is a chain of
matrix-vector products that stream the weights, which is what the bandwidth benchmark does too.
The prefill multiplies 32-row matrices, far smaller than the 2048 x 2048 GEMM whose FLOP/s we
measured, so the cores run below that peak; it also does attention and normalisation work that
the 2N FLOP per token rule leaves out. On a GPU both gaps are far larger (tens of times): this
model is so small that launching its hundreds of kernels per step costs more than moving its
weights.
### END SOLUTION
"""),
        md("ps4-more", """
## Going further

`utils.profile` also sweeps: `ttft_vs_prompt_length`, `tpot_vs_batch_size` and
`tpot_vs_context_length` each return measurements next to the roofline prediction from your
measured hardware, ready to plot (`sweep.plot()`). On a GPU, try `tpot_vs_batch_size` up to a
batch of 64 and find where the measured TPOT starts to grow.
"""),
        md("ps4-end", BEFORE_YOU_SUBMIT),
    ]


ASSIGNMENTS = {
    ("ps1-arithmetic-intensity", "arithmetic_intensity"): ps1,
    ("ps2-ttft-tpot", "ttft_tpot"): ps2,
    ("ps3-batching-and-memory", "batching_and_memory"): ps3,
    ("ps4-profiling-lab", "profiling_lab"): ps4,
}


def build(builder) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = builder()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                       "name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare with the committed notebooks")
    args = parser.parse_args(argv)
    stale = []
    for (assignment, name), builder in ASSIGNMENTS.items():
        path = ROOT / "solutions" / assignment / f"{name}.ipynb"
        text = render(build(builder))
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run solutions/make_notebooks.py):",
              *[str(p.relative_to(ROOT)) for p in stale], sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

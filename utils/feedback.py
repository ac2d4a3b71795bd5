"""Checks for graded exercises whose failure messages teach.

When an answer is off by a recognisable factor (8 bits per byte, 2 FLOP per multiply-add, 1.074
from GB vs GiB, 1000 from a unit prefix, the batch size, a sparse peak, a forgotten term), the
AssertionError names the likely misconception. No message ever contains the expected value, and
this module holds no answers: the graded notebooks pass the expected values in.

Every check returns None on purpose. nbgrader reads a number displayed by a test cell as partial
credit, so a check that returned its value could change a grade if it ended a cell.

    check_close(tpot, expected, what="decode step time", units="s",
                factors=("bits-vs-bytes", "milli"), batch=8,
                alternatives=[(without_kv, "the KV cache read is missing: ...")])
"""

from __future__ import annotations

import inspect
import math
import numbers
import types
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Misconception:
    """A slip that multiplies an answer by `factor` (or divides it), and what to say about it."""

    key: str
    factor: float
    explanation: str


GIB_PER_GB = 2**30 / 1e9  # 1.0737...

STANDARD_FACTORS: dict[str, Misconception] = {
    m.key: m
    for m in (
        Misconception("bits-vs-bytes", 8,
                      "bits vs bytes: a byte is 8 bits, and every size and bandwidth here is in "
                      "bytes (a bf16 value is 2 bytes = 16 bits)."),
        Misconception("flop-per-mac", 2,
                      "FLOP per multiply-add: one multiply-add is 2 FLOP, so a forward pass costs "
                      "2 FLOP per parameter per token and an (m x k) @ (k x n) matmul 2*m*k*n."),
        Misconception("bytes-per-bf16", 2,
                      "bytes per weight: a 16-bit (bf16/fp16) weight takes 2 bytes, not 1."),
        Misconception("gb-vs-gib", GIB_PER_GB,
                      "GB vs GiB: 1 GB is 10^9 bytes, 1 GiB is 2^30 bytes (7.4% more). Spec "
                      "sheets quote GB and TB/s; use 10^9 and 10^12."),
        Misconception("milli", 1000,
                      "a unit prefix: ms vs s, TFLOP vs GFLOP, TB/s vs GB/s differ by 1000. Work in "
                      "base units (seconds, FLOP, bytes) and convert only to print."),
        Misconception("sparse-vs-dense", 2,
                      "sparse vs dense peak: NVIDIA's headline tensor-core FLOP/s assume 2:4 "
                      "structured sparsity and are twice the dense peak an ordinary model gets."),
    )
}

FACTOR_TOLERANCE = 0.015  # relative: tells 1.074 (GB vs GiB) apart from 1


def _is_bool(value: object) -> bool:
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


class FeedbackError(AssertionError):
    """A failed check; its message is meant for the student."""


def _label(what: str, units: str) -> str:
    return f"{what} ({units})" if units else what


def _describe_type(value: object) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__name__ if module == "builtins" else f"{module}.{kind.__name__}"


def _as_float(value: object, what: str, units: str = "") -> float:
    """The value as a float, or a FeedbackError saying why it is not a number."""
    label = _label(what, units)
    if value is None:
        raise FeedbackError(f"{label}: got None. Did the function forget to `return` its result?")
    if _is_bool(value):
        raise FeedbackError(f"{label}: got the bool {value}. A quantity must be a number "
                            "(int or float), not True/False.")
    if isinstance(value, str):
        raise FeedbackError(f"{label}: got a string. Return the number itself, not formatted text.")
    if type(value).__module__.startswith("torch"):
        raise FeedbackError(f"{label}: got a {_describe_type(value)}. Convert it to a Python "
                            "number with .item().")
    if isinstance(value, numbers.Real):  # int, float, numpy integer and floating scalars
        number = float(value)
    elif type(value).__name__ == "ndarray" and getattr(value, "ndim", None) == 0:
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise FeedbackError(f"{label}: got a 0-d array that is not a number.") from None
    elif type(value).__name__ == "ndarray":
        raise FeedbackError(f"{label}: got an array of shape {value.shape}; expected one number.")
    else:
        raise FeedbackError(f"{label}: got an object of type {_describe_type(value)}; expected a "
                            "plain int or float.")
    if math.isnan(number):
        raise FeedbackError(f"{label}: got NaN (not a number). Look for 0/0, or for an "
                            "operation on a value that was already NaN.")
    if math.isinf(number):
        raise FeedbackError(f"{label}: got infinity. Look for a division by zero or an overflow.")
    return number


def check_number(value: object, *, what: str, units: str = "") -> None:
    """A finite real number (int, float or numpy scalar; not bool, None, str, NaN or inf)."""
    _as_float(value, what, units)


def check_positive(value: object, *, what: str, units: str = "") -> None:
    """A finite number greater than zero."""
    if _as_float(value, what, units) <= 0:
        raise FeedbackError(f"{_label(what, units)} must be positive; got {value}. A time, a size "
                            "or a rate cannot be zero or negative.")


def check_integer(value: object, *, what: str, minimum: int | None = None) -> None:
    """An int (or numpy integer), not a float with an integer value, and not a bool."""
    if _is_bool(value):
        raise FeedbackError(f"{what}: got the bool {value}; expected an int.")
    if not isinstance(value, numbers.Integral):
        _as_float(value, what)  # a clearer message for None, str, NaN, ...
        raise FeedbackError(f"{what}: got a {_describe_type(value)}; expected an int (a whole "
                            "count). Round deliberately: math.floor for what fits, math.ceil for "
                            "what is needed.")
    if minimum is not None and int(value) < minimum:
        raise FeedbackError(f"{what}: got {int(value)}; it must be at least {minimum}.")


def check_bool(value: object, *, what: str) -> None:
    """True or False (Python or numpy bool), not 0/1 and not a string."""
    if not (_is_bool(value)):
        raise FeedbackError(f"{what}: got a {_describe_type(value)}; expected True or False.")


def check_bool_equals(value: object, expected: bool, *, what: str, hint: str) -> None:
    """The right bool; on a wrong one the message is `hint` (which must not give the answer)."""
    check_bool(value, what=what)
    if bool(value) is not bool(expected):
        raise FeedbackError(f"{what}: not the right answer for one of the test cases. {hint}")


def _candidates(factors: Iterable[str | Misconception] | None,
                batch: float | None) -> list[Misconception]:
    if factors is None:
        chosen = list(STANDARD_FACTORS.values())
    else:
        chosen = []
        for f in factors:
            if isinstance(f, Misconception):
                chosen.append(f)
            elif f in STANDARD_FACTORS:
                chosen.append(STANDARD_FACTORS[f])
            else:
                raise ValueError(f"unknown misconception {f!r}: choose one of "
                                 f"{', '.join(STANDARD_FACTORS)} or pass a Misconception")
    if batch is not None and batch > 1:
        chosen.append(Misconception(
            "batch", float(batch),
            "per sequence vs per batch: the answer is off by exactly the batch size. Check "
            "whether the quantity counts one sequence or all B of them (and whether each "
            "sequence brings its own share, e.g. its own KV cache)."))
    return chosen


def misconception_message(ratio: float, candidates: Iterable[Misconception]) -> str | None:
    """The explanation for an answer `ratio` times the expected one, or None if no factor fits."""
    larger: list[Misconception] = []
    smaller: list[Misconception] = []
    for m in candidates:
        if math.isclose(ratio, m.factor, rel_tol=FACTOR_TOLERANCE):
            larger.append(m)
        elif math.isclose(ratio, 1 / m.factor, rel_tol=FACTOR_TOLERANCE):
            smaller.append(m)
    found = larger or smaller
    if not found:
        return None
    direction = "too large" if larger else "too small"
    factor = "the batch size" if found[0].key == "batch" else f"{found[0].factor:.4g}"
    reasons = " Or: ".join(m.explanation for m in found)
    return f"{direction} by a factor of {factor}. Likely misconception: {reasons}"


def check_close(actual: object, expected: float, *, what: str, units: str = "",
                rel: float = 1e-3, factors: Iterable[str | Misconception] | None = None,
                batch: float | None = None,
                alternatives: Iterable[tuple[float, str]] = ()) -> None:
    """`actual` within `rel` of `expected`; otherwise a message naming the likely misconception.

    factors: keys of STANDARD_FACTORS (or Misconception objects) worth suggesting for this
    question; None means all of them. batch: the batch size of the test case, when "per sequence
    vs per batch" is a possible slip. alternatives: (value, explanation) pairs for wrong formulas
    that are not a plain factor away, e.g. the answer without the KV cache term.
    """
    label = _label(what, units)
    value = _as_float(actual, what, units)
    if not (isinstance(expected, numbers.Real) and math.isfinite(float(expected))):
        raise TypeError(f"check_close for {what!r}: the expected value must be a finite number "
                        "(this is a bug in the test, not in your answer)")
    expected = float(expected)
    if math.isclose(value, expected, rel_tol=rel, abs_tol=0.0):
        return
    for alt_value, explanation in alternatives:
        if math.isclose(value, float(alt_value), rel_tol=rel, abs_tol=0.0):
            raise FeedbackError(f"{label}: wrong value. Likely misconception: {explanation}")
    if value == 0:
        raise FeedbackError(f"{label}: got zero, which is wrong here. Look for an integer "
                            "division, or a term that cancels or is never added.")
    if expected == 0:
        raise FeedbackError(f"{label}: wrong value for this case. Recheck the edge case the "
                            "description names.")
    ratio = value / expected
    if ratio < 0:
        raise FeedbackError(f"{label}: wrong sign. Recheck which quantity is subtracted from "
                            "which.")
    explained = misconception_message(ratio, _candidates(factors, batch))
    if explained:
        raise FeedbackError(f"{label}: {explained}")
    if math.isclose(ratio, 1, rel_tol=0.1):
        raise FeedbackError(f"{label}: close, but not within {rel:.2g} of the expected value. Did "
                            "you round an intermediate result, or use a slightly different "
                            "constant than the one given?")
    raise FeedbackError(f"{label}: wrong value, and not off by any of the usual factors (8 bits "
                        "per byte, 2 FLOP per multiply-add, 2 bytes per 16-bit weight, GB vs GiB, "
                        "1000 from a unit prefix, sparse vs dense peak, batch size). Recheck the "
                        "formula term by term, with units.")


def check_in_range(value: object, low: float, high: float, *, what: str, units: str = "",
                   why: str = "", factors: Iterable[str | Misconception] | None = ("milli",)
                   ) -> None:
    """low <= value <= high, for measurements that have no single right value. Outside, the
    message names a factor (of `factors`) that would bring the value inside, if one does."""
    label = _label(what, units)
    number = _as_float(value, what, units)
    if low <= number <= high:
        return
    for m in _candidates(factors, None):
        for scaled, direction in ((number / m.factor, "too large"), (number * m.factor, "too small")):
            if low <= scaled <= high:
                raise FeedbackError(f"{label}: outside the plausible range ({why}), and {direction} "
                                    f"by about a factor of {m.factor:.4g}. Likely misconception: "
                                    f"{m.explanation}")
    raise FeedbackError(f"{label}: outside the plausible range ({why}). Check what you measured "
                        "and its units.")


def _code_names(func: types.FunctionType) -> set[str]:
    """Every global, attribute and imported module name in a function's code (nested too)."""
    codes = [func.__code__]
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def _module_of(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return str(getattr(obj, "__module__", "") or "")


def check_no_shortcut(func: object, *, what: str,
                      forbidden: tuple[str, ...] = ("utils.roofline",)) -> None:
    """`func` is a plain function that reaches no forbidden module, directly, through a global
    name bound to it or to one of its functions, or through an import inside the function.

    The rule it enforces: an exercise asks you to write the formula, not to call the course
    function that already computes it.
    """
    if not isinstance(func, types.FunctionType):
        raise FeedbackError(f"{what}: expected a function defined with `def`, got a "
                            f"{_describe_type(func)}.")
    names = _code_names(func)
    reached = [func.__globals__[n] for n in names if n in func.__globals__]
    for cell in func.__closure__ or ():
        try:
            reached.append(cell.cell_contents)
        except ValueError:  # an empty closure cell
            continue
    modules = {_module_of(o) for o in reached} | names
    for module in forbidden:
        package, _, leaf = module.rpartition(".")
        via_attribute = bool(package) and leaf in names and package in modules  # utils.roofline.f
        if via_attribute or any(m == module or m.startswith(module + ".") for m in modules):
            raise FeedbackError(f"{what}: calls {module}, which this exercise does not allow. "
                                "Write the formula yourself; the course functions are there to "
                                "check your work elsewhere.")


def check_callable(obj: object, *, what: str, n_args: int | None = None) -> None:
    """A function (accepting `n_args` positional arguments, when given)."""
    if not callable(obj):
        raise FeedbackError(f"{what}: expected a function, got a {_describe_type(obj)}.")
    if n_args is None:
        return
    try:
        inspect.signature(obj).bind(*range(n_args))
    except TypeError:
        raise FeedbackError(f"{what}: must accept {n_args} positional arguments, in the order "
                            "the question gives them.") from None
    except ValueError:  # no signature available (a builtin): let the call decide
        return


__all__ = ["FeedbackError", "GIB_PER_GB", "Misconception", "STANDARD_FACTORS", "check_bool",
           "check_bool_equals", "check_callable", "check_close", "check_in_range", "check_integer",
           "check_no_shortcut", "check_number", "check_positive", "misconception_message"]


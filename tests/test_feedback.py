"""The misconception checker: hand-computed wrong answers get the right explanation, and no
message ever contains the expected value."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from utils import feedback as fb
from utils.feedback import FeedbackError, check_close

# A 13e9-parameter model in bf16 on a device with 1.6e12 bytes/s: one decode step reads
# 13e9 * 2 = 26e9 bytes, so it takes 26e9 / 1.6e12 = 0.01625 s.
EXPECTED_S = 0.01625


def failure(actual: object, expected: float = EXPECTED_S, **kw: object) -> str:
    with pytest.raises(AssertionError) as info:
        check_close(actual, expected, what="decode step time", units="s", **kw)
    message = str(info.value)
    assert "0.01625" not in message and "1.625e-02" not in message.lower()
    return message


def test_right_answers_pass_and_return_none() -> None:
    assert check_close(0.01625, EXPECTED_S, what="t") is None
    assert check_close(0.016250001, EXPECTED_S, what="t") is None  # within rel 1e-3
    assert check_close(np.float64(0.01625), EXPECTED_S, what="t") is None
    assert check_close(np.float32(0.01625), EXPECTED_S, what="t") is None
    assert check_close(np.array(0.01625), EXPECTED_S, what="t") is None  # 0-d array
    assert check_close(26_000_000_000, 26e9, what="bytes") is None  # an int is fine
    assert check_close(np.int64(26_000_000_000), 26e9, what="bytes") is None


@pytest.mark.parametrize("actual, words", [
    (0.01625 * 8, ["too large by a factor of 8", "bits vs bytes"]),  # 208e9 bits / 1.6e12
    (0.01625 * 1000, ["too large by a factor of 1000", "ms vs s"]),  # 16.25 "ms" returned
    (0.01625 / 1000, ["too small by a factor of 1000", "unit prefix"]),
    (13e9 * 2 / (1.6e12 * 2**30 / 1e9), ["too small by a factor of 1.074", "GiB"]),
    (13e9 * 1 / 1.6e12, ["too small by a factor of 2", "2 bytes", "multiply-add", "sparse"]),
])
def test_factor_slips_name_the_misconception(actual: float, words: list[str]) -> None:
    message = failure(actual)
    for word in words:
        assert word in message, message


def test_factors_can_be_restricted_to_the_ones_that_fit_the_question() -> None:
    message = failure(13e9 / 1.6e12, factors=("bytes-per-bf16",))
    assert "2 bytes" in message and "sparse" not in message and "multiply-add" not in message
    # 8x with only the 1000 slip allowed: explained as nothing in particular
    message = failure(0.01625 * 8, factors=("milli",))
    assert "not off by any of the usual factors" in message


def test_batch_size_factor_is_named_without_printing_the_batch() -> None:
    # throughput per sequence (1 / 0.02 s = 50 tokens/s) instead of per batch of 24 (1200)
    with pytest.raises(AssertionError) as info:
        check_close(50.0, 1200.0, what="throughput", units="tokens/s", batch=24)
    message = str(info.value)
    assert "too small by a factor of the batch size" in message and "per sequence" in message
    assert "1200" not in message and "24" not in message


def test_explicit_alternative_names_a_forgotten_term() -> None:
    # TPOT at 8,192 tokens of context: (14e9 weight bytes + 8192 * 131072 KV bytes) / 2e12 B/s
    with_kv = (14e9 + 8192 * 131072) / 2e12
    without_kv = 14e9 / 2e12
    with pytest.raises(AssertionError) as info:
        check_close(without_kv, with_kv, what="TPOT", units="s",
                    alternatives=[(without_kv, "the KV cache read is missing")])
    assert "KV cache read is missing" in str(info.value)
    assert f"{with_kv:g}" not in str(info.value)


def test_close_but_not_within_tolerance() -> None:
    assert "round" in failure(0.0165)  # 1.5% off


def test_unexplained_and_wrong_sign() -> None:
    assert "not off by any of the usual factors" in failure(0.05)  # 3.08x
    assert "wrong sign" in failure(-0.01625)
    assert "got zero" in failure(0.0)


@pytest.mark.parametrize("value, words", [
    (True, "bool"), (np.bool_(True), "bool"), (None, "return"), ("0.016 s", "string"),
    (float("nan"), "NaN"), (math.inf, "infinity"), (-math.inf, "infinity"),
    (np.array([0.01625, 0.01625]), "array of shape (2,)"), ([0.01625], "list"),
])
def test_type_problems_have_clear_messages(value: object, words: str) -> None:
    assert words in failure(value)


def test_an_object_that_claims_equality_is_not_a_number() -> None:
    class AlwaysEqual:
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 0

    message = failure(AlwaysEqual())
    assert "AlwaysEqual" in message and "expected a plain int or float" in message


def test_float_subclass_is_compared_by_value_not_by_its_eq() -> None:
    class Sneaky(float):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = float.__hash__

    assert "factor of 8" in failure(Sneaky(0.13))  # 0.13 / 0.01625 = 8


def test_bad_expected_value_is_a_test_bug() -> None:
    with pytest.raises(TypeError, match="bug in the test"):
        check_close(1.0, float("nan"), what="x")


def test_unknown_factor_key_is_rejected() -> None:
    with pytest.raises(ValueError, match="choose one of bits-vs-bytes"):
        check_close(2.0, 1.0, what="x", factors=("bits",))


def test_misconception_message_directly() -> None:
    candidates = list(fb.STANDARD_FACTORS.values())
    assert fb.misconception_message(8.0, candidates).startswith("too large by a factor of 8.")
    assert fb.misconception_message(1 / 1.0737, candidates).startswith("too small by a factor of 1.074")
    assert fb.misconception_message(1.0, candidates) is None
    assert fb.misconception_message(3.0, candidates) is None


def test_number_checks() -> None:
    assert fb.check_positive(3, what="t", units="s") is None
    with pytest.raises(FeedbackError, match="must be positive"):
        fb.check_positive(-1.0, what="t", units="s")
    with pytest.raises(FeedbackError, match="must be positive"):
        fb.check_positive(0, what="t")
    assert fb.check_integer(np.int32(7), what="n", minimum=1) is None
    with pytest.raises(FeedbackError, match="expected an int"):
        fb.check_integer(7.0, what="n")
    with pytest.raises(FeedbackError, match="bool"):
        fb.check_integer(True, what="n")
    with pytest.raises(FeedbackError, match="at least 1"):
        fb.check_integer(0, what="n", minimum=1)
    with pytest.raises(FeedbackError, match="NaN"):
        fb.check_integer(float("nan"), what="n")


def test_range_check_for_measurements() -> None:
    # a measured TPOT 2.1x its roofline prediction is plausible; reported in ms it is 2100x
    assert fb.check_in_range(2.1, 0.3, 500, what="TPOT / prediction") is None
    with pytest.raises(FeedbackError, match="too large by about a factor of 1000") as info:
        fb.check_in_range(2100.0, 0.3, 500, what="TPOT / prediction", why="0.3x to 500x")
    assert "unit prefix" in str(info.value)
    with pytest.raises(FeedbackError, match="too small by about a factor of 1000"):
        fb.check_in_range(0.0021, 0.3, 500, what="ratio")
    with pytest.raises(FeedbackError, match="Check what you measured"):
        fb.check_in_range(1e9, 0.3, 500, what="ratio")  # no single factor explains it
    with pytest.raises(FeedbackError, match="NaN"):
        fb.check_in_range(float("nan"), 0.3, 500, what="ratio")


def test_bool_checks() -> None:
    assert fb.check_bool(np.bool_(False), what="b") is None
    with pytest.raises(FeedbackError, match="expected True or False"):
        fb.check_bool(1, what="b")
    with pytest.raises(FeedbackError, match="expected True or False"):
        fb.check_bool("True", what="b")
    with pytest.raises(FeedbackError, match="compare the intensity"):
        fb.check_bool_equals(False, True, what="b", hint="compare the intensity with the ridge")


# ---- the shortcut rule: a function may not reach utils.roofline -----------------------------

from utils import roofline  # noqa: E402  (used by the functions below)
from utils import roofline as rl  # noqa: E402
from utils.roofline import matmul_flops as mf  # noqa: E402


def honest(m: int, k: int, n: int) -> float:
    return 2.0 * m * k * n


def via_module(m: int, k: int, n: int) -> float:
    return roofline.matmul_flops(m, k, n)


def via_alias(m: int, k: int, n: int) -> float:
    return rl.matmul_flops(m, k, n)


def via_function(m: int, k: int, n: int) -> float:
    return mf(m, k, n)


def via_local_import(m: int, k: int, n: int) -> float:
    from utils.roofline import matmul_flops

    return matmul_flops(m, k, n)


def via_package_attribute(m: int, k: int, n: int) -> float:
    import utils

    return utils.roofline.matmul_flops(m, k, n)


def via_nested_function(m: int, k: int, n: int) -> float:
    def inner() -> float:
        return rl.matmul_flops(m, k, n)

    return inner()


def test_honest_function_passes_the_shortcut_rule() -> None:
    assert fb.check_no_shortcut(honest, what="matmul_flops") is None


@pytest.mark.parametrize("func", [via_module, via_alias, via_function, via_local_import,
                                  via_package_attribute, via_nested_function])
def test_shortcuts_are_caught(func) -> None:
    with pytest.raises(FeedbackError, match=re.escape("calls utils.roofline")):
        fb.check_no_shortcut(func, what="matmul_flops")


def test_shortcut_rule_needs_a_def_function() -> None:
    with pytest.raises(FeedbackError, match="defined with `def`"):
        fb.check_no_shortcut(print, what="f")  # a builtin


def test_check_callable() -> None:
    assert fb.check_callable(honest, what="f", n_args=3) is None
    with pytest.raises(FeedbackError, match="3 positional arguments"):
        fb.check_callable(lambda a: a, what="f", n_args=3)
    with pytest.raises(FeedbackError, match="expected a function"):
        fb.check_callable(3.0, what="f")

"""The napkin figures typed into the prose pages are the ones utils computes.

The pages show formulas with spec-sheet inputs and their results; these tests recompute each
result with utils.roofline and look for it, formatted as the page prints it, in the page. If the
code or a spec-sheet value changes, the page must change too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from utils import roofline as rl
from utils.models import dense_model

H100 = "h100-sxm"
SEVEN_B = dense_model(7e9)


def page(root: Path, chapter: str) -> str:
    return (root / "chapters" / chapter / "index.md").read_text(encoding="utf-8")


def ms(seconds: float, digits: int) -> str:
    return f"{seconds * 1e3:.{digits}f} ms"


def decode_table_row(model) -> list[str]:
    step = rl.decode_step_seconds(model, H100, "bf16")
    small = model == "smollm2-135m"  # printed with one more digit
    return [f"{rl.weight_bytes(model, 'bf16') / 1e9:.{2 if small else 1}f} GB",
            ms(step, 3 if small else 2), f"{1 / step:,.0f} tokens/s"]


@pytest.mark.parametrize("model", [SEVEN_B, "llama-3-8b", "smollm2-135m"])
def test_decode_chapter_ceiling_table(root: Path, model) -> None:
    text = page(root, "03-decode")
    for figure in decode_table_row(model):
        assert figure in text, f"chapter 3 should show {figure} for {getattr(model, 'name', model)}"


def test_prefill_chapter_worked_example(root: Path) -> None:
    text = page(root, "02-prefill")
    pre = rl.prefill_cost("llama-3-8b", H100, "bf16", 2000)
    assert ms(pre.compute_seconds, 1) in text                      # 33.5 ms
    assert ms(pre.memory_seconds, 1) in text                       # 4.9 ms of weights (+ KV writes)
    assert f"about {rl.prefill_tokens_per_decode_step('llama-3-8b', H100):.0f} prompt tokens" in text
    steps = rl.prefill_equivalent_decode_steps("llama-3-8b", H100, "bf16", 2000)
    assert f"as much as {steps:.0f} decode steps" in text


def test_kv_cache_chapter_long_context_bound(root: Path) -> None:
    text = page(root, "04-kv-cache")
    assert ms(rl.decode_step_seconds("llama-3-8b", H100, "bf16", context=8192), 2) in text  # 5.11
    assert f"= {8192 * rl.kv_cache_bytes_per_token('llama-3-8b', 'bf16') / 1e9:.2f}$ GB" in text

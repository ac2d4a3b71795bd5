"""The napkin math against hand calculations and the source articles' figures.

Every expected value below is computed by hand from the inputs in the comment next to it,
not by calling the function under test.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from utils import roofline as rl
from utils.hardware import HARDWARE, Hardware, bytes_per_element, get_hardware
from utils.models import MODELS, ModelShape, dense_model, get_model

SEED_GPU = Hardware("seed-h100", {"bf16": 1000e12}, bandwidth=3.3e12, memory_bytes=80e9)
SEVEN_B = dense_model(7e9)


def approx(x: float, rel: float = 0.05):
    return pytest.approx(x, rel=rel)


# ---- models: parameter counts from shapes -------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("llama-2-7b", 6.74e9), ("llama-3-8b", 8.03e9), ("smollm2-135m", 1.35e8),
    ("mistral-7b", 7.24e9), ("llama-3-70b", 70.6e9), ("smollm2-360m", 3.62e8),
    ("smollm2-1.7b", 1.71e9), ("llama-3.2-1b", 1.24e9),
])
def test_parameter_counts_match_published_sizes(name: str, expected: float) -> None:
    assert get_model(name).n_params == approx(expected, 0.01)


def test_smollm2_135m_count_by_hand() -> None:
    d, layers, ff, vocab, kv = 576, 30, 1536, 49152, 3 * 64
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d
    assert get_model("smollm2-135m").n_params == vocab * d + layers * per_layer + d  # tied


def test_model_lookup_errors_name_close_matches() -> None:
    with pytest.raises(ValueError, match="llama-3-8b"):
        get_model("llama3-8b")
    with pytest.raises(ValueError, match="choose one of"):
        get_model("gpt-5")


def test_bad_shapes_rejected() -> None:
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        ModelShape("bad", 2, 64, 4, 3, 128, 100)
    with pytest.raises(ValueError, match="n_params must be positive"):
        dense_model(0)


# ---- hardware --------------------------------------------------------------------------

def test_hardware_table_has_the_course_devices() -> None:
    for name in ("h100-sxm", "h100-pcie", "h200", "a100-80gb", "l4", "t4"):
        h = HARDWARE[name]
        assert h.bandwidth > 0 and h.memory_bytes > 0 and h.l2_bytes > 0 and h.sram_bytes > 0
        assert h.source, f"{name} has no source"


def test_t4_has_no_bf16() -> None:
    with pytest.raises(ValueError, match="no bf16.*fp16"):
        get_hardware("t4").peak_flops("bf16")


def test_unknown_hardware_suggests() -> None:
    with pytest.raises(ValueError, match="did you mean .*h100-sxm"):
        get_hardware("h10")


def test_sparse_is_twice_dense() -> None:
    h = get_hardware("h100-sxm")
    assert h.peak_flops("bf16", sparse=True) == 2 * h.peak_flops("bf16")


def test_on_chip_memory_is_far_smaller_than_the_weights() -> None:
    h = get_hardware("h100-sxm")
    counter = h.l2_bytes + h.sram_bytes  # tens of MB
    assert 10e6 < counter < 200e6
    assert rl.weight_bytes(SEVEN_B, "bf16") / counter > 100


def test_bytes_per_element() -> None:
    assert [bytes_per_element(d) for d in ("fp32", "bf16", "fp8", "int4")] == [4, 2, 1, 0.5]
    with pytest.raises(ValueError, match="unknown dtype"):
        bytes_per_element("fp12")


# ---- the seed articles' figures ----------------------------------------------------------

def test_seven_b_in_16_bit_is_14_gb() -> None:
    assert rl.weight_bytes(SEVEN_B, "bf16") == 14e9


def test_seed_ridge_point_about_300() -> None:
    assert rl.ridge_flop_per_byte(SEED_GPU, "bf16") == approx(1000e12 / 3.3e12)
    assert 290 < rl.ridge_flop_per_byte("h100-sxm", "bf16") < 310  # 989.4 / 3.35 = 295


def test_seed_decode_batch1() -> None:
    c = rl.decode_cost(SEVEN_B, SEED_GPU, "bf16")
    assert c.flop_per_byte == approx(1.0, 0.01)                  # 14e9 FLOP / 14e9 bytes
    assert c.memory_seconds == approx(14e9 / 3.3e12, 1e-9)       # about 4 ms
    assert 4e-3 < c.memory_seconds < 4.5e-3
    assert c.compute_seconds == approx(0.014e-3, 1e-9)           # 14e9 / 1e15
    assert c.bound == "memory"
    assert rl.decode_tokens_per_second(SEVEN_B, SEED_GPU, "bf16") == approx(240, 0.03)


def test_seed_prefill_1000_tokens_is_about_1000_flop_per_byte() -> None:
    c = rl.prefill_cost(SEVEN_B, SEED_GPU, "bf16", 1000)
    assert c.flop_per_byte == approx(1000, 0.01)  # 14e12 FLOP / 14e9 bytes
    assert c.bound == "compute"


def test_seed_8b_on_h100_figures() -> None:
    # 8.03e9 params x 2 bytes / 3.35e12 B/s = 4.79 ms
    assert rl.decode_step_seconds("llama-3-8b", "h100-sxm", "bf16") == approx(5e-3, 0.05)
    # 4.79 ms x 989.4e12 FLOP/s / (2 x 8.03e9) = 295 tokens
    assert rl.prefill_tokens_per_decode_step("llama-3-8b", "h100-sxm") == approx(300, 0.03)
    # (2 x 8.03e9 x 2000 + attention) / 989.4e12 = 33.5 ms = 7 decode steps
    steps = rl.prefill_equivalent_decode_steps("llama-3-8b", "h100-sxm", "bf16", 2000)
    assert steps == approx(7, 0.05)


# ---- formulas against hand calculations --------------------------------------------------

def test_kv_cache_per_token() -> None:
    assert rl.kv_cache_bytes_per_token("llama-3-8b", "bf16") == 128 * 1024  # 2*32*8*128*2
    assert rl.kv_cache_bytes_per_token("llama-2-7b", "bf16") == 512 * 1024  # 2*32*32*128*2
    assert rl.kv_cache_bytes_per_token("smollm2-135m", "fp32") == 2 * 30 * 3 * 64 * 4
    assert rl.kv_cache_bytes_per_token(SEVEN_B, "bf16") == 0


def test_matmul_counts() -> None:
    assert rl.matmul_flops(2, 3, 4) == 48
    assert rl.matmul_bytes(2, 3, 4, "bf16") == 2 * (6 + 12 + 8)
    with pytest.raises(ValueError, match="k must be positive"):
        rl.matmul_flops(2, 0, 4)


def test_forward_flops_with_attention_by_hand() -> None:
    m = get_model("llama-2-7b")
    # 4 new tokens after 10 cached: pairs = 11 + 12 + 13 + 14 = 50
    attn = 4 * 32 * 4096 * 50
    assert rl.forward_flops(m, 4, context=10) == 2 * m.n_params * 4 + attn


def test_decode_bytes_include_kv_read_and_write() -> None:
    m = get_model("llama-3-8b")
    c = rl.decode_cost(m, "h100-sxm", "bf16", batch=4, context=1000)
    assert c.bytes == m.n_params * 2 + 4 * 1001 * 131072
    no_kv = rl.decode_cost(m, "h100-sxm", "bf16", batch=4, context=1000, kv_cache=False)
    assert no_kv.bytes == m.n_params * 2


def test_attainable_flops_is_the_roofline() -> None:
    h = get_hardware("h100-sxm")
    assert rl.attainable_flops(1.0, h, "bf16") == h.bandwidth
    assert rl.attainable_flops(1e6, h, "bf16") == h.peak_flops("bf16")


def test_critical_batch_size_by_hand() -> None:
    # no KV traffic: B * 2N / peak >= 2N / bw  <=>  B >= peak / bw = 303.03 -> 304
    assert rl.critical_batch_size(SEVEN_B, SEED_GPU, "bf16") == 304
    # the KV cache pushes the bend later...
    assert rl.critical_batch_size("llama-3-8b", "h100-sxm", "bf16", context=100) > \
        rl.critical_batch_size("llama-3-8b", "h100-sxm", "bf16", context=0)
    # ...and at 1000 tokens each sequence's cache costs more time (1001 x 128 KiB / 3.35 TB/s =
    # 39 us) than its math (about 2 x 8.03e9 / 989.4e12 = 17 us): never compute-bound
    with pytest.raises(ValueError, match="never turns compute-bound"):
        rl.critical_batch_size("llama-3-8b", "h100-sxm", "bf16", context=1000)


def test_max_batch_by_memory_by_hand() -> None:
    m = get_model("llama-3-8b")
    free = 80e9 - m.n_params * 2
    assert rl.max_batch_by_memory(m, "h100-sxm", "bf16", 4096) == int(free // (4096 * 131072))
    assert rl.max_batch_by_memory("llama-3-70b", "t4", "bf16", 100) == 0


def test_precision_moves_decode_intensity() -> None:
    # 4-bit weights with 16-bit math: half a byte per weight -> 4 FLOP/byte at batch 1
    c = rl.decode_cost(SEVEN_B, "h100-sxm", "int4", compute_dtype="bf16")
    assert c.flop_per_byte == approx(4.0, 1e-9)
    with pytest.raises(ValueError, match="compute_dtype"):
        rl.decode_cost(SEVEN_B, "h100-sxm", "int4")


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt_tokens=0), "prompt_tokens must be positive"),
    (dict(batch=-1), "batch must be positive"),
])
def test_bad_counts(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rl.summary("llama-3-8b", "h100-sxm", "bf16", **kwargs)


def test_summary_rejects_batch_that_does_not_fit() -> None:
    with pytest.raises(ValueError, match="needs .* GB"):
        rl.summary("llama-3-8b", "h100-sxm", "bf16", prompt_tokens=8000, batch=512)


# ---- the command line ---------------------------------------------------------------------

def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "utils.roofline", *args],
                          capture_output=True, text=True)


JSON_KEYS = {"weight_bytes", "ridge_flop_per_byte", "prefill_flop_per_byte",
             "decode_flop_per_byte", "prefill_seconds", "decode_step_seconds",
             "decode_tokens_per_second", "prefill_equivalent_decode_steps",
             "prefill_tokens_per_decode_step", "kv_cache_bytes_per_token",
             "critical_batch_size", "max_batch_by_memory", "bound"}


def test_cli_json_has_documented_keys() -> None:
    p = run_cli("--model", "llama-3-8b", "--hardware", "h100-sxm", "--dtype", "bf16",
                "--prompt-tokens", "2000", "--batch", "1", "--context", "0", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert JSON_KEYS <= set(r)
    assert r["bound"] == {"prefill": "compute", "decode": "memory"}
    assert math.isclose(r["prefill_equivalent_decode_steps"], 7, rel_tol=0.05)


def test_cli_table_and_raw_overrides() -> None:
    p = run_cli("--params", "7e9", "--peak-tflops", "1000", "--bandwidth-tbs", "3.3")
    assert p.returncode == 0, p.stderr
    assert "14 GB" in p.stdout and "303 FLOP/byte" in p.stdout and "memory-bound" in p.stdout


@pytest.mark.parametrize("args, match", [
    (["--model", "llama-9b"], "unknown model"),
    (["--hardware", "h10"], "did you mean"),
    (["--hardware", "t4", "--dtype", "bf16"], "no bf16"),
    (["--prompt-tokens", "0"], "prompt_tokens must be positive"),
    (["--batch", "4096", "--prompt-tokens", "8000"], "needs"),
    (["--peak-tflops", "1000"], "both"),
])
def test_cli_bad_input_exits_2_with_one_line(args: list[str], match: str) -> None:
    p = run_cli(*args)
    assert p.returncode == 2
    assert match in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_every_model_and_gpu_combination_summarises() -> None:
    for m in MODELS:
        for h in HARDWARE:
            dtype = "fp16"
            try:
                r = rl.summary(m, h, dtype, prompt_tokens=100)
            except ValueError as err:
                assert "needs" in str(err)  # only "does not fit" is acceptable
                continue
            assert r["decode_step_seconds"] > 0 and r["bound"]["decode"] == "memory"

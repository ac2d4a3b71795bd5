"""Each chapter's central claim, checked on `utils` against hand calculations.

Chapter 4 (KV cache), 5 (arithmetic intensity and the roofline), 6 (batching). The napkin-math
claims are exact; the few measured ones (the real model on this machine) compare two runs of the
same process, interleaved, and use generous margins, because the CPU is shared and noisy.
"""

from __future__ import annotations

import math

import pytest
import torch

from utils import roofline as rl
from utils.hardware import Hardware
from utils.models import dense_model, get_model

H100 = "h100-sxm"
H100_BF16_PEAK = 989.4e12  # FLOP/s, dense, NVIDIA H100 SXM datasheet
H100_BANDWIDTH = 3.35e12  # bytes/s


def llama3_8b_params_by_hand() -> int:
    """Llama-3-8B: 32 layers, d_model 4096, 32 query / 8 KV heads of 128, MLP 14336, vocab
    128256, untied embeddings."""
    d, kv, ff, vocab, layers = 4096, 8 * 128, 14336, 128256, 32
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d  # q, o, k, v, MLP, two norms
    return 2 * vocab * d + layers * per_layer + d  # embeddings, output, final norm


# ---- the real model, loaded once ---------------------------------------------------------------


@pytest.fixture(scope="module")
def course_model():
    from utils import load_model

    torch.manual_seed(0)
    model, tokenizer = load_model(device="cpu", dtype="fp32")
    return model, tokenizer


# ---- chapter 4: the KV cache -------------------------------------------------------------------


def test_cache_on_and_off_generate_the_same_tokens(course_model):
    from utils.generate import generate, generate_without_cache

    model, tokenizer = course_model
    prompt = tokenizer.encode("The history of the printing press begins")
    cached = generate(model, tokenizer, prompt, max_new_tokens=12, stop_ids=[])
    assert len(cached.token_ids) == 12
    assert cached.token_ids == generate_without_cache(model, prompt, 12)[0]


@torch.no_grad()
def test_decode_step_leaves_old_keys_unchanged(course_model):
    model, tokenizer = course_model
    prompt = tokenizer.encode("The capital of France is")
    p = len(prompt)
    model.setup_caches(max_batch_size=1, max_seq_len=32)
    logits = model(torch.tensor([prompt]), torch.arange(p))
    cache = model.layers[3].attention.kv_cache
    before_k, before_v = cache.k_cache[0, :, :p].clone(), cache.v_cache[0, :, :p].clone()
    assert cache.k_cache[0, :, p].abs().sum() == 0  # slot p is still empty (zeros)
    model(logits[:, -1].argmax(-1, keepdim=True), torch.tensor([[p]]))
    assert torch.equal(cache.k_cache[0, :, :p], before_k)
    assert torch.equal(cache.v_cache[0, :, :p], before_v)
    assert cache.k_cache[0, :, p].abs().sum() > 0  # the new token's keys were appended


def test_allocated_cache_matches_the_formula(course_model):
    model, _ = course_model
    model.setup_caches(max_batch_size=2, max_seq_len=48)
    per_token_by_hand = 2 * 30 * 3 * 64 * 4  # K and V, layers, KV heads, head dim, fp32 bytes
    assert rl.kv_cache_bytes_per_token(model.config, "fp32") == per_token_by_hand
    assert model.kv_cache_bytes() == 2 * 48 * per_token_by_hand
    assert tuple(model.layers[0].attention.kv_cache.k_cache.shape) == (2, 3, 48, 64)


def test_kv_bytes_per_token_and_gqa():
    assert rl.kv_cache_bytes_per_token("smollm2-135m", "bf16") == 2 * 30 * 3 * 64 * 2  # 23,040
    assert rl.kv_cache_bytes_per_token("llama-2-7b", "bf16") == 2 * 32 * 32 * 128 * 2  # 512 KiB
    assert rl.kv_cache_bytes_per_token("llama-3-8b", "bf16") == 2 * 32 * 8 * 128 * 2  # 128 KiB
    # grouped-query attention: 8 KV heads instead of 32 -> a 4x smaller cache
    assert rl.kv_cache_bytes_per_token("llama-2-7b") / rl.kv_cache_bytes_per_token("llama-3-8b") == 4


def test_work_without_cache_grows_quadratically():
    """Token-passes: P + N - 1 with the cache, N*P + N(N-1)/2 without; FLOP follow."""
    model, prompt = "smollm2-135m", 10

    def flops(n_new: int, cached: bool) -> float:
        if cached:
            return rl.forward_flops(model, prompt) + sum(
                rl.forward_flops(model, 1, prompt + j) for j in range(n_new - 1))
        return sum(rl.forward_flops(model, prompt + j) for j in range(n_new))

    passes = {n: n * prompt + n * (n - 1) // 2 for n in (100, 200)}
    params = 2 * get_model(model).n_params
    assert flops(100, False) >= params * passes[100]  # attention only adds
    assert flops(200, cached=False) / flops(100, cached=False) > 3.5  # ~4: quadratic
    assert flops(200, cached=True) / flops(100, cached=True) < 2.1  # ~2: linear
    assert flops(200, False) / flops(200, True) > 90


def test_tpot_grows_with_context_by_the_cache_bytes():
    extra = (rl.decode_step_seconds("llama-3-8b", H100, "bf16", context=8192)
             - rl.decode_step_seconds("llama-3-8b", H100, "bf16", context=0))
    assert extra == pytest.approx(8192 * 131072 / H100_BANDWIDTH, rel=1e-9)


def test_sequences_that_fit_beside_the_weights():
    weights = 2 * llama3_8b_params_by_hand()
    per_seq = 4096 * 131072
    assert rl.max_batch_by_memory("llama-3-8b", H100, "bf16", 4096) == (80e9 - weights) // per_seq
    assert rl.max_batch_by_memory("llama-3-8b", H100, "bf16", 4096) == 119
    # Llama-2-7B's four times larger cache: about four times fewer sequences
    assert rl.max_batch_by_memory("llama-2-7b", H100, "bf16", 4096) == 30
    # a T4 cannot even hold Llama-3-8B's fp16 weights (16.06 GB > 16 GB)
    assert weights > 16e9
    assert rl.max_batch_by_memory("llama-3-8b", "t4", "fp16", 4096) == 0
    # double the context, half the sequences
    assert rl.max_batch_by_memory("llama-3-8b", H100, "bf16", 8192) == 119 // 2


# ---- chapter 5: arithmetic intensity and the roofline ------------------------------------------


def test_ridge_point_of_an_h100():
    ridge = rl.ridge_flop_per_byte(H100, "bf16")
    assert ridge == pytest.approx(H100_BF16_PEAK / H100_BANDWIDTH)
    assert 290 < ridge < 300  # "about 300 FLOP/byte"


@pytest.mark.parametrize("n", [1, 2, 8, 32, 64])
def test_matmul_intensity_is_about_the_tokens_sharing_the_weights(n):
    k = m = 4096
    by_hand = 2 * n * k * m / (2 * (n * k + k * m + n * m))
    got = rl.arithmetic_intensity(rl.matmul_flops(n, k, m), rl.matmul_bytes(n, k, m, "bf16"))
    assert got == pytest.approx(by_hand)
    assert got == pytest.approx(n, rel=0.04)  # 16-bit: intensity ~ n while n << k, m
    fp32 = rl.arithmetic_intensity(rl.matmul_flops(n, k, m), rl.matmul_bytes(n, k, m, "fp32"))
    assert fp32 == pytest.approx(got / 2)  # 4 bytes per number: half the intensity


def test_prefill_near_p_and_decode_near_one_flop_per_byte():
    seven_b = dense_model(7e9)
    assert rl.prefill_cost(seven_b, H100, "bf16", 1000).flop_per_byte == pytest.approx(1000)
    assert rl.decode_cost(seven_b, H100, "bf16").flop_per_byte == pytest.approx(1.0)
    # with the real shape, attention and the KV cache move the points only a little
    assert rl.decode_cost("llama-3-8b", H100, "bf16").flop_per_byte == pytest.approx(1, rel=0.01)
    pre = rl.prefill_cost("llama-3-8b", H100, "bf16", 2000)
    assert pre.bound == "compute" and 2000 <= pre.flop_per_byte < 2100


def test_worked_examples_of_the_source_articles():
    params = llama3_8b_params_by_hand()
    decode_s = (2 * params + 131072) / H100_BANDWIDTH  # weights + the new token's keys/values
    assert rl.decode_step_seconds("llama-3-8b", H100, "bf16") == pytest.approx(decode_s, rel=1e-6)
    assert 4.5e-3 < decode_s < 5.0e-3  # "about 5 ms"
    # prompt tokens per decode step = the ridge point (2N bytes and 2N FLOP per token)
    assert rl.prefill_tokens_per_decode_step("llama-3-8b", H100) == pytest.approx(
        H100_BF16_PEAK / H100_BANDWIDTH)
    steps = rl.prefill_equivalent_decode_steps("llama-3-8b", H100, "bf16", 2000)
    assert 6.5 < steps < 7.5  # "a 2,000-token prefill costs about 7 decode steps"
    seven_b = dense_model(7e9)
    assert rl.weight_bytes(seven_b, "bf16") == 14e9
    assert rl.decode_tokens_per_second(seven_b, H100, "bf16") == pytest.approx(3.35e12 / 14e9)


def test_precision_moves_decode_but_not_prefill():
    def decode(w):
        return rl.decode_cost("llama-3-8b", H100, w, compute_dtype="bf16")

    def prefill(w):
        return rl.prefill_cost("llama-3-8b", H100, w, 2000, compute_dtype="bf16")

    assert decode("int8").flop_per_byte == pytest.approx(2 * decode("bf16").flop_per_byte, rel=1e-3)
    assert decode("int4").flop_per_byte == pytest.approx(4 * decode("bf16").flop_per_byte, rel=1e-3)
    assert decode("int4").seconds == pytest.approx(decode("bf16").seconds / 4, rel=1e-3)
    assert prefill("int4").seconds == pytest.approx(prefill("bf16").seconds)  # compute-bound
    # fp32 math: a roof 989.4 / 67 times lower, so prefill is that much slower
    fp32 = rl.prefill_cost("llama-3-8b", H100, "fp32", 2000)
    assert fp32.seconds / prefill("bf16").seconds == pytest.approx(989.4 / 67, rel=1e-3)


def test_request_timeline_adds_up():
    prompt, output = 2000, 50
    t = rl.request_timeline("llama-3-8b", H100, "bf16", prompt, output)
    assert t.ttft_seconds == rl.prefill_seconds("llama-3-8b", H100, "bf16", prompt)
    assert len(t.decode) == output - 1
    by_hand = sum(rl.decode_step_seconds("llama-3-8b", H100, "bf16", context=prompt + j)
                  for j in range(output - 1))
    assert t.decode_seconds == pytest.approx(by_hand)
    assert t.total_seconds == pytest.approx(t.ttft_seconds + by_hand)
    assert t.mean_tpot_seconds == pytest.approx(by_hand / (output - 1))
    assert t.prefill.bound == "compute" and {s.bound for s in t.decode} == {"memory"}
    # each step reads a cache one token longer
    assert all(a.seconds < b.seconds for a, b in zip(t.decode, t.decode[1:]))
    assert rl.request_timeline("llama-3-8b", H100, "bf16", prompt, 1).decode == ()
    with pytest.raises(ValueError, match="output_tokens"):
        rl.request_timeline("llama-3-8b", H100, "bf16", prompt, 0)


def test_request_explorer_builds_and_draws():
    import matplotlib

    matplotlib.use("Agg")
    from utils.widgets import describe_timeline, math_dtype, plot_request_timeline, request_explorer

    assert math_dtype("t4", "int4") == "fp16"  # a T4 has no bf16
    assert math_dtype(H100, "int4") == "bf16"
    assert math_dtype(H100, "int8") == "int8"
    t = rl.request_timeline("llama-3-8b", H100, "bf16", 2000, 200)
    text = describe_timeline(t)
    assert "compute-bound" in text and "memory-bound" in text and "199 steps" in text
    fig = plot_request_timeline(t)
    assert len(fig.axes) == 2 and "3%" in fig.get_suptitle()
    widget = request_explorer(model="smollm2-135m", hardware="t4", dtype="bf16")
    assert len(widget.children) == 3


# ---- chapter 6: batching -----------------------------------------------------------------------


def test_batched_decode_is_nearly_free_below_the_critical_batch():
    one = rl.decode_step_seconds("llama-3-8b", H100, "bf16", batch=1)
    many = rl.decode_step_seconds("llama-3-8b", H100, "bf16", batch=256)
    assert many / one < 1.01  # TPOT flat
    throughput = 256 / many
    assert throughput / (1 / one) > 250  # throughput ~ linear in the batch


def test_critical_batch_size_by_hand():
    params = llama3_8b_params_by_hand()
    weights_s = 2 * params / H100_BANDWIDTH
    # per sequence at context 0: 2N FLOP plus attention over its own token, 1 token of KV bytes
    attn = 4 * 32 * 4096 * 1
    margin = (2 * params + attn) / H100_BF16_PEAK - 131072 / H100_BANDWIDTH
    assert rl.critical_batch_size("llama-3-8b", H100, "bf16") == math.ceil(weights_s / margin)
    assert 280 < rl.critical_batch_size("llama-3-8b", H100, "bf16") < 310  # ~ the ridge point
    # beyond ~415 tokens of context the cache grows faster than the work: never compute-bound
    with pytest.raises(ValueError, match="never turns compute-bound"):
        rl.critical_batch_size("llama-3-8b", H100, "bf16", context=1000)


def test_long_context_caps_the_gain_from_batching():
    def gain(context: int, batch: int = 64) -> float:
        one = rl.decode_step_seconds("llama-3-8b", H100, "bf16", 1, context)
        return batch * one / rl.decode_step_seconds("llama-3-8b", H100, "bf16", batch, context)

    assert gain(0) == pytest.approx(64, rel=0.01)
    weights, kv = 2 * llama3_8b_params_by_hand(), 4097 * 131072  # context + the new token
    assert gain(4096) == pytest.approx(64 * (weights + kv) / (weights + 64 * kv), rel=1e-6)
    assert gain(4096) < 25


def test_continuous_batching_starts_waiting_requests_sooner():
    from utils.serving import ContinuousBatching, StaticBatching, simulate, workload_from_trace

    requests = workload_from_trace([0, 0, 0, 0, 0.03, 0.06, 0.09, 0.12], [300] * 8,
                                   [12, 60, 25, 40, 30, 20, 45, 15])
    static = simulate(requests, StaticBatching(batch_size=4), model="llama-3-8b", hw=H100)
    continuous = simulate(requests, ContinuousBatching(max_batch=4), model="llama-3-8b", hw=H100)
    assert continuous.ttft_s.mean() < static.ttft_s.mean()
    assert continuous.finish_s.max() < static.finish_s.max()
    # the first four start together either way
    assert continuous.first_token_s[:4] == pytest.approx(static.first_token_s[:4])


def test_a_long_prefill_stalls_everyone_in_the_step():
    decoding = [(1, 1000)] * 8
    alone = rl.step_cost("llama-3-8b", H100, "bf16", decoding)
    mixed = rl.step_cost("llama-3-8b", H100, "bf16", decoding + [(2000, 0)])
    chunk = rl.step_cost("llama-3-8b", H100, "bf16", decoding + [(512, 0)])
    assert alone.bound == "memory" and mixed.bound == "compute"
    assert mixed.seconds / alone.seconds > 5
    assert chunk.seconds < mixed.seconds / 3


def test_cpu_roofline_predicts_batching_gain():
    """On a CPU-like device in fp32 (ridge ~5 FLOP/byte), decode at batch 8 is still memory-bound,
    so the roofline predicts ~8x the tokens/s of batch 1."""
    cpu = Hardware("cpu-like", {"fp32": 50e9}, bandwidth=11e9, memory_bytes=24e9, kind="given")
    one = rl.decode_step_seconds("smollm2-135m", cpu, "fp32", 1, 32)
    eight = rl.decode_step_seconds("smollm2-135m", cpu, "fp32", 8, 32)
    assert 8 * one / eight > 7.5
    assert rl.critical_batch_size("smollm2-135m", cpu, "fp32", 32) > 8


def test_batch_8_decodes_several_times_more_tokens_per_second(course_model):
    """Measured on this machine's CPU: batch 1 and batch 8 decode steps, interleaved; each side's
    fastest step (the one least disturbed by other programs) is its cost. The 2-core build
    machine gives about 3x (its BLAS is slow on 2-8-row products, see chapter 6's lab); a decode
    loop that ran the sequences one by one would give 1x."""
    from utils.profile import time_decode

    model, _ = course_model
    one, eight = [], []
    for _ in range(4):
        one += time_decode(model, batch=1, context=32, steps=3, warmup=1)
        eight += time_decode(model, batch=8, context=32, steps=3, warmup=1)
    gain = (8 / min(eight)) / (1 / min(one))
    assert gain > 2, f"batch 8 gave only {gain:.1f}x the tokens/s of batch 1"

"""The serving simulator against hand calculations and the roofline (utils.roofline)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from utils.hardware import Hardware, get_hardware
from utils.models import get_model
from utils.roofline import (
    decode_step_seconds,
    kv_cache_bytes_per_token,
    prefill_seconds,
    step_cost,
    weight_bytes,
)
from utils.serving import (
    SLO,
    ChunkedPrefill,
    ContinuousBatching,
    Disaggregated,
    Request,
    StaticBatching,
    make_workload,
    mixed_lengths,
    poisson_arrivals,
    simulate,
    step_seconds,
    sweep_load,
    workload_from_trace,
)

MODEL, HW, DTYPE = "llama-3-8b", "h100-sxm", "bf16"
ALL_POLICIES = [StaticBatching(8), ContinuousBatching(), ChunkedPrefill(256), Disaggregated()]


# ---- the cost of a step is the roofline's ------------------------------------------------

@pytest.mark.parametrize("model, hw", [("llama-3-8b", "h100-sxm"), ("llama-2-7b", "a100-80gb"),
                                       ("smollm2-135m", "t4"), ("llama-3-70b", "h200")])
def test_step_price_equals_roofline_step_cost_exactly(model: str, hw: str) -> None:
    rng = np.random.default_rng(0)
    dtype = "fp16" if hw == "t4" else "bf16"
    for _ in range(50):
        chunks = [(int(n), int(c)) for n, c in zip(rng.integers(1, 600, rng.integers(1, 40)),
                                                   rng.integers(0, 6000, 40))]
        chunks += [(1, int(c)) for c in rng.integers(0, 8000, rng.integers(0, 200))]
        assert step_seconds(chunks, model, hw, dtype) == step_cost(model, hw, dtype, chunks).seconds


def test_step_overhead_is_added_once_per_step() -> None:
    chunks = [(1, 100)] * 7
    base = step_cost(MODEL, HW, DTYPE, chunks).seconds
    assert step_seconds(chunks, MODEL, HW, DTYPE, step_overhead_s=0.002) == pytest.approx(
        base + 0.002, rel=1e-15)


# ---- one request: the simulator reproduces the napkin formulas ---------------------------

@pytest.mark.parametrize("policy", [ContinuousBatching(), ChunkedPrefill(4096), StaticBatching(1)],
                         ids=lambda p: p.label)
def test_single_request_matches_roofline_exactly(policy) -> None:
    prompt, output = 1000, 50
    r = simulate([Request(0, 0.0, prompt, output)], policy, model=MODEL, hw=HW, dtype=DTYPE)
    ttft = prefill_seconds(MODEL, HW, DTYPE, prompt)
    assert r.ttft_s[0] == ttft
    # token k (k = 2..output) comes from a decode step over a context of prompt + k - 2 tokens;
    # replay the simulator's clock with the roofline's own functions
    clock, gaps = ttft, []
    for k in range(2, output + 1):
        step = decode_step_seconds(MODEL, HW, DTYPE, batch=1, context=prompt + k - 2)
        gaps.append(step)
        clock += step
    assert r.finish_s[0] == clock
    assert r.tpot_s[0] == (clock - ttft) / (output - 1)
    np.testing.assert_allclose(r.itl_s, gaps, rtol=1e-12)
    # decode is memory-bound here: the k-th decode step reads all weights, reads prompt + k - 1
    # cached tokens and writes one, so its gap is (weights + (prompt + k) KV entries) / bandwidth
    h = get_hardware(HW)
    expected = [(weight_bytes(MODEL, DTYPE) + (prompt + k) * kv_cache_bytes_per_token(
        MODEL, DTYPE)) / h.bandwidth for k in range(1, output)]
    np.testing.assert_allclose(r.itl_s, expected, rtol=1e-12)


def test_single_request_chunked_prefill_pays_for_chunks_against_the_growing_cache() -> None:
    prompt, budget = 1000, 256
    r = simulate([Request(0, 0.0, prompt, 2)], ChunkedPrefill(budget), model=MODEL, hw=HW)
    done, expected = 0, 0.0
    while done < prompt:
        c = min(budget, prompt - done)
        expected += step_cost(MODEL, HW, DTYPE, [(c, done)]).seconds
        done += c
    assert r.ttft_s[0] == pytest.approx(expected, rel=1e-13)
    assert r.ttft_s[0] > prefill_seconds(MODEL, HW, DTYPE, prompt)  # 4 steps read the weights 4x


def test_single_request_disaggregated_pays_kv_transfer_once() -> None:
    prompt, output, bw, latency = 2000, 10, 25e9, 1e-4
    r = simulate([Request(0, 0.0, prompt, output)],
                 Disaggregated(link_bytes_per_s=bw, link_latency_s=latency), model=MODEL, hw=HW)
    assert r.ttft_s[0] == prefill_seconds(MODEL, HW, DTYPE, prompt)
    transfer = latency + prompt * kv_cache_bytes_per_token(MODEL, DTYPE) / bw
    first_gap = transfer + decode_step_seconds(MODEL, HW, DTYPE, context=prompt)
    assert r.itl_s[0] == pytest.approx(first_gap, rel=1e-12)
    later = [decode_step_seconds(MODEL, HW, DTYPE, context=prompt + k) for k in range(1, output - 1)]
    np.testing.assert_allclose(r.itl_s[1:], later, rtol=1e-12)


def test_overhead_and_measured_hardware_are_used() -> None:
    measured = Hardware("my-gpu", {"bf16": 400e12}, bandwidth=2.5e12, memory_bytes=80e9,
                        kind="measured")
    r = simulate([Request(0, 0.0, 500, 3)], ContinuousBatching(), model=MODEL, hw=measured,
                 step_overhead_s=0.001)
    expected = step_cost(MODEL, measured, DTYPE, [(500, 0)]).seconds + 0.001
    assert r.ttft_s[0] == pytest.approx(expected, rel=1e-15)
    assert r.itl_s[0] == pytest.approx(
        decode_step_seconds(MODEL, measured, DTYPE, context=500) + 0.001, rel=1e-12)


def test_one_token_answer_has_no_tpot() -> None:
    r = simulate([Request(0, 0.0, 100, 1)], ContinuousBatching())
    assert math.isnan(r.tpot_s[0]) and r.itl_s.size == 0
    assert r.finish_s[0] == r.first_token_s[0]


# ---- every step, replayed independently --------------------------------------------------

def replay(result, requests, overhead: float = 0.0) -> dict[int, int]:
    """Rebuild every recorded step's (new_tokens, context) chunks from the record alone and check
    its duration with roofline.step_cost; return the decode steps seen per request."""
    by_id = {r.id: r for r in requests}
    prefilled: dict[int, int] = defaultdict(int)
    decoded: dict[int, int] = defaultdict(int)
    for engine in {s.engine for s in result.steps}:
        for s in sorted((s for s in result.steps if s.engine == engine), key=lambda s: s.start_s):
            chunks = [(1, by_id[i].prompt_tokens + decoded[i]) for i in s.decode]
            chunks += [(c, prefilled[i]) for i, c in s.prefill]
            expected = step_cost(MODEL, HW, DTYPE, chunks).seconds + overhead
            assert s.end_s - s.start_s == pytest.approx(expected, rel=1e-9, abs=1e-12)
            for i in s.decode:
                decoded[i] += 1
            for i, c in s.prefill:
                prefilled[i] += c
    for r in requests:
        assert prefilled[r.id] == r.prompt_tokens
    return decoded


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.label)
def test_conservation_and_step_replay(policy) -> None:
    reqs = make_workload(120, 6.0, mixed_lengths((50, 600), (3000, 6000), 0.1), (1, 200), seed=3)
    r = simulate(reqs, policy, record_steps=True, step_overhead_s=2e-4)
    assert not r.rejected.any()
    assert np.all(np.isfinite(r.finish_s))
    s = r.summary()
    assert s["n_completed"] == len(reqs)
    assert s["output_tokens"] == sum(q.output_tokens for q in reqs)
    decoded = replay(r, reqs, overhead=2e-4)
    for i, q in enumerate(reqs):
        assert decoded[q.id] == q.output_tokens - 1
        times = r.token_times(i)
        assert len(times) == q.output_tokens
        assert times[0] == r.first_token_s[i] and times[-1] == r.finish_s[i]
        assert np.all(np.diff(times) > 0)
        assert r.first_token_s[i] > q.arrival_s
    assert r.itl_s.size == sum(q.output_tokens - 1 for q in reqs)
    # TPOT is the mean of a request's gaps
    tpot = r.tpot_s
    for i in range(0, len(reqs), 7):
        if reqs[i].output_tokens > 1:
            assert tpot[i] == pytest.approx(np.diff(r.token_times(i)).mean(), rel=1e-9)


def test_static_batches_are_closed_and_chunked_steps_keep_the_budget() -> None:
    reqs = make_workload(60, 20.0, (100, 900), (5, 80), seed=4)
    r = simulate(reqs, StaticBatching(4), record_steps=True)
    batch: set[int] = set()
    for s in r.steps:
        if s.prefill:
            assert not s.decode and len(s.prefill) <= 4
            assert all(r.finish_s[i] <= s.start_s for i in batch), "nobody joins a running batch"
            batch = {i for i, _ in s.prefill}
        else:
            assert set(s.decode) <= batch
    r = simulate(reqs, ChunkedPrefill(128), record_steps=True)
    for s in r.steps:
        assert len(s.decode) + sum(c for _, c in s.prefill) <= max(128, len(s.decode))


def test_static_batching_waits_for_a_full_batch_or_its_timeout() -> None:
    prefill_two = step_cost(MODEL, HW, DTYPE, [(100, 0)] * 2).seconds
    two = simulate([Request(i, 0.0, 100, 3) for i in range(2)], StaticBatching(4, max_wait_s=0.5))
    assert two.first_token_s.tolist() == [0.5 + prefill_two] * 2
    four = simulate([Request(i, 0.01 * i, 100, 3) for i in range(4)],
                    StaticBatching(4, max_wait_s=0.5))
    prefill_four = step_cost(MODEL, HW, DTYPE, [(100, 0)] * 4).seconds
    assert four.first_token_s.tolist() == [0.03 + prefill_four] * 4  # full when the 4th arrives


def test_memory_admission_queues_requests_that_do_not_fit_yet() -> None:
    # room for exactly 3 requests of 1,000 + 1,000 tokens beside the weights
    kv = kv_cache_bytes_per_token(MODEL, DTYPE)
    memory = weight_bytes(MODEL, DTYPE) + 3.5 * 2000 * kv
    small = Hardware("small", {"bf16": 989.4e12}, bandwidth=3.35e12, memory_bytes=memory)
    reqs = [Request(i, 0.0, 1000, 1000) for i in range(7)]
    for policy in (ContinuousBatching(), ChunkedPrefill(512), StaticBatching(8)):
        r = simulate(reqs, policy, hw=small, memory_fraction=1.0, record_steps=True)
        assert max(len(s.decode) + len(s.prefill) for s in r.steps) == 3
        assert np.all(np.isfinite(r.finish_s))
    # unconstrained, all seven run together
    r = simulate(reqs, ContinuousBatching(), record_steps=True)
    assert max(len(s.decode) + len(s.prefill) for s in r.steps) == 7


def test_oversized_requests_raise_or_are_reported() -> None:
    kv = kv_cache_bytes_per_token(MODEL, DTYPE)
    small = Hardware("small", {"bf16": 989.4e12}, bandwidth=3.35e12,
                     memory_bytes=weight_bytes(MODEL, DTYPE) + 5000 * kv)
    reqs = [Request(0, 0.0, 100, 100), Request(1, 0.1, 6000, 10), Request(2, 0.2, 200, 50)]
    with pytest.raises(ValueError, match=r"request 1 needs 6000 \+ 10 tokens.*room for 5000"):
        simulate(reqs, ContinuousBatching(), hw=small, memory_fraction=1.0)
    r = simulate(reqs, ContinuousBatching(), hw=small, memory_fraction=1.0, reject_oversized=True)
    assert r.rejected_ids == [1]
    s = r.summary()
    assert (s["n_completed"], s["n_rejected"], s["output_tokens"]) == (2, 1, 150)
    with pytest.raises(ValueError, match="handles at most 4096 tokens"):
        simulate([Request(0, 0.0, 4000, 200)], ContinuousBatching(), model="llama-2-7b")


# ---- metrics -----------------------------------------------------------------------------

def test_summary_uses_vllm_definitions() -> None:
    reqs = make_workload(80, 10.0, (100, 2000), (2, 300), seed=5)
    r = simulate(reqs, ContinuousBatching())
    s = r.summary(SLO(ttft_s=0.03, tpot_s=0.006))
    arrival = np.array([q.arrival_s for q in reqs])
    out = np.array([q.output_tokens for q in reqs])
    ttft = r.first_token_s - arrival
    e2e = r.finish_s - arrival
    tpot = (e2e - ttft) / (out - 1)
    duration = r.finish_s.max() - arrival.min()
    assert s["ttft_mean_s"] == pytest.approx(ttft.mean())
    assert s["ttft_p99_s"] == pytest.approx(np.percentile(ttft, 99))
    assert s["tpot_p50_s"] == pytest.approx(np.median(tpot))
    assert s["e2e_p90_s"] == pytest.approx(np.percentile(e2e, 90))
    assert s["throughput_tokens_per_s"] == pytest.approx(out.sum() / duration)
    good = (ttft <= 0.03) & (tpot <= 0.006)
    assert 0 < good.sum() < len(reqs)  # the targets bite on this workload
    assert s["goodput_req_per_s"] == pytest.approx(good.sum() / duration)
    # ITL: every gap; its mean weights long answers more than TPOT's mean does
    gaps = np.concatenate([np.diff(r.token_times(i)) for i in range(len(reqs))])
    assert s["itl_p99_s"] == pytest.approx(np.percentile(gaps, 99))
    assert s["itl_mean_s"] == pytest.approx((e2e - ttft).sum() / (out - 1).sum())


def test_poisson_arrivals_are_seeded_with_the_right_rate() -> None:
    a = poisson_arrivals(20_000, 8.0, seed=1)
    assert np.all(np.diff(a) >= 0) and a[0] > 0
    assert np.diff(a).mean() == pytest.approx(1 / 8.0, rel=0.03)
    assert np.array_equal(a, poisson_arrivals(20_000, 8.0, seed=1))
    assert not np.array_equal(a, poisson_arrivals(20_000, 8.0, seed=2))
    assert np.all(poisson_arrivals(5, math.inf) == 0)
    w = make_workload(1000, 5.0, (10, 20), mixed_lengths(8, 100, 0.25), seed=0)
    assert {q.prompt_tokens for q in w} == set(range(10, 21))
    assert 0.2 < np.mean([q.output_tokens == 100 for q in w]) < 0.3
    trace = workload_from_trace([0.0, 0.5], [10, 20], [3, 4])
    assert trace[1] == Request(1, 0.5, 20, 4)


# ---- known results on fixed seeded workloads ---------------------------------------------

CHAT = make_workload(200, 4.0, (200, 1000), (50, 300), seed=0)
WITH_LONG_PROMPTS = make_workload(300, 4.0, mixed_lengths((100, 400), (6000, 8000), 0.1),
                                  (100, 300), seed=1)


def test_continuous_beats_static_on_mean_ttft_at_moderate_load() -> None:
    static = simulate(CHAT, StaticBatching(16)).summary()
    continuous = simulate(CHAT, ContinuousBatching()).summary()
    assert continuous["ttft_mean_s"] < static["ttft_mean_s"] / 10
    # moderate load: both keep up, so they deliver the same tokens per second
    assert continuous["throughput_tokens_per_s"] == pytest.approx(
        static["throughput_tokens_per_s"], rel=0.05)


def test_chunked_prefill_lowers_p99_tpot_when_long_prompts_arrive() -> None:
    unchunked = simulate(WITH_LONG_PROMPTS, ContinuousBatching()).summary()
    for budget in (256, 512):
        chunked = simulate(WITH_LONG_PROMPTS, ChunkedPrefill(budget)).summary()
        assert chunked["tpot_p99_s"] < unchunked["tpot_p99_s"]
        assert chunked["itl_max_s"] < unchunked["itl_max_s"] / 5  # no step holds a whole prompt


def test_disaggregation_removes_prefill_interference_at_the_cost_of_kv_transfer() -> None:
    colocated = simulate(WITH_LONG_PROMPTS, ContinuousBatching(), replicas=2).summary()
    fast = simulate(WITH_LONG_PROMPTS, Disaggregated(link_bytes_per_s=50e9), record_steps=True)
    slow = simulate(WITH_LONG_PROMPTS, Disaggregated(link_bytes_per_s=2e9))
    assert all(not s.prefill for s in fast.steps if s.engine.startswith("decode"))
    assert all(not s.decode for s in fast.steps if s.engine.startswith("prefill"))
    assert fast.summary()["tpot_p99_s"] < colocated["tpot_p99_s"]
    # every gap after the first is a pure decode step; the first also carries the KV cache
    kv = kv_cache_bytes_per_token(MODEL, DTYPE)
    for i, q in enumerate(WITH_LONG_PROMPTS):
        gaps = np.diff(fast.token_times(i))
        assert gaps[0] >= q.prompt_tokens * kv / 50e9
        assert gaps[1:].max(initial=0) < 2 * decode_step_seconds(MODEL, HW, DTYPE)
    assert slow.summary()["tpot_mean_s"] > fast.summary()["tpot_mean_s"]
    assert slow.ttft_s == pytest.approx(fast.ttft_s)  # the link does not touch the first token


def test_sweep_load_latency_grows_with_load() -> None:
    rows = sweep_load([ContinuousBatching()], [2.0, 20.0],
                      lambda rate: make_workload(150, rate, 1000, 100, seed=0))
    assert [r["rate_per_s"] for r in rows] == [2.0, 20.0]
    assert rows[1]["ttft_p99_s"] > rows[0]["ttft_p99_s"]
    assert rows[1]["tpot_p50_s"] > rows[0]["tpot_p50_s"]


# ---- bad input: a clear error before simulating ------------------------------------------

@pytest.mark.parametrize("make, match", [
    (lambda: poisson_arrivals(10, -1.0), "arrival rate must be a positive"),
    (lambda: poisson_arrivals(10, 0.0), "arrival rate must be a positive"),
    (lambda: make_workload(10, float("nan"), 10, 10), "arrival rate must be a positive"),
    (lambda: make_workload(10, 1.0, 0, 10), "prompt_tokens: lengths must be at least 1"),
    (lambda: make_workload(10, 1.0, 10, [1, 2]), "output_tokens: need 10 lengths"),
    (lambda: Disaggregated(link_bytes_per_s=0), "link_bytes_per_s must be a positive bandwidth"),
    (lambda: Disaggregated(link_bytes_per_s=-5e9), "link_bytes_per_s must be a positive"),
    (lambda: ChunkedPrefill(token_budget=0), "token_budget must be a positive integer"),
    (lambda: StaticBatching(batch_size=2, max_wait_s=-1), "max_wait_s must be >= 0"),
    (lambda: SLO(ttft_s=-0.1), "SLO ttft_s must be a positive"),
    (lambda: simulate([], ContinuousBatching()), "no requests"),
    (lambda: simulate([Request(0, -1.0, 5, 5)], ContinuousBatching()), "arrival_s must be"),
    (lambda: simulate([Request(0, 0.0, 5, 0)], ContinuousBatching()), "output_tokens must be"),
    (lambda: simulate([Request(0, 0, 5, 5), Request(0, 1, 5, 5)], ContinuousBatching()),
     "appears twice"),
    (lambda: simulate([Request(0, 0.0, 5, 5)], "fcfs"), "unknown policy"),
    (lambda: simulate([Request(0, 0.0, 5, 5)], ContinuousBatching(), step_overhead_s=-1e-3),
     "step_overhead_s must be"),
    (lambda: simulate([Request(0, 0.0, 5, 5)], ContinuousBatching(), model="llama-3-70b"),
     "needs 141.1 GB of weights"),
    (lambda: simulate([Request(0, 0.0, 5, 5)], ContinuousBatching(), hw="t4", dtype="bf16"),
     "t4 has no bf16 peak"),
    (lambda: simulate([Request(0, 0.0, 5, 5)], ContinuousBatching(), hw="h10"),
     "unknown hardware"),
])
def test_bad_input_is_a_clear_value_error(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_input_is_caught_before_any_step(monkeypatch) -> None:
    from utils import serving

    def boom(*args, **kwargs):
        raise AssertionError("simulated a step before validating")

    monkeypatch.setattr(serving._Simulation, "run", boom)
    kv = kv_cache_bytes_per_token(MODEL, DTYPE)
    small = Hardware("small", {"bf16": 1e15}, bandwidth=3e12,
                     memory_bytes=weight_bytes(MODEL, DTYPE) + 100 * kv)
    with pytest.raises(ValueError, match="can never fit"):
        simulate([Request(0, 0.0, 5, 5), Request(1, 9.0, 90, 20)], ContinuousBatching(),
                 hw=small, memory_fraction=1.0)


def test_model_by_shape_object_and_name_agree() -> None:
    reqs = make_workload(30, 5.0, (100, 500), (10, 50), seed=2)
    a = simulate(reqs, ChunkedPrefill(256), model="llama-3-8b")
    b = simulate(reqs, ChunkedPrefill(256), model=get_model("llama-3-8b"))
    assert np.array_equal(a.finish_s, b.finish_s)


# ---- plots -------------------------------------------------------------------------------

def test_plots_label_their_axes_and_state_a_finding() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from utils.serving_plots import latency_distributions, latency_vs_load, timeline

    reqs = [Request(i, 0.01 * i, 200, 10) for i in range(4)] + [Request(4, 0.02, 4000, 5)]
    r = simulate(reqs, ContinuousBatching(), record_steps=True)
    ax = timeline(r)
    longest = max(s.end_s - s.start_s for s in r.steps) * 1e3
    assert ax.get_xlabel() == "time (ms)" and f"{longest:.3g} ms" in ax.get_title()
    assert len(ax.get_yticklabels()) == 5
    with pytest.raises(ValueError, match="record_steps=True"):
        timeline(simulate(reqs, ContinuousBatching()))
    results = [simulate(reqs, p) for p in (ContinuousBatching(), ChunkedPrefill(256))]
    axes = latency_distributions(results)
    assert "TTFT (ms)" in axes[0].get_xlabel() and "TPOT (ms)" in axes[1].get_xlabel()
    best = min(results, key=lambda x: x.summary()["tpot_p99_s"]).policy
    assert f"lowest p99 TPOT: {best}" in axes[0].figure._suptitle.get_text()
    rows = sweep_load([ContinuousBatching(), ChunkedPrefill(256)], [2.0, 8.0],
                      lambda rate: make_workload(40, rate, (100, 3000), 20, seed=0),
                      slo=SLO(ttft_s=0.1))
    axes = latency_vs_load(rows, metrics=("ttft_p99_s", "goodput_req_per_s_per_gpu"))
    assert axes[0].get_xlabel() == "arrival rate (requests/s)"
    assert axes[0].get_ylabel().startswith("p99 TTFT (ms")
    assert axes[1].get_ylabel().startswith("goodput per GPU")
    assert "At 8 requests/s" in axes[0].figure._suptitle.get_text()
    plt.close("all")

"""The numpy decode step computes what the PyTorch model computes: the same logits, the same
cache entries, the same greedy tokens; and it refuses what it cannot run."""

import re
import warnings

import numpy as np
import pytest
import torch

from utils.cpu_decode import NumpyDecodeStep, rms_norm
from utils.generate import generate, generate_batch, make_decode_step
from utils.llama import rows_times_weight
from utils.loading import load_model
from utils.models import ModelShape

# grouped-query attention (4 query heads share 2 KV heads), small enough to run in milliseconds
TINY = ModelShape("tiny-gqa", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48,
                  vocab_size=97, tied_embeddings=True)


def tiny_model(tied: bool = True, seed: int = 0, std: float = 0.5):
    shape = ModelShape(TINY.name, TINY.n_layers, TINY.d_model, TINY.n_heads, TINY.n_kv_heads,
                       TINY.d_ff, TINY.vocab_size, tied_embeddings=tied)
    model, _ = load_model(shape, device="cpu", dtype="fp32", weights="random", seed=seed)
    model.init_random(std=std, seed=seed)  # larger weights than the default: a sharper test
    return model


def test_rms_norm_by_hand():
    x = np.array([[3.0, 4.0]], dtype=np.float32)  # mean of squares (9 + 16) / 2 = 12.5
    out = rms_norm(x, np.array([1.0, 2.0], dtype=np.float32), eps=0.0)
    np.testing.assert_allclose(out, [[3 / 12.5**0.5, 2 * 4 / 12.5**0.5]], rtol=1e-6)
    assert out.dtype == np.float32


@pytest.mark.parametrize("tied", [True, False])
@torch.no_grad()
def test_same_logits_and_cache_as_the_model(tied):
    model = tiny_model(tied)
    model.setup_caches(1, 16)
    prompt = torch.tensor([[5, 17, 3, 88, 41]])
    model(prompt, torch.arange(5))  # prefill writes slots 0..4
    step = NumpyDecodeStep(model)
    token, pos = torch.tensor([[60]]), torch.tensor([[5]])
    got = step(token, pos)
    got_k = [layer.attention.kv_cache.k_cache[0, :, 5].clone() for layer in model.layers]
    got_v = [layer.attention.kv_cache.v_cache[0, :, 5].clone() for layer in model.layers]
    for layer in model.layers:  # wipe slot 5, then let PyTorch write it
        layer.attention.kv_cache.k_cache[:, :, 5] = 0
        layer.attention.kv_cache.v_cache[:, :, 5] = 0
    want = model(token, pos)
    assert got.shape == want.shape == (1, 1, TINY.vocab_size)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for layer, k, v in zip(model.layers, got_k, got_v):
        assert k.abs().sum() > 0  # the step did write the slot
        torch.testing.assert_close(k, layer.attention.kv_cache.k_cache[0, :, 5], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v, layer.attention.kv_cache.v_cache[0, :, 5], rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_rows_at_different_positions_attend_over_their_own_slots():
    model = tiny_model()
    model.setup_caches(2, 16)
    prompts = torch.tensor([[5, 17, 3, 88, 41, 9], [7, 7, 2, 0, 0, 0]])  # row 1: 3 tokens
    model(prompts, torch.arange(6))
    token, pos = torch.tensor([[60], [12]]), torch.tensor([[6], [3]])
    got = NumpyDecodeStep(model)(token, pos)
    want = model(token, pos)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # row 1 attends over slots 0..3 only: changing slot 4 (its padding) changes nothing
    for layer in model.layers:
        layer.attention.kv_cache.k_cache[1, :, 4] = 100.0
    torch.testing.assert_close(NumpyDecodeStep(model)(token, pos)[1], want[1], rtol=1e-4, atol=1e-5)


def test_greedy_generation_matches_eager_on_the_real_model():
    model, tok = load_model(device="cpu")
    prompt = tok.encode_chat("What is the capital of France?")
    eager = generate(model, tok, prompt, max_new_tokens=12, stop_ids=[])
    lean = generate(model, tok, prompt, max_new_tokens=12, stop_ids=[], decode_mode="numpy")
    assert lean.token_ids == eager.token_ids
    assert "Paris" in lean.text
    prompts = [prompt, tok.encode("Once upon a time")]
    batch = generate_batch(model, tok, prompts, max_new_tokens=6, decode_mode="numpy")
    assert batch.token_ids == generate_batch(model, tok, prompts, max_new_tokens=6).token_ids


@torch.no_grad()
def test_large_activations_raise_no_overflow_warning():
    model = tiny_model(std=20.0)  # SiLU sees gates far below -88, where exp(-x) overflows
    model.setup_caches(1, 8)
    model(torch.tensor([[1, 2, 3]]), torch.arange(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logits = make_decode_step(model, "numpy")(torch.tensor([[4]]), torch.tensor([[3]]), 4)
    assert torch.isfinite(logits).all()


def test_bad_input_is_refused_with_what_is_accepted():
    model = tiny_model()
    with pytest.raises(RuntimeError, match="setup_caches"):
        NumpyDecodeStep(model)(torch.tensor([[1]]), torch.tensor([[0]]))
    model.setup_caches(1, 8)
    step = NumpyDecodeStep(model)
    with pytest.raises(ValueError, match=r"\(batch, 1\)"):
        step(torch.tensor([[1, 2]]), torch.tensor([[0]]))
    with pytest.raises(ValueError, match="position 8 does not fit the KV cache of 8 slots"):
        step(torch.tensor([[1]]), torch.tensor([[8]]))
    with pytest.raises(ValueError, match=r"one position >= 0 per row .* got \[\[0\], \[1\], \[2\]\] for 1 rows"):
        step(torch.tensor([[1]]), torch.tensor([[0], [1], [2]]))
    with pytest.raises(ValueError, match="one position >= 0 per row"):
        step(torch.tensor([[1]]), torch.tensor([[-1]]))
    with pytest.raises(ValueError, match="max_batch_size 1"):
        step(torch.tensor([[1], [2]]), torch.tensor([[0], [0]]))
    with pytest.raises(ValueError, match="runs in fp32, not bf16: load the model in fp32"):
        NumpyDecodeStep(model.to(torch.bfloat16))
    with pytest.raises(ValueError, match="choose one of eager, compile, cuda_graph, numpy"):
        make_decode_step(model, "fast")


@torch.no_grad()
def test_matrix_products_are_timed_in_place_and_counted_by_hand():
    from utils.profile import time_matrix_products

    model = tiny_model(tied=False)
    model.setup_caches(1, 16)
    step = NumpyDecodeStep(model)
    times = time_matrix_products(step, torch.tensor([[3]]), torch.tensor([[4]]), steps=3)
    # per layer: wqkv (4 + 2 + 2 heads of 8 = 64 rows), wo, w13 (2 x 48 rows), w2; then the output
    expected = {(64, 32): 2, (32, 32): 2, (96, 32): 2, (32, 48): 2, (97, 32): 1}
    assert {shape: calls for shape, (calls, _, _) in times.products.items()} == expected
    for (rows, cols), (calls, seconds, nbytes) in times.products.items():
        assert nbytes == calls * rows * cols * 4 and seconds > 0
    assert 0 < times.products_seconds < times.step_seconds
    assert times.rest_seconds == pytest.approx(times.step_seconds - times.products_seconds)
    assert "97 x 32" in times.table() and "everything else" in times.table()
    assert step.matmul is rows_times_weight  # put back
    with pytest.raises(ValueError, match="steps >= 1"):
        time_matrix_products(step, torch.tensor([[3]]), torch.tensor([[4]]), steps=0)


@pytest.mark.parametrize("mode, device, dtype, message", [
    ("fast", "cpu", torch.float32, "unknown decode mode 'fast': choose one of eager, compile, "
                                   "cuda_graph, numpy"),
    ("cuda_graph", "cpu", torch.float32, "needs a CUDA device, not cpu: use eager, compile or numpy"),
    ("numpy", "cpu", torch.bfloat16, "runs in fp32, not bf16: load the model in fp32, or use "
                                     "mode eager or compile"),
    ("numpy", "cuda", torch.float32, "runs on a CPU, not on cuda: use eager, compile or cuda_graph"),
])
def test_decode_modes_a_device_cannot_run_are_refused_before_any_loading(mode, device, dtype,
                                                                         message):
    from utils.generate import check_decode_mode

    with pytest.raises(ValueError, match=re.escape(message)):
        check_decode_mode(mode, device, dtype)
    for fine in ("eager", "compile"):
        check_decode_mode(fine, device, dtype)


def test_bench_refuses_a_mode_before_loading_the_model(monkeypatch):
    import utils.bench as bench

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the mode was checked")

    monkeypatch.setattr(bench, "load_for_profile", no_loading)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        bench.bench_decode("smollm2-135m", "cpu", "fp32", mode="cuda_graph")

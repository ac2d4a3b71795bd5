"""The model: the KV cache changes nothing but speed, batches of different lengths decode like
single sequences, and the real weights know that Paris is the capital of France."""

import pytest
import torch

from utils.llama import Transformer, apply_rope, rope_tables
from utils.loading import build_model, load_model
from utils.models import ModelShape

TINY = ModelShape("tiny", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, vocab_size=50,
                  tied_embeddings=True, rope_base=10000.0, max_seq_len=64)


@pytest.fixture(scope="module")
def smol():
    return load_model(device="cpu")


def greedy_no_cache(model, ids, n):
    x = torch.tensor([ids])
    out = []
    for _ in range(n):
        nxt = int(model(x)[0, -1].argmax())
        out.append(nxt)
        x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
    return out


@torch.no_grad()
def test_capital_of_france_is_paris(smol):
    model, tok = smol
    ids = tok.encode("The capital of France is")
    first = greedy_no_cache(model, ids, 2)
    assert tok.decode(first[:1]) == " Paris"


@torch.no_grad()
def test_kv_cache_gives_the_same_logits_as_recomputing(smol):
    model, tok = smol
    ids = tok.encode("Three primary colours are")
    model.setup_caches(1, 128)
    logits = model(torch.tensor([ids]), torch.arange(len(ids)))[:, -1]
    seq = list(ids)
    for _ in range(20):
        full = model(torch.tensor([seq]))[:, -1]  # no cache: the whole sequence again
        torch.testing.assert_close(logits, full, atol=2e-4, rtol=1e-4)
        nxt = int(logits.argmax())
        seq.append(nxt)
        logits = model(torch.tensor([[nxt]]), torch.tensor([len(seq) - 1]))[:, -1]
    assert len(seq) == len(ids) + 20


@torch.no_grad()
def test_batched_rows_with_different_lengths_match_single_rows(smol):
    model, tok = smol
    prompts = [tok.encode(t) for t in ["The capital of France is", "Hello",
                                       "Water boils at a temperature of"]]
    lengths = [len(p) for p in prompts]
    longest = max(lengths)
    model.setup_caches(3, 64)
    padded = torch.zeros(3, longest, dtype=torch.long)
    for row, p in enumerate(prompts):
        padded[row, : len(p)] = torch.tensor(p)
    logits = model(padded, torch.arange(longest))
    batched = logits[torch.arange(3), torch.tensor(lengths) - 1]  # each row's last real token
    pos = torch.tensor(lengths).unsqueeze(1)
    nxt = batched.argmax(-1)
    for _ in range(3):  # decode: every row at its own position
        batched = model(nxt.unsqueeze(1), pos)[:, -1]
        pos = pos + 1
        nxt = batched.argmax(-1)
    for row, p in enumerate(prompts):
        seq = p + greedy_no_cache(model, p, 3)
        alone = model(torch.tensor([seq]))[0, -1]
        torch.testing.assert_close(batched[row], alone, atol=2e-4, rtol=1e-4)


def test_cache_shapes_bytes_and_reset():
    model = build_model(TINY, "cpu", torch.float32)
    model.init_random(seed=1)
    model.setup_caches(max_batch_size=3, max_seq_len=16)
    cache = model.layers[1].attention.kv_cache
    assert cache.k_cache.shape == (3, 2, 16, 8)  # batch, kv heads, length, head_dim
    # 2 tensors (k, v) x 2 layers x 3 x 2 x 16 x 8 numbers x 4 bytes
    assert model.kv_cache_bytes() == 2 * 2 * 3 * 2 * 16 * 8 * 4
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), torch.arange(3))
    assert cache.k_cache[0, :, :3].abs().sum() > 0 and cache.k_cache[0, :, 3:].abs().sum() == 0
    model.reset_caches()
    assert cache.k_cache.abs().sum() == 0 and cache.v_cache.abs().sum() == 0


def test_no_cache_path_leaves_the_cache_alone():
    model = build_model(TINY, "cpu", torch.float32)
    model.init_random()
    model.setup_caches(1, 16)
    with torch.no_grad():
        model.forward_no_cache(torch.tensor([[4, 5, 6]]))
    assert model.layers[0].attention.kv_cache.k_cache.abs().sum() == 0


def test_clear_errors_for_a_missing_or_small_cache():
    model = build_model(TINY, "cpu", torch.float32)
    model.init_random()
    with pytest.raises(RuntimeError, match="setup_caches"):
        model(torch.tensor([[1]]), torch.tensor([0]))
    model.setup_caches(1, 4)
    with pytest.raises(ValueError, match="does not fit"):
        model(torch.tensor([[1]]), torch.tensor([4]))
    with pytest.raises(ValueError, match="max_batch_size"):
        model(torch.tensor([[1], [2]]), torch.tensor([0]))


def test_random_init_lands_on_the_target_dtype_with_small_std():
    model, tok = load_model(TINY, device="cpu", dtype="bf16", weights="random")
    assert tok is None  # vocabulary of 50: not SmolLM2's tokenizer
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    w = model.layers[0].feed_forward.w13.weight.float()
    assert 0.015 < w.std().item() < 0.025
    assert model.output.weight is model.tok_embeddings.weight  # tied
    assert torch.equal(model.norm.weight.float(), torch.ones(32))
    with torch.no_grad():
        assert model(torch.tensor([[1, 2]])).shape == (1, 2, 50)


def test_rope_rotates_each_pair_by_position_times_frequency():
    cos, sin = rope_tables(head_dim=4, max_len=3, base=100.0)
    # frequencies 100^(-0/4) = 1 and 100^(-2/4) = 0.1; pairs are (x0, x2) and (x1, x3)
    x = torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 1, 4)
    pos = 2
    rotated = apply_rope(x, cos[pos], sin[pos]).flatten()
    angle = torch.tensor(2.0)
    torch.testing.assert_close(rotated, torch.stack([angle.cos(), torch.tensor(0.0), angle.sin(),
                                                     torch.tensor(0.0)]))


def test_half_rotation_on_unpermuted_weights_equals_llama_cpp_pair_rotation(smol):
    """llama.cpp rotates adjacent pairs of its permuted Q rows; we rotate halves of the
    un-permuted rows. Both must give the same attention scores."""
    from tests.test_gguf_weights import llama_cpp_permute

    model, _ = smol
    cfg = model.config
    wq = model.layers[0].attention.wqkv.weight[: cfg.d_model]
    x = torch.randn(5, cfg.d_model, generator=torch.Generator().manual_seed(0))
    cos, sin = rope_tables(cfg.head_dim, 5, cfg.rope_base)
    q_hf = (x @ wq.T).view(5, cfg.n_heads, cfg.head_dim).transpose(0, 1)
    ours = apply_rope(q_hf, cos, sin)
    q_gguf = (x @ llama_cpp_permute(wq, cfg.n_heads).T).view(5, cfg.n_heads, -1, 2)
    half = cfg.head_dim // 2
    c, s = cos[:, None, :half], sin[:, None, :half]  # (position, 1, frequency)
    theirs = torch.stack([q_gguf[..., 0] * c - q_gguf[..., 1] * s,
                          q_gguf[..., 0] * s + q_gguf[..., 1] * c], dim=-1).flatten(-2)
    # same vectors up to the order of coordinates within each head: compare dot products
    torch.testing.assert_close(ours @ ours.transpose(1, 2), theirs.transpose(0, 1) @
                               theirs.transpose(0, 1).transpose(1, 2), atol=1e-3, rtol=1e-4)


def test_transformer_param_count_matches_the_model_table(smol):
    model, _ = smol
    assert sum(p.numel() for p in model.parameters()) == model.config.n_params
    assert isinstance(model, Transformer)


def test_gradients_reach_every_weight_on_the_decode_path():
    """The fast CPU path for few rows runs in numpy, which has no autograd: with gradients on it
    must step aside, or training a tiny model would silently leave the matrices untouched."""
    model = Transformer(TINY)
    model.init_random(seed=1)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the condition under which decode takes the numpy path
    try:
        loss = model(torch.tensor([[1, 2, 3]]))[:, -1].logsumexp(-1).sum()
        loss.backward()
    finally:
        torch.set_num_threads(before)
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_stacked_gate_and_up_projections_compute_swiglu_by_hand():
    """utils.loading stacks the gate (w1) and up (w3) matrices into w13: the MLP must still be
    w2(silu(w1 x) * w3 x), with the gate rows first."""
    from utils.loading import fuse_projections

    g = torch.Generator().manual_seed(0)
    w1, w3, w2 = (torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g),
                  torch.randn(32, 64, generator=g))
    state = fuse_projections({"layers.0.feed_forward.w1.weight": w1,
                              "layers.0.feed_forward.w3.weight": w3}, n_layers=1)
    assert list(state) == ["layers.0.feed_forward.w13.weight"]
    model = Transformer(TINY)
    mlp = model.layers[0].feed_forward
    with torch.no_grad():
        mlp.w13.weight.copy_(state["layers.0.feed_forward.w13.weight"])
        mlp.w2.weight.copy_(w2)
        x = torch.randn(1, 3, 32, generator=g)
        gate, up = x @ w1.T, x @ w3.T
        expected = (gate * torch.sigmoid(gate) * up) @ w2.T
        torch.testing.assert_close(mlp(x), expected, atol=1e-4, rtol=1e-4)

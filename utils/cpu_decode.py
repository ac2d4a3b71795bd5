"""The course model's decode step in numpy, for the CPU: the same step, less overhead.

    step = NumpyDecodeStep(model)        # or utils.generate.make_decode_step(model, "numpy")
    logits = step(token_ids, input_pos)  # as model(token_ids, input_pos) for one new token

A decode step of SmolLM2-135M reads 0.54 GB of fp32 weights in 121 matrix-vector products (4
per layer, then the output), and runs about 900 small operations around them (norms, RoPE,
attention over the cache, SwiGLU, residual adds). In eager PyTorch on a CPU each small operation
costs a few microseconds of dispatch, whatever its size: on the course's 2-core test machine, a
third of the step or more. numpy does the same small operations for about a microsecond each
(chapter 3's lab measures both, with a skeleton model that is all overhead). This class runs the step of
`utils.llama` line for line, on zero-copy numpy views of the model's own weights and KV cache,
so it writes the same cache that prefill wrote, and a test checks that both give the same
logits. It does on a CPU what CUDA graphs and torch.compile do on a GPU: it removes overhead,
not work.

utils.llama stays the model to read; this file is its decode step with the framework left out.
"""

from __future__ import annotations

import numpy as np
import torch

from utils.generate import check_decode_mode
from utils.llama import Transformer, rows_times_weight


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight, over the last axis."""
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) / x.shape[-1] + eps) * weight


class NumpyDecodeStep:
    """(token_ids (B, 1), input_pos (B, 1)[, kv_len]) -> logits (B, 1, vocab), like the model's
    decode call, for a model in float32 on the CPU whose caches are set up (setup_caches).

    Row b writes its key and value at slot input_pos[b] and attends over slots 0..input_pos[b].
    kv_len is accepted for the same signature as the other decode steps and is not needed.
    """

    def __init__(self, model: Transformer) -> None:
        check_decode_mode("numpy", model.output.weight.device, model.output.weight.dtype)
        self.model = model
        c = model.config
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.head_dim
        self.d_ff, self.eps = c.d_ff, c.norm_eps
        self.matmul = rows_times_weight  # every matrix product; utils.profile swaps in a timed one

        def view(p: torch.Tensor) -> np.ndarray:
            return p.detach().numpy()  # shares memory with the model's parameter

        self.embedding = view(model.tok_embeddings.weight)
        self.output = view(model.output.weight)  # the same array when the embedding is tied
        self.final_norm = view(model.norm.weight)
        self.layers = [
            (view(layer.attention_norm.weight), view(layer.attention.wqkv.weight),
             view(layer.attention.wo.weight), view(layer.ffn_norm.weight),
             view(layer.feed_forward.w13.weight), view(layer.feed_forward.w2.weight))
            for layer in model.layers
        ]

    def __call__(self, token_ids: torch.Tensor, input_pos: torch.Tensor,
                 kv_len: int | None = None) -> torch.Tensor:
        B = len(token_ids)
        if token_ids.ndim != 2 or token_ids.shape[1] != 1:
            raise ValueError(f"a decode step takes token_ids of shape (batch, 1), got "
                             f"{tuple(token_ids.shape)}: run the prompt through model(...) first")
        if input_pos.numel() not in (1, B) or int(input_pos.min()) < 0:
            raise ValueError(f"input_pos must hold one position >= 0 per row (or one for all), got "
                             f"{input_pos.tolist()} for {B} rows")
        positions = input_pos.reshape(-1).expand(B).numpy()  # (B,): row b's position
        self.model.check_cache(B, int(positions.max()))
        H, KV, D, matmul = self.n_heads, self.n_kv_heads, self.head_dim, self.matmul
        slots = positions.tolist()
        cos = self.model.rope_cos.numpy()[positions][:, None]  # (B, 1, D)
        sin = self.model.rope_sin.numpy()[positions][:, None]
        caches = [layer.attention.kv_cache for layer in self.model.layers]

        x = self.embedding[token_ids.numpy()[:, 0]]  # (B, d_model)
        with np.errstate(over="ignore"):  # exp(-x) of SiLU overflows to inf for x < -88: fine
            for (attention_norm, wqkv, wo, ffn_norm, w13, w2), cache in zip(self.layers, caches):
                qkv = matmul(rms_norm(x, attention_norm, self.eps), wqkv)
                qk = qkv[:, : (H + KV) * D].reshape(B, H + KV, D)  # q and k heads, one RoPE
                first, second = qk[..., : D // 2], qk[..., D // 2:]
                qk = qk * cos + np.concatenate([-second, first], axis=-1) * sin
                v = qkv[:, (H + KV) * D:].reshape(B, KV, D)
                k_cache, v_cache = cache.k_cache.numpy(), cache.v_cache.numpy()
                y = np.empty((B, H * D), dtype=x.dtype)
                for b, p in enumerate(slots):  # row b: write slot p, attend over slots 0..p
                    k_cache[b, :, p], v_cache[b, :, p] = qk[b, H:], v[b]
                    q = qk[b, :H].reshape(KV, H // KV, D)  # query heads grouped by their KV head
                    scores = q @ k_cache[b, :, : p + 1].transpose(0, 2, 1) * D**-0.5
                    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
                    weights /= weights.sum(axis=-1, keepdims=True)
                    y[b] = (weights @ v_cache[b, :, : p + 1]).reshape(-1)
                x = x + matmul(y, wo)
                gate_up = matmul(rms_norm(x, ffn_norm, self.eps), w13)
                gate, up = gate_up[:, : self.d_ff], gate_up[:, self.d_ff:]
                x = x + matmul(gate / (1 + np.exp(-gate)) * up, w2)
        logits = matmul(rms_norm(x, self.final_norm, self.eps), self.output)
        return torch.from_numpy(logits).unsqueeze(1)

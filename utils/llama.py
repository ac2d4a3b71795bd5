"""A Llama-style decoder in plain PyTorch, with an explicit KV cache.

Read top to bottom: RMSNorm, rotary position embeddings (RoPE), grouped-query attention with a
preallocated KV cache, the SwiGLU MLP, then the Transformer that stacks them. The config is
`utils.models.ModelShape`. Weights use Hugging Face's layout (RoPE rotates the two halves of
each head); `utils.gguf_weights` converts llama.cpp's layout on load.

One forward pass serves both phases of a request:
    logits = model(token_ids, input_pos)
- prefill: token_ids (B, T) with input_pos = torch.arange(T) -- many positions at once, causal;
- decode:  token_ids (B, 1) with input_pos (B, 1) -- one new position per sequence.
input_pos gives each token's position, either shared by all rows (shape (T,)) or per row (B, T).
Row b's keys and values are written at cache slot = position, and a query at position p attends to
slots 0..p of its own row. So sequences of different lengths share one batch: each row keeps its
own position (no left padding); a right-padded prefill is fine because a padded slot lies beyond
the row's position and is overwritten by the row's next decode step before it is ever read.
Without input_pos, `model(token_ids)` recomputes the whole sequence and leaves the cache alone.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.models import ModelShape

MAX_BLAS_ROWS = 16  # decode batches up to this many rows take the OpenBLAS path below


def rows_times_weight(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x (rows, in) @ weight.T (weight is (out, in)) -> (rows, out), by numpy's BLAS: one
    matrix-vector product for a single row."""
    return (weight @ x[0])[None] if len(x) == 1 else x @ weight.T


def linear(x: Tensor, weight: Tensor) -> Tensor:
    """x @ weight.T, as F.linear.

    A decode step multiplies a few rows by every weight matrix: each weight is streamed from
    memory once and used for a couple of FLOP per row. On a CPU PyTorch hands this to Intel MKL,
    whose matrix-vector kernel reached about a third of the memory bandwidth on the course's
    AMD test machine; numpy's OpenBLAS reached about 0.9. So in fp32 on a CPU, with at most
    MAX_BLAS_ROWS rows and PyTorch on one thread (see utils.generate.decode_threads: with more,
    PyTorch's idle workers spin and take the cores OpenBLAS's threads need), the product goes
    through numpy, on zero-copy views of the same memory.
    """
    rows = x.shape[:-1].numel()
    if (not torch.compiler.is_compiling()  # first: torch.compile cannot trace the rest
            and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and 0 < rows <= MAX_BLAS_ROWS
            and torch.get_num_threads() == 1
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        # numpy has no autograd: only where none is needed
        y = rows_times_weight(x.detach().reshape(rows, -1).numpy(), weight.detach().numpy())
        return torch.from_numpy(y).view(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight)


class Linear(nn.Linear):
    """A bias-free nn.Linear whose forward is `linear` above."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # F.rms_norm is the same formula as one operation (without self.weight, which Llama
        # applies after casting back to x's dtype)
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).type_as(x) * self.weight


def rope_tables(head_dim: int, max_len: int, base: float, device=None,
                dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """cos and sin of angle position * base^(-2i/head_dim), each (max_len, head_dim).

    Pair i of a head is (x[i], x[i + head_dim/2]), so each frequency appears twice.
    """
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each (x[i], x[i + d/2]) pair of x (B, heads, T, d) by its position's angle."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class KVCache(nn.Module):
    """Keys and values of every past position: two (batch, kv_heads, max_len, head_dim) tensors."""

    def __init__(self, max_batch_size: int, max_seq_len: int, n_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str | None = None) -> None:
        super().__init__()
        shape = (max_batch_size, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device),
                             persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor) -> None:
        """Write k, v (B, kv_heads, T, head_dim) of row b, token t into slot input_pos[b, t]."""
        if k.shape[0] == 1:  # one row: a plain copy along the length axis, cheaper per step
            self.k_cache[:1].index_copy_(2, input_pos[0], k)
            self.v_cache[:1].index_copy_(2, input_pos[0], v)
            return
        rows = torch.arange(k.shape[0], device=k.device).unsqueeze(1)  # (B, 1)
        # cache[rows, :, pos] indexes a (B, T, kv_heads, head_dim) block
        self.k_cache[rows, :, input_pos] = k.transpose(1, 2)
        self.v_cache[rows, :, input_pos] = v.transpose(1, 2)


class Attention(nn.Module):
    """Grouped-query attention: n_heads query heads share n_kv_heads key/value heads."""

    def __init__(self, config: ModelShape) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads
        self.head_dim = config.head_dim
        q_dim, kv_dim = config.n_heads * config.head_dim, config.kv_dim
        self.split_sizes = [q_dim, kv_dim, kv_dim]
        self.wqkv = Linear(config.d_model, q_dim + 2 * kv_dim)  # q, k, v stacked
        self.wo = Linear(q_dim, config.d_model)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor,
                input_pos: Tensor | None, kv_len: int) -> Tensor:
        B, T, _ = x.shape
        qk_heads = self.n_heads + self.n_kv_heads
        qkv = self.wqkv(x).view(B, T, qk_heads + self.n_kv_heads, self.head_dim).transpose(1, 2)
        qk = apply_rope(qkv[:, :qk_heads], cos, sin)  # (B, heads, T, head_dim): q and k at once
        q, k, v = qk[:, : self.n_heads], qk[:, self.n_heads:], qkv[:, qk_heads:]
        if input_pos is not None:  # store this step's keys/values, attend over the filled prefix
            self.kv_cache.update(input_pos, k, v)
            k = self.kv_cache.k_cache[:B, :, :kv_len]
            v = self.kv_cache.v_cache[:B, :, :kv_len]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           enable_gqa=self.n_heads != self.n_kv_heads)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """SwiGLU MLP: w2(silu(gate x) * up x). The gate and up projections (w1 and w3 in Meta's
    naming) are stacked in one matrix w13, as wqkv stacks q, k and v: in decode, one pass over
    a 2 x d_ff-row matrix streams faster than two passes over half as many rows."""

    def __init__(self, config: ModelShape) -> None:
        super().__init__()
        self.w13 = Linear(config.d_model, 2 * config.d_ff)  # gate rows, then up rows
        self.w2 = Linear(config.d_ff, config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelShape) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor,
                input_pos: Tensor | None, kv_len: int) -> Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos, kv_len)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, config: ModelShape) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.output = Linear(config.d_model, config.vocab_size)
        if config.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.max_batch_size = self.max_seq_len = 0  # set by setup_caches
        self.rope_cos = self.rope_sin = None  # (length, head_dim), grown on demand

    # --- the KV cache ---------------------------------------------------------------------------
    def setup_caches(self, max_batch_size: int, max_seq_len: int) -> None:
        """Allocate a zeroed KV cache per layer: 2 x (max_batch_size, kv_heads, max_seq_len,
        head_dim) in the model's dtype and device. Replaces any previous cache."""
        if max_batch_size < 1 or max_seq_len < 1:
            raise ValueError(f"need max_batch_size >= 1 and max_seq_len >= 1, got "
                             f"{max_batch_size} and {max_seq_len}")
        weight = self.output.weight
        for layer in self.layers:
            layer.attention.kv_cache = None  # free the old cache before allocating the new one
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(max_batch_size, max_seq_len, self.config.n_kv_heads,
                                               self.config.head_dim, weight.dtype, weight.device)
        self.max_batch_size, self.max_seq_len = max_batch_size, max_seq_len
        self._ensure_rope(max_seq_len)

    def reset_caches(self) -> None:
        """Zero every cached key and value (a new request does not need it: positions it has not
        written are masked out; this is for inspecting the cache)."""
        for layer in self.layers:
            if layer.attention.kv_cache is not None:
                layer.attention.kv_cache.k_cache.zero_()
                layer.attention.kv_cache.v_cache.zero_()

    def kv_cache_bytes(self) -> int:
        """Bytes held by the allocated KV cache, all layers, keys and values."""
        total = 0
        for layer in self.layers:
            cache = layer.attention.kv_cache
            if cache is not None:
                total += cache.k_cache.nbytes + cache.v_cache.nbytes
        return total

    def check_cache(self, batch: int, last_position: int) -> None:
        """Raise, saying what to do, unless `batch` rows up to `last_position` fit the KV cache."""
        if self.max_seq_len == 0:
            raise RuntimeError("no KV cache: call model.setup_caches(max_batch_size, max_seq_len) "
                               "first, or call model(token_ids) without input_pos")
        if batch > self.max_batch_size:
            raise ValueError(f"batch of {batch} rows > max_batch_size {self.max_batch_size} of "
                             "the KV cache: call setup_caches with a larger batch")
        if last_position >= self.max_seq_len:
            raise ValueError(f"position {last_position} does not fit the KV cache of "
                             f"{self.max_seq_len} slots: call setup_caches with a longer one")

    def _ensure_rope(self, length: int) -> None:
        weight = self.output.weight
        if self.rope_cos is None or len(self.rope_cos) < length or \
                self.rope_cos.device != weight.device or self.rope_cos.dtype != weight.dtype:
            length = max(length, 0 if self.rope_cos is None else len(self.rope_cos))
            self.rope_cos, self.rope_sin = rope_tables(self.config.head_dim, length,
                                                       self.config.rope_base, weight.device,
                                                       weight.dtype)

    # --- the forward pass -----------------------------------------------------------------------
    def forward(self, token_ids: Tensor, input_pos: Tensor | None = None,
                kv_len: int | None = None) -> Tensor:
        """Logits (B, T, vocab) for token_ids (B, T).

        input_pos: positions, (T,) shared by all rows or (B, T) per row; keys and values go to the
        KV cache (call setup_caches first). None: no cache, positions 0..T-1, full recompute.
        kv_len: how many cache slots to attend over; default max(input_pos) + 1 (reads the
        position back to the host). Pass it to avoid that, or pass self.max_seq_len for the fixed
        shapes torch.compile and CUDA graphs want.
        """
        B, T = token_ids.shape
        if input_pos is None:
            positions = torch.arange(T, device=token_ids.device).expand(B, T)
            kv_len = T
            self._ensure_rope(T)
        else:
            positions = input_pos.expand(B, T)
            if kv_len is None:
                kv_len = int(positions.max()) + 1
            self.check_cache(B, kv_len - 1)
            self._ensure_rope(self.max_seq_len)
        cos = self.rope_cos[positions].unsqueeze(1)  # (B, 1, T, head_dim)
        sin = self.rope_sin[positions].unsqueeze(1)
        # a query at position p sees key slots 0..p of its own row
        slots = torch.arange(kv_len, device=token_ids.device)
        mask = (slots <= positions.unsqueeze(-1)).unsqueeze(1)  # (B, 1, T, kv_len)
        cache_pos = None if input_pos is None else positions

        x = self.tok_embeddings(token_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, cache_pos, kv_len)
        return self.output(self.norm(x))

    def forward_no_cache(self, token_ids: Tensor) -> Tensor:
        """Logits (B, T, vocab) recomputing the whole sequence, without the KV cache."""
        return self(token_ids)

    # --- weights --------------------------------------------------------------------------------
    @torch.no_grad()
    def init_random(self, std: float = 0.02, seed: int = 0) -> None:
        """Normal(0, std) weights, norms set to one, in place on the model's device and dtype."""
        generator = torch.Generator(device=self.output.weight.device).manual_seed(seed)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, std, generator=generator)

    def weight_bytes(self) -> int:
        """Bytes of all parameters (a tied embedding counted once)."""
        return sum(p.nbytes for p in self.parameters())

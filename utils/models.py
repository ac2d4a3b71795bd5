"""Model shapes and parameter counts computed from them.

Every count here is derived from the architecture (layers, widths, vocabulary), never typed in,
so a learner can check it by hand. Sources: each model's published `config.json`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP).

    head_dim = 0 means d_model // n_heads. Counts are numbers of parameters (not bytes).
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    head_dim: int = 0
    tied_embeddings: bool = False
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192

    def __post_init__(self) -> None:
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{self.name}: {field} must be a positive integer, got {getattr(self, field)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"{self.name}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.head_dim == 0:
            if self.d_model % self.n_heads:
                raise ValueError(f"{self.name}: d_model must divide by n_heads, or give head_dim")
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)

    @property
    def attn_dim(self) -> int:
        """Width of all query heads together (n_heads * head_dim)."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key (or value) heads together (n_kv_heads * head_dim)."""
        return self.n_kv_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        attention = 2 * self.d_model * self.attn_dim + 2 * self.d_model * self.kv_dim  # q, o, k, v
        mlp = 3 * self.d_model * self.d_ff  # gate, up, down
        norms = 2 * self.d_model
        return attention + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """All parameters: embeddings, layers, final norm and (unless tied) the output projection."""
        output = 0 if self.tied_embeddings else self.embedding_params
        return self.embedding_params + self.n_layers * self.params_per_layer + self.d_model + output


@dataclass(frozen=True)
class ParamCount:
    """A model known only by its parameter count, for napkin math ("a 7B model").

    With no layer shapes there is no attention term and no KV cache.
    """

    name: str
    n_params: int
    n_layers: int = 0
    attn_dim: int = 0
    kv_dim: int = 0

    def __post_init__(self) -> None:
        if self.n_params <= 0:
            raise ValueError(f"n_params must be positive, got {self.n_params}")


Model = ModelShape | ParamCount

MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in [
        ModelShape("smollm2-135m", 30, 576, 9, 3, 1536, 49152, tied_embeddings=True,
                   rope_base=100000.0, max_seq_len=8192),
        ModelShape("smollm2-360m", 32, 960, 15, 5, 2560, 49152, tied_embeddings=True,
                   rope_base=100000.0, max_seq_len=8192),
        ModelShape("smollm2-1.7b", 24, 2048, 32, 32, 8192, 49152, tied_embeddings=True,
                   rope_base=130000.0, max_seq_len=8192),
        ModelShape("llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, tied_embeddings=True,
                   rope_base=500000.0, max_seq_len=131072),
        ModelShape("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, max_seq_len=4096),
        ModelShape("mistral-7b", 32, 4096, 32, 8, 14336, 32000, rope_base=1e6, max_seq_len=32768),
        ModelShape("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, rope_base=500000.0),
        ModelShape("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, rope_base=500000.0),
    ]
}


def dense_model(n_params: float, name: str | None = None) -> ParamCount:
    """A napkin-math model of `n_params` parameters (e.g. 7e9 for "a 7B model")."""
    n = int(round(float(n_params)))
    return ParamCount(name or f"{n / 1e9:g}B-params", n)


def get_model(name: str | Model) -> Model:
    """Look a model up by name (case-insensitive); model objects pass through unchanged."""
    if isinstance(name, (ModelShape, ParamCount)):
        return name
    key = str(name).strip().lower()
    if key in MODELS:
        return MODELS[key]
    close = difflib.get_close_matches(key, MODELS, n=3, cutoff=0.4)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ValueError(f"unknown model {name!r}{hint}: choose one of {', '.join(MODELS)}")

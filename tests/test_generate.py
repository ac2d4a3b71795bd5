"""Generation: greedy is deterministic and coherent, batches match single prompts, streaming
matches the record, sampling is seeded, and the command line keeps its contract."""

import json

import pytest
import torch

from utils.chat import main as chat_main
from utils.generate import generate, generate_batch, sample
from utils.loading import load_model


@pytest.fixture(scope="module")
def smol():
    return load_model(device="cpu")


def test_greedy_is_deterministic_and_coherent(smol):
    model, tok = smol
    prompt = tok.encode("The capital of France is")
    first = generate(model, tok, prompt, max_new_tokens=6, stop_ids=[])
    second = generate(model, tok, prompt, max_new_tokens=6, stop_ids=[])
    assert first.token_ids == second.token_ids
    assert first.text.startswith(" Paris")
    assert first.stop_reason == "length" and len(first.token_ids) == 6


def test_record_timing_and_stop_token(smol):
    model, tok = smol
    record = generate(model, tok, tok.encode_chat("What is the capital of France?"),
                      max_new_tokens=30)
    assert "Paris" in record.text
    assert record.stop_reason == "stop" and record.token_ids[-1] == 2  # <|im_end|>
    assert "<|im_end|>" not in record.text
    assert len(record.tpot_seconds) == len(record.token_ids) - 1
    assert record.ttft_seconds > 0 and all(t > 0 for t in record.tpot_seconds)
    assert (record.device, record.dtype) == ("cpu", "fp32")


def test_streamed_pieces_add_up_to_the_text(smol):
    model, tok = smol
    pieces, ids = [], []
    record = generate(model, tok, tok.encode_chat("Say hello in Japanese."), max_new_tokens=12,
                      on_token=lambda token_id, text: (ids.append(token_id), pieces.append(text)))
    assert ids == record.token_ids
    assert "".join(pieces) == record.text


def test_batch_gives_the_same_greedy_tokens_as_each_prompt_alone(smol):
    model, tok = smol
    prompts = [tok.encode_chat("What is 2+2?"), tok.encode("Once upon a time"),
               tok.encode("The largest planet in the solar system is")]
    assert len({len(p) for p in prompts}) == 3
    batch = generate_batch(model, tok, prompts, max_new_tokens=6)
    for row, prompt in enumerate(prompts):
        alone = generate(model, tok, prompt, max_new_tokens=6)
        assert batch.token_ids[row] == alone.token_ids
        assert batch.texts[row] == alone.text
    assert len(batch.tpot_seconds) == max(len(t) for t in batch.token_ids) - 1


def test_sampling_is_seeded(smol):
    model, tok = smol
    prompt = tok.encode("My favourite food is")
    runs = [generate(model, tok, prompt, max_new_tokens=5, temperature=1.0, seed=1, stop_ids=[])
            for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids
    greedy = generate(model, tok, prompt, max_new_tokens=5, stop_ids=[])
    tiny_p = generate(model, tok, prompt, max_new_tokens=5, temperature=1.0, top_p=1e-6,
                      stop_ids=[])
    assert tiny_p.token_ids == greedy.token_ids  # top_p that small keeps only the top token


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    g = torch.Generator().manual_seed(0)
    draws = {int(sample(logits, 1.0, 0.7, g)) for _ in range(200)}
    assert draws == {0, 1}  # 0.5 < 0.7 <= 0.5 + 0.3
    assert int(sample(logits, 0.0)) == 0


def test_bad_arguments_are_refused(smol):
    model, tok = smol
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, tok, [1, 2], max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        generate(model, tok, [1, 2], top_p=0.0)
    with pytest.raises(TypeError, match="tokenizer.encode"):
        generate(model, tok, "a string")


def test_chat_json_output(capsys):
    assert chat_main(["The capital of France is", "--raw", "--json", "--max-new-tokens", "3",
                      "--device", "cpu"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert {"prompt_ids", "token_ids", "text", "ttft_seconds", "tpot_seconds"} <= set(record)
    assert record["text"].startswith(" Paris")
    assert len(record["token_ids"]) == 3 and len(record["tpot_seconds"]) == 2
    assert record["decode_mode"] == "eager"
    assert chat_main(["The capital of France is", "--raw", "--json", "--max-new-tokens", "3",
                      "--device", "cpu", "--mode", "numpy"]) == 0
    lean = json.loads(capsys.readouterr().out)
    assert lean["decode_mode"] == "numpy" and lean["token_ids"] == record["token_ids"]


@pytest.mark.parametrize("argv", [["hi", "--max-new-tokens", "0"], ["hi", "--device", "tpu"],
                                  ["hi", "--max-new-tokens", "x"], [], ["hi", "--bogus"],
                                  ["hi", "--mode", "fast"], ["hi", "--mode", "cuda_graph"]])
def test_chat_bad_arguments_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        chat_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "error" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_chat_asking_for_cuda_without_a_gpu_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        chat_main(["hi", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_hf_safetensors_directory_round_trip(smol, tmp_path):
    """Save the GGUF-loaded weights the way a Hugging Face checkpoint names them, load them back."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    model, tok = smol
    cfg = model.config
    state = {"model.embed_tokens.weight": model.tok_embeddings.weight,
             "model.norm.weight": model.norm.weight}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        q, k, v = layer.attention.wqkv.weight.split(layer.attention.split_sizes)
        gate, up = layer.feed_forward.w13.weight.chunk(2)
        state |= {p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                  p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": layer.attention.wo.weight,
                  p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                  p + "mlp.down_proj.weight": layer.feed_forward.w2.weight,
                  p + "input_layernorm.weight": layer.attention_norm.weight,
                  p + "post_attention_layernorm.weight": layer.ffn_norm.weight}
    safetensors_torch.save_file({k: t.contiguous() for k, t in state.items()},
                                str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": cfg.n_layers, "hidden_size": cfg.d_model,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
        "intermediate_size": cfg.d_ff, "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": True, "rope_theta": cfg.rope_base, "rms_norm_eps": cfg.norm_eps,
        "max_position_embeddings": cfg.max_seq_len}))
    loaded, loaded_tok = load_model(weights=tmp_path, device="cpu")
    ids = torch.tensor([tok.encode("The capital of France is")])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))
    assert loaded_tok is not None and loaded_tok.encode("The sky is blue.") == tok.encode(
        "The sky is blue.")


def test_arrival_times_add_each_decode_step_to_the_ttft() -> None:
    from utils.generate import Generation

    g = Generation(prompt_ids=[1], token_ids=[5, 6, 7], text="", ttft_seconds=0.100,
                   tpot_seconds=[0.020, 0.030])
    assert g.arrival_seconds == pytest.approx([0.100, 0.120, 0.150])
    assert Generation([1], [5], "", 0.1).arrival_seconds == [0.1]

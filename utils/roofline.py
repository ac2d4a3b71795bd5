"""Napkin math for one request: FLOPs, bytes, arithmetic intensity and the roofline.

Conventions (used by every chapter and exercise):
- A multiply-add is 2 FLOP. A forward pass costs 2 FLOP per parameter per token, plus
  attention: 4 * attn_dim FLOP per layer for each (query, key) pair (QK^T and AV), causal.
- Bytes moved by one step: all weights once, plus the KV cache read for every sequence's
  context and written for every new token. Activations are ignored (small next to weights).
- Both counts treat every parameter as a matmul weight, as the napkin rule "2N FLOP and 2N bytes
  per token in 16-bit" does. That is exact for tied embeddings (the course model); for an untied
  model the input-embedding lookup touches one row, not the table (about 6% of Llama-3-8B).
- Time lower bound of a step: max(FLOPs / peak FLOP/s, bytes / bandwidth) (the roofline).
All inputs and outputs are plain floats in SI units: FLOP, bytes, seconds, FLOP/s, bytes/s.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from utils.cli import Parser
from utils.hardware import Hardware, bytes_per_element, get_hardware
from utils.models import Model, dense_model, get_model


def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    bad = value < 0 if allow_zero else value <= 0
    if bad or (isinstance(value, float) and math.isnan(value)):
        need = "zero or more" if allow_zero else "positive"
        raise ValueError(f"{name} must be {need}, got {value}")


def matmul_flops(m: int, k: int, n: int) -> float:
    """FLOP of an (m x k) @ (k x n) matrix product: 2 * m * k * n (a multiply-add is 2 FLOP)."""
    for name, v in (("m", m), ("k", k), ("n", n)):
        _positive(name, v)
    return 2.0 * m * k * n


def matmul_bytes(m: int, k: int, n: int, dtype: str = "bf16") -> float:
    """Bytes a matmul must move at least once: read both inputs, write the output."""
    return bytes_per_element(dtype) * (m * k + k * n + m * n)


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOP per byte moved."""
    _positive("bytes", nbytes)
    return flops / nbytes


def ridge_flop_per_byte(hw: Hardware | str, dtype: str = "bf16") -> float:
    """Intensity (FLOP/byte) where compute time equals memory time: peak FLOP/s / bandwidth."""
    return get_hardware(hw).ridge_flop_per_byte(dtype)


def attainable_flops(intensity: float, hw: Hardware | str, dtype: str = "bf16") -> float:
    """Roofline: min(peak FLOP/s, intensity * bandwidth), in FLOP/s."""
    h = get_hardware(hw)
    _positive("intensity", intensity)
    return min(h.peak_flops(dtype), intensity * h.bandwidth)


# ---- model-level counts -------------------------------------------------------------------

def weight_bytes(model: Model | str, dtype: str = "bf16") -> float:
    """Bytes of all parameters stored in `dtype` (a 7e9-parameter model in bf16 is 14e9 bytes)."""
    return get_model(model).n_params * bytes_per_element(dtype)


def kv_cache_bytes_per_token(model: Model | str, dtype: str = "bf16") -> float:
    """KV cache bytes per token: 2 (K and V) * layers * KV heads * head dim * bytes per element."""
    m = get_model(model)
    return 2 * m.n_layers * m.kv_dim * bytes_per_element(dtype)


def attention_flops(model: Model | str, new_tokens: int, context: int = 0) -> float:
    """Attention-score FLOP for `new_tokens` tokens that follow `context` cached tokens (causal:
    new token i attends to context + i keys)."""
    m = get_model(model)
    pairs = new_tokens * context + new_tokens * (new_tokens + 1) / 2
    return 4.0 * m.n_layers * m.attn_dim * pairs


def forward_flops(model: Model | str, n_tokens: int, context: int = 0) -> float:
    """FLOP of one forward pass over `n_tokens` new tokens of one sequence after `context`
    cached tokens: 2 per parameter per token, plus attention."""
    _positive("n_tokens", n_tokens)
    _positive("context", context, allow_zero=True)
    m = get_model(model)
    return 2.0 * m.n_params * n_tokens + attention_flops(m, n_tokens, context)


@dataclass(frozen=True)
class StepCost:
    """One engine step: FLOP, bytes, and the two time limits in seconds."""

    flops: float
    bytes: float
    compute_seconds: float
    memory_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def flop_per_byte(self) -> float:
        return self.flops / self.bytes


def step_cost(model: Model | str, hw: Hardware | str, dtype: str,
              chunks: Iterable[tuple[int, int]], *, kv_cache: bool = True,
              compute_dtype: str | None = None) -> StepCost:
    """Cost of one step that processes, for each sequence, `(new_tokens, context)`: new tokens
    appended after `context` cached ones. Weights are read once for the whole step."""
    m, h = get_model(model), get_hardware(hw)
    new_total, flops, kv_tokens = 0, 0.0, 0
    for new, context in chunks:
        flops += forward_flops(m, new, context)
        new_total += new
        kv_tokens += context + new  # read the context, write the new tokens
    if new_total == 0:
        raise ValueError("a step needs at least one sequence with new tokens")
    nbytes = weight_bytes(m, dtype)
    if kv_cache:
        nbytes += kv_tokens * kv_cache_bytes_per_token(m, dtype)
    peak = h.peak_flops(compute_dtype or dtype)
    return StepCost(flops, nbytes, flops / peak, nbytes / h.bandwidth)


def prefill_cost(model: Model | str, hw: Hardware | str, dtype: str, prompt_tokens: int,
                 batch: int = 1, **kw: object) -> StepCost:
    _positive("prompt_tokens", prompt_tokens)
    _positive("batch", batch)
    return step_cost(model, hw, dtype, [(prompt_tokens, 0)] * batch, **kw)


def decode_cost(model: Model | str, hw: Hardware | str, dtype: str, batch: int = 1,
                context: int = 0, **kw: object) -> StepCost:
    _positive("batch", batch)
    _positive("context", context, allow_zero=True)
    return step_cost(model, hw, dtype, [(1, context)] * batch, **kw)


def prefill_seconds(model: Model | str, hw: Hardware | str, dtype: str, prompt_tokens: int,
                    batch: int = 1, **kw: object) -> float:
    """Lower bound on prefill time (TTFT without queueing) for `batch` prompts, in seconds."""
    return prefill_cost(model, hw, dtype, prompt_tokens, batch, **kw).seconds


def decode_step_seconds(model: Model | str, hw: Hardware | str, dtype: str, batch: int = 1,
                        context: int = 0, **kw: object) -> float:
    """Lower bound on one decode step (TPOT) for `batch` sequences of `context` cached tokens."""
    return decode_cost(model, hw, dtype, batch, context, **kw).seconds


def decode_tokens_per_second(model: Model | str, hw: Hardware | str, dtype: str, batch: int = 1,
                             context: int = 0, **kw: object) -> float:
    """Ceiling on tokens/s per sequence (1 / TPOT); multiply by `batch` for the whole batch."""
    return 1.0 / decode_step_seconds(model, hw, dtype, batch, context, **kw)


def prefill_tokens_per_decode_step(model: Model | str, hw: Hardware | str,
                                   dtype: str = "bf16") -> float:
    """How many prompt tokens the compute roof processes in the time of one batch-1 decode step
    (weights only): decode memory time * peak FLOP/s / (2 FLOP per parameter per token)."""
    m, h = get_model(model), get_hardware(hw)
    return weight_bytes(m, dtype) / h.bandwidth * h.peak_flops(dtype) / (2.0 * m.n_params)


def prefill_equivalent_decode_steps(model: Model | str, hw: Hardware | str, dtype: str,
                                    prompt_tokens: int) -> float:
    """A P-token prefill costs this many batch-1 decode steps (at context 0)."""
    return (prefill_seconds(model, hw, dtype, prompt_tokens)
            / decode_step_seconds(model, hw, dtype))


def critical_batch_size(model: Model | str, hw: Hardware | str, dtype: str = "bf16",
                        context: int = 0) -> int:
    """Smallest decode batch whose step is compute-bound (weights + KV traffic); with no KV
    cache this is about the ridge point times bytes per weight / 2."""
    m, h = get_model(model), get_hardware(hw)
    peak = h.peak_flops(dtype)
    per_seq_flops = forward_flops(m, 1, context)
    per_seq_bytes = (context + 1) * kv_cache_bytes_per_token(m, dtype)
    weights = weight_bytes(m, dtype)
    # compute >= memory  <=>  B * f / peak >= (W + B * kv) / bw
    margin = per_seq_flops / peak - per_seq_bytes / h.bandwidth
    if margin <= 0:
        raise ValueError(f"decode of {m.name} at context {context} never turns compute-bound on "
                         f"{h.name} in {dtype}: the KV cache traffic grows as fast as the math")
    return math.ceil(weights / h.bandwidth / margin)


def max_batch_by_memory(model: Model | str, hw: Hardware | str, dtype: str, context: int,
                        memory_fraction: float = 1.0) -> int:
    """Largest number of sequences of `context` tokens whose KV caches fit in
    memory_fraction * memory beside the weights (0 if even the weights do not fit)."""
    m, h = get_model(model), get_hardware(hw)
    _positive("context", context)
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction}")
    free = memory_fraction * h.memory_bytes - weight_bytes(m, dtype)
    per_seq = context * kv_cache_bytes_per_token(m, dtype)
    if free <= 0:
        return 0
    if per_seq == 0:
        raise ValueError(f"{m.name} has no layer shapes, so no KV cache size: pick a named model")
    return int(free // per_seq)


@dataclass(frozen=True)
class RequestTimeline:
    """One request's life on the roofline: its prefill step, then one step per further token."""

    prefill: StepCost
    decode: tuple[StepCost, ...]  # step j reads the prompt plus j generated tokens

    @property
    def ttft_seconds(self) -> float:
        return self.prefill.seconds

    @property
    def decode_seconds(self) -> float:
        return sum(s.seconds for s in self.decode)

    @property
    def total_seconds(self) -> float:
        return self.ttft_seconds + self.decode_seconds

    @property
    def mean_tpot_seconds(self) -> float:
        """Mean gap between output tokens after the first (0 for a one-token answer)."""
        return self.decode_seconds / len(self.decode) if self.decode else 0.0


def request_timeline(model: Model | str, hw: Hardware | str, dtype: str, prompt_tokens: int,
                     output_tokens: int, batch: int = 1,
                     compute_dtype: str | None = None) -> RequestTimeline:
    """Lower-bound timeline of `batch` identical requests served together: one prefill step of
    `prompt_tokens` each (it yields the first output token), then `output_tokens - 1` decode
    steps, the j-th reading a KV cache of prompt_tokens + j tokens per sequence."""
    _positive("output_tokens", output_tokens)
    kw = {"compute_dtype": compute_dtype}
    pre = prefill_cost(model, hw, dtype, prompt_tokens, batch, **kw)
    steps = tuple(decode_cost(model, hw, dtype, batch, prompt_tokens + j, **kw)
                  for j in range(output_tokens - 1))
    return RequestTimeline(pre, steps)


# ---- one request, as a table --------------------------------------------------------------

def summary(model: Model | str, hw: Hardware | str, dtype: str = "bf16", prompt_tokens: int = 1000,
            batch: int = 1, context: int = 0, compute_dtype: str | None = None) -> dict[str, object]:
    """Everything the CLI prints, as one dict with stable keys (see the README)."""
    m, h = get_model(model), get_hardware(hw)
    cdt = compute_dtype or dtype
    pre = prefill_cost(m, h, dtype, prompt_tokens, batch, compute_dtype=cdt)
    dec = decode_cost(m, h, dtype, batch, context, compute_dtype=cdt)
    kv = kv_cache_bytes_per_token(m, dtype)
    need = weight_bytes(m, dtype) + batch * (max(context, prompt_tokens) + 1) * kv
    if need > h.memory_bytes:
        raise ValueError(f"{m.name} in {dtype} with batch {batch} needs {need / 1e9:.1f} GB "
                         f"(weights + KV cache) but {h.name} has {h.memory_bytes / 1e9:.0f} GB")
    try:
        critical: int | None = critical_batch_size(m, h, cdt if dtype == cdt else dtype, context)
    except ValueError:
        critical = None
    return {
        "model": m.name, "hardware": h.name, "hardware_kind": h.kind, "dtype": dtype,
        "compute_dtype": cdt, "n_params": m.n_params, "prompt_tokens": prompt_tokens,
        "batch": batch, "context": context,
        "weight_bytes": weight_bytes(m, dtype),
        "peak_flops": h.peak_flops(cdt), "bandwidth_bytes_per_s": h.bandwidth,
        "ridge_flop_per_byte": h.peak_flops(cdt) / h.bandwidth,
        "prefill_flops": pre.flops, "prefill_bytes": pre.bytes,
        "prefill_flop_per_byte": pre.flop_per_byte,
        "prefill_compute_seconds": pre.compute_seconds,
        "prefill_memory_seconds": pre.memory_seconds,
        "prefill_seconds": pre.seconds,
        "decode_flops": dec.flops, "decode_bytes": dec.bytes,
        "decode_flop_per_byte": dec.flop_per_byte,
        "decode_compute_seconds": dec.compute_seconds,
        "decode_memory_seconds": dec.memory_seconds,
        "decode_step_seconds": dec.seconds,
        "decode_tokens_per_second": 1.0 / dec.seconds,
        "decode_batch_tokens_per_second": batch / dec.seconds,
        "prefill_equivalent_decode_steps": pre.seconds / dec.seconds,
        "prefill_tokens_per_decode_step": prefill_tokens_per_decode_step(m, h, dtype)
        if cdt == dtype else dec.seconds * h.peak_flops(cdt) / (2.0 * m.n_params),
        "kv_cache_bytes_per_token": kv,
        "critical_batch_size": critical,
        "max_batch_by_memory": max_batch_by_memory(m, h, dtype, max(context, prompt_tokens))
        if kv else None,
        "bound": {"prefill": pre.bound, "decode": dec.bound},
    }


def _fmt_seconds(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def format_summary(r: dict) -> str:
    """A readable table of `summary()`."""
    kv = r["kv_cache_bytes_per_token"]
    rows = [
        ("model", f"{r['model']} ({r['n_params'] / 1e9:.3g}e9 params), weights {r['dtype']}"),
        ("hardware", f"{r['hardware']} ({r['hardware_kind']}): "
                     f"{r['peak_flops'] / 1e12:.4g} TFLOP/s dense {r['compute_dtype']}, "
                     f"{r['bandwidth_bytes_per_s'] / 1e12:.3g} TB/s"),
        ("weights", f"{r['weight_bytes'] / 1e9:.3g} GB"),
        ("ridge point", f"{r['ridge_flop_per_byte']:.0f} FLOP/byte"),
        ("", ""),
        ("prefill", f"{r['prompt_tokens']} tokens x batch {r['batch']}"),
        ("  intensity", f"{r['prefill_flop_per_byte']:.3g} FLOP/byte -> {r['bound']['prefill']}-bound"),
        ("  compute | memory", f"{_fmt_seconds(r['prefill_compute_seconds'])} | "
                               f"{_fmt_seconds(r['prefill_memory_seconds'])}"),
        ("  TTFT lower bound", _fmt_seconds(r["prefill_seconds"])),
        ("decode", f"batch {r['batch']}, context {r['context']} tokens"),
        ("  intensity", f"{r['decode_flop_per_byte']:.3g} FLOP/byte -> {r['bound']['decode']}-bound"),
        ("  compute | memory", f"{_fmt_seconds(r['decode_compute_seconds'])} | "
                               f"{_fmt_seconds(r['decode_memory_seconds'])}"),
        ("  TPOT lower bound", _fmt_seconds(r["decode_step_seconds"])),
        ("  tokens/s ceiling", f"{r['decode_tokens_per_second']:.4g} per sequence, "
                               f"{r['decode_batch_tokens_per_second']:.4g} per batch"),
        ("", ""),
        ("prefill = decode steps", f"{r['prefill_equivalent_decode_steps']:.3g}"),
        ("prompt tokens per decode step", f"{r['prefill_tokens_per_decode_step']:.0f}"),
        ("KV cache per token", f"{kv / 1024:.4g} KiB" if kv else "n/a (no layer shapes)"),
        ("critical batch size", str(r["critical_batch_size"])),
        ("max batch in memory", str(r["max_batch_by_memory"])),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" if k else "" for k, v in rows)



def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m utils.roofline",
                description="Napkin math for one request: prefill and decode on the roofline.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", default=None, help="model name (default llama-3-8b)")
    g.add_argument("--params", type=float, help="a plain N-parameter model, e.g. 7e9")
    p.add_argument("--hardware", default=None, help="device name (default h100-sxm)")
    p.add_argument("--peak-tflops", type=float, help="peak TFLOP/s (with --bandwidth-tbs)")
    p.add_argument("--bandwidth-tbs", type=float, help="memory bandwidth in TB/s")
    p.add_argument("--memory-gb", type=float, default=80.0, help="memory for custom hardware, GB")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--compute-dtype", default=None, help="math precision if it differs (int4 weights)")
    p.add_argument("--prompt-tokens", type=int, default=1000)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=0, help="tokens already in the KV cache at decode")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    try:
        model = dense_model(a.params) if a.params is not None else get_model(a.model or "llama-3-8b")
        if (a.peak_tflops is None) != (a.bandwidth_tbs is None):
            raise ValueError("give both --peak-tflops and --bandwidth-tbs, or --hardware")
        if a.peak_tflops is not None:
            if a.hardware:
                raise ValueError("give either --hardware or --peak-tflops/--bandwidth-tbs, not both")
            _positive("--peak-tflops", a.peak_tflops)
            _positive("--bandwidth-tbs", a.bandwidth_tbs)
            cdt = a.compute_dtype or a.dtype
            hw: Hardware = Hardware("custom", {cdt: a.peak_tflops * 1e12},
                                    bandwidth=a.bandwidth_tbs * 1e12, memory_bytes=a.memory_gb * 1e9,
                                    kind="given")
        else:
            hw = get_hardware(a.hardware or "h100-sxm")
        r = summary(model, hw, a.dtype, a.prompt_tokens, a.batch, a.context, a.compute_dtype)
    except ValueError as err:
        print(f"python -m utils.roofline: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2) if a.json else format_summary(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

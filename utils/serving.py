"""A discrete-event simulator of an LLM serving engine, priced by the roofline.

Requests arrive (a seeded Poisson process or a trace), wait, get a slot and KV cache memory, have
their prompt prefilled and their answer decoded one token per engine step. A *policy* decides
what each step contains:

- `StaticBatching`: take a batch from the queue, run it until its longest answer ends; nobody
  joins a running batch.
- `ContinuousBatching` (Orca, iteration-level scheduling): every step, newly admitted requests
  prefill their whole prompt beside everyone else's decode token.
- `ChunkedPrefill` (Sarathi-Serve): every step carries all decode tokens first, then fills a
  token budget with pieces ("chunks") of waiting prompts.
- `Disaggregated` (DistServe, Splitwise): a pool of prefill GPUs and a pool of decode GPUs; each
  prompt's KV cache crosses a link of given bandwidth between the two.

The cost of a step is `utils.roofline.step_cost` for the sequences in it (max of compute time and
memory time, weights read once, KV cache read and written) plus an optional fixed overhead per
step. `_StepPricer` evaluates that same formula from running sums, so a step of 200 decoding
sequences costs O(1) Python; a test checks it equals `step_cost` bit for bit.

Conventions. The step that processes the last piece of a prompt emits the first output token at
its end; each later token comes from one decode step (its input is the previous token, read
against `prompt + k - 1` cached tokens for the k-th decode step). A request reserves KV cache
memory for `prompt + output` tokens when it is admitted (as if its length limit were exactly its
answer) and frees it when it ends, so nobody is ever preempted. Times are seconds; memory is bytes;
lengths are tokens. Metrics follow vLLM's benchmark definitions (see `SimResult.summary`).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from utils.hardware import Hardware, get_hardware
from utils.models import Model, get_model
from utils.roofline import kv_cache_bytes_per_token, weight_bytes

# ---- requests and workloads ---------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One user request: when it arrives (s) and how many tokens it reads and writes."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


LengthSpec = (int | tuple[int, int] | Sequence[int]
              | Callable[[np.random.Generator, int], Sequence[int]])


def _check_rate(rate_per_s: float) -> None:
    try:
        ok = float(rate_per_s) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"arrival rate must be a positive number of requests per second "
                         f"(math.inf: all at time 0), got {rate_per_s!r}")


def poisson_arrivals(n_requests: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """Arrival times (s) of a Poisson process: exponential gaps of mean 1 / rate, first at the
    first gap. `rate_per_s=math.inf` puts every request at time 0 (an offline batch)."""
    if not isinstance(n_requests, (int, np.integer)) or n_requests < 1:
        raise ValueError(f"n_requests must be a positive integer, got {n_requests!r}")
    _check_rate(rate_per_s)
    if math.isinf(rate_per_s):
        return np.zeros(n_requests)
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, n_requests))


def _lengths(spec: LengthSpec, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    if isinstance(spec, (int, np.integer)):
        out = np.full(n, int(spec))
    elif isinstance(spec, tuple) and len(spec) == 2 and all(
            isinstance(v, (int, np.integer)) for v in spec):
        low, high = spec
        if low > high:
            raise ValueError(f"{what}: range ({low}, {high}) has low > high")
        out = rng.integers(low, high + 1, n)
    elif callable(spec):
        out = np.asarray(spec(rng, n))
    else:
        out = np.asarray(spec)
    if out.shape != (n,):
        raise ValueError(f"{what}: need {n} lengths, got shape {out.shape}; give an int, a "
                         f"(low, high) range, a sequence of {n} ints or a function (rng, n) -> ints")
    if not np.issubdtype(out.dtype, np.integer) and not np.all(out == np.round(out)):
        raise ValueError(f"{what}: lengths must be whole numbers of tokens")
    if np.any(out < 1):
        raise ValueError(f"{what}: lengths must be at least 1 token, got {int(out.min())}")
    return out.astype(np.int64)


def mixed_lengths(short: int | tuple[int, int], long: int | tuple[int, int],
                  long_fraction: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    """A length distribution: mostly `short`, a `long_fraction` of them `long` (each an int or a
    (low, high) range), e.g. chat turns with the occasional pasted document."""
    if not 0 <= long_fraction <= 1:
        raise ValueError(f"long_fraction must be in [0, 1], got {long_fraction}")

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        is_long = rng.random(n) < long_fraction
        return np.where(is_long, _lengths(long, n, rng, "long"), _lengths(short, n, rng, "short"))

    return draw


def make_workload(n_requests: int, rate_per_s: float, prompt_tokens: LengthSpec,
                  output_tokens: LengthSpec, seed: int = 0) -> list[Request]:
    """`n_requests` requests with Poisson arrivals at `rate_per_s` and lengths drawn from the
    specs: an int (fixed), a (low, high) range (uniform, inclusive), a sequence (a trace) or a
    function (rng, n) -> lengths. One seed fixes everything."""
    arrivals = poisson_arrivals(n_requests, rate_per_s, seed)
    rng = np.random.default_rng([seed, 1])
    prompts = _lengths(prompt_tokens, n_requests, rng, "prompt_tokens")
    outputs = _lengths(output_tokens, n_requests, rng, "output_tokens")
    return [Request(i, float(a), int(p), int(o))
            for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))]


def workload_from_trace(arrivals_s: Sequence[float], prompt_tokens: Sequence[int],
                        output_tokens: Sequence[int]) -> list[Request]:
    """Requests from a recorded trace (three equally long sequences)."""
    if not (len(arrivals_s) == len(prompt_tokens) == len(output_tokens)):
        raise ValueError("arrivals_s, prompt_tokens and output_tokens must have the same length, "
                         f"got {len(arrivals_s)}, {len(prompt_tokens)}, {len(output_tokens)}")
    return [Request(i, float(a), int(p), int(o))
            for i, (a, p, o) in enumerate(zip(arrivals_s, prompt_tokens, output_tokens))]


# ---- policies -----------------------------------------------------------------------------


def _positive_int(owner: str, name: str, value: object) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class StaticBatching:
    """Wait until `batch_size` requests queue (or the oldest has waited `max_wait_s`), run that
    batch to completion (prefill together, then decode until the longest answer ends), repeat.
    Requests that finish early leave the step's work but their slot stays empty."""

    batch_size: int = 16
    max_wait_s: float = 0.0

    def __post_init__(self) -> None:
        _positive_int("StaticBatching", "batch_size", self.batch_size)
        if not self.max_wait_s >= 0:
            raise ValueError(f"StaticBatching: max_wait_s must be >= 0 s, got {self.max_wait_s}")

    @property
    def label(self) -> str:
        return f"static (batch {self.batch_size})"


@dataclass(frozen=True)
class ContinuousBatching:
    """Orca's iteration-level scheduling: before every step, admit queued requests (first come,
    first served, while slots and KV memory last); their whole prompts prefill in that step beside
    one decode token for every running request. `max_prefill_tokens` caps the prompt tokens
    admitted per step (the first prompt always goes)."""

    max_batch: int = 256
    max_prefill_tokens: int | None = None

    def __post_init__(self) -> None:
        _positive_int("ContinuousBatching", "max_batch", self.max_batch)
        if self.max_prefill_tokens is not None:
            _positive_int("ContinuousBatching", "max_prefill_tokens", self.max_prefill_tokens)

    @property
    def label(self) -> str:
        return "continuous"


@dataclass(frozen=True)
class ChunkedPrefill:
    """Sarathi-Serve: every step holds all decode tokens first, then fills what is left of
    `token_budget` with chunks of prompts (oldest first), so a long prompt spreads over steps."""

    token_budget: int = 512
    max_batch: int = 256

    def __post_init__(self) -> None:
        _positive_int("ChunkedPrefill", "token_budget", self.token_budget)
        _positive_int("ChunkedPrefill", "max_batch", self.max_batch)

    @property
    def label(self) -> str:
        return f"chunked (budget {self.token_budget})"


@dataclass(frozen=True)
class Disaggregated:
    """DistServe / Splitwise: `n_prefill` GPUs only prefill (whole prompts, up to
    `max_prefill_tokens` per step), `n_decode` GPUs only decode. After its prefill, a request
    reserves memory on the decode GPU with the most free memory, then its prompt's KV cache
    crosses the prefill GPU's link (one transfer at a time, `link_latency_s` +
    bytes / `link_bytes_per_s`) and it joins the next decode step."""

    n_prefill: int = 1
    n_decode: int = 1
    link_bytes_per_s: float = 50e9  # one 400 Gb/s InfiniBand port
    link_latency_s: float = 0.0
    max_prefill_tokens: int = 8192
    max_batch: int = 256

    def __post_init__(self) -> None:
        for name in ("n_prefill", "n_decode", "max_prefill_tokens", "max_batch"):
            _positive_int("Disaggregated", name, getattr(self, name))
        if not (self.link_bytes_per_s > 0):
            raise ValueError("Disaggregated: link_bytes_per_s must be a positive bandwidth in "
                             f"bytes/s (e.g. 50e9 for 400 Gb/s), got {self.link_bytes_per_s!r}")
        if not self.link_latency_s >= 0:
            raise ValueError(f"Disaggregated: link_latency_s must be >= 0 s, got "
                             f"{self.link_latency_s!r}")

    @property
    def label(self) -> str:
        return (f"disaggregated ({self.n_prefill}P+{self.n_decode}D, "
                f"{self.link_bytes_per_s / 1e9:g} GB/s)")


Policy = StaticBatching | ContinuousBatching | ChunkedPrefill | Disaggregated
POLICIES = (StaticBatching, ContinuousBatching, ChunkedPrefill, Disaggregated)


# ---- the cost of one step -----------------------------------------------------------------


class _StepPricer:
    """`utils.roofline.step_cost` from running sums. For chunks (new_i, context_i):
    flops = 2 N sum(new_i) + 4 L A sum(new_i context_i + new_i (new_i + 1) / 2),
    bytes = weights + KV bytes per token * sum(context_i + new_i). Every term is a whole number
    below 2**53, so the sums are exact in floating point and equal the roofline's bit for bit."""

    def __init__(self, model: Model, hw: Hardware, dtype: str, compute_dtype: str | None,
                 step_overhead_s: float) -> None:
        self.two_n = 2.0 * model.n_params
        self.four_la = 4.0 * model.n_layers * model.attn_dim
        self.weights = weight_bytes(model, dtype)
        self.kv_per_token = kv_cache_bytes_per_token(model, dtype)
        self.peak = hw.peak_flops(compute_dtype or dtype)
        self.bandwidth = hw.bandwidth
        self.overhead = step_overhead_s

    def times(self, new_tokens: int, pairs: int, kv_tokens: int) -> tuple[float, float]:
        """(compute seconds, memory seconds) of a step with these sums."""
        flops = self.two_n * new_tokens + self.four_la * pairs
        nbytes = self.weights
        nbytes += kv_tokens * self.kv_per_token
        return flops / self.peak, nbytes / self.bandwidth

    def chunk_seconds(self, chunks: Iterable[tuple[int, int]]) -> float:
        """Seconds of one step over (new_tokens, context) chunks, overhead included."""
        new = pairs = kv = 0
        for n, c in chunks:
            new += n
            pairs += n * c + n * (n + 1) // 2
            kv += c + n
        return max(self.times(new, pairs, kv)) + self.overhead


def step_seconds(chunks: Iterable[tuple[int, int]], model: Model | str = "llama-3-8b",
                 hw: Hardware | str = "h100-sxm", dtype: str = "bf16",
                 step_overhead_s: float = 0.0, compute_dtype: str | None = None) -> float:
    """The simulator's price of one step over (new_tokens, context) chunks: the roofline's
    max(compute, memory) seconds plus the fixed overhead."""
    pricer = _StepPricer(get_model(model), get_hardware(hw), dtype, compute_dtype, step_overhead_s)
    return pricer.chunk_seconds(chunks)


# ---- simulation state ---------------------------------------------------------------------


class _Seq:
    """A request in flight (mutable)."""

    __slots__ = ("req", "prompt", "output", "reserve", "done", "first_token", "finish",
                 "engine", "dec_engine", "dec_first", "dec_last")

    def __init__(self, req: Request, reserve: int) -> None:
        self.req = req
        self.prompt = req.prompt_tokens
        self.output = req.output_tokens
        self.reserve = reserve  # KV cache tokens held on the engine that decodes it
        self.done = 0  # prompt tokens prefilled so far
        self.first_token = math.nan
        self.finish = math.nan
        self.engine = -1  # where it prefills
        self.dec_engine = -1  # where it decodes
        self.dec_first = -1  # step index of its first decode step on dec_engine
        self.dec_last = -2


@dataclass(frozen=True)
class StepRecord:
    """One engine step, kept when `record_steps=True`: which requests were in it."""

    engine: str
    start_s: float
    end_s: float
    prefill: tuple[tuple[int, int], ...]  # (request id, prompt tokens processed)
    decode: tuple[int, ...]  # request ids that each decoded one token
    bound: str  # "compute" or "memory"


class _Engine:
    """One GPU: a queue, KV cache memory counted in tokens, running sequences, its step clock."""

    def __init__(self, name: str, index: int, role: str, kv_capacity: int,
                 waiting: deque[_Seq]) -> None:
        self.name, self.index, self.role = name, index, role  # role: mixed, prefill, decode
        self.kv_capacity = self.kv_free = kv_capacity
        self.waiting = waiting  # shared by a prefill pool
        self.prefilling: deque[_Seq] = deque()
        self.decoding: dict[int, _Seq] = {}
        self.n_dec = 0
        self.sum_ctx = 0  # sum of decode contexts of the next step
        self.finish_heap: list[tuple[int, int, _Seq]] = []
        self.incoming: list[_Seq] = []  # decode role: KV cache arrived, joins next step
        self.assigned = 0  # decode role: sequences placed here (in transit, incoming, decoding)
        self.busy = False
        self.closed_batch = False  # static batching: a batch is running
        self.wake_at = math.inf
        self.step_ends: list[float] = []
        self.step_chunks: list[tuple[_Seq, int]] = []
        self.step_start = 0.0
        self.link_free_at = 0.0  # prefill role: when its outgoing link is free

    def join_decode(self, seq: _Seq, first_step: int) -> None:
        seq.dec_engine, seq.dec_first = self.index, first_step
        seq.dec_last = first_step + seq.output - 2
        self.decoding[seq.req.id] = seq
        self.n_dec += 1
        self.sum_ctx += seq.prompt
        heapq.heappush(self.finish_heap, (seq.dec_last, seq.req.id, seq))


# ---- results and metrics ------------------------------------------------------------------


@dataclass(frozen=True)
class SLO:
    """Latency targets (seconds); None means no target. A request is 'good' if it meets all."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"SLO {name} must be a positive number of seconds or None, got {v}")


def _percentiles(prefix: str, values: np.ndarray) -> dict[str, float]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {f"{prefix}_{k}_s": math.nan for k in ("mean", "p50", "p90", "p99", "max")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {f"{prefix}_mean_s": float(values.mean()), f"{prefix}_p50_s": float(p50),
            f"{prefix}_p90_s": float(p90), f"{prefix}_p99_s": float(p99),
            f"{prefix}_max_s": float(values.max())}


@dataclass
class SimResult:
    """What happened to every request. Arrays are indexed like `requests`; times in seconds,
    NaN for rejected requests."""

    policy: str
    model: str
    hardware: str
    dtype: str
    n_gpus: int
    requests: list[Request]
    first_token_s: np.ndarray
    finish_s: np.ndarray
    rejected: np.ndarray  # bool: could never fit (only with reject_oversized=True)
    n_steps: int
    steps: list[StepRecord] | None = None
    _dec_engine: np.ndarray = field(default_factory=lambda: np.zeros(0, int), repr=False)
    _dec_first: np.ndarray = field(default_factory=lambda: np.zeros(0, int), repr=False)
    _dec_last: np.ndarray = field(default_factory=lambda: np.zeros(0, int), repr=False)
    _step_ends: list[np.ndarray] = field(default_factory=list, repr=False)

    @property
    def arrival_s(self) -> np.ndarray:
        return np.array([r.arrival_s for r in self.requests])

    @property
    def prompt_tokens(self) -> np.ndarray:
        return np.array([r.prompt_tokens for r in self.requests])

    @property
    def output_tokens(self) -> np.ndarray:
        return np.array([r.output_tokens for r in self.requests])

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token: first token time - arrival (queueing included)."""
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        """End-to-end latency: last token time - arrival."""
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first: (e2e - TTFT) / (output tokens - 1); NaN for
        one-token answers (vLLM's definition)."""
        out = self.output_tokens.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = (self.finish_s - self.first_token_s) / (out - 1)
        tpot[out <= 1] = math.nan
        return tpot

    def token_times(self, i: int) -> np.ndarray:
        """Times (s) at which request `i` (its index in `requests`) received each output token."""
        if self.rejected[i]:
            return np.zeros(0)
        e, a, b = self._dec_engine[i], self._dec_first[i], self._dec_last[i]
        decode = self._step_ends[e][a:b + 1] if e >= 0 else np.zeros(0)
        return np.concatenate(([self.first_token_s[i]], decode))

    @property
    def itl_s(self) -> np.ndarray:
        """Inter-token latencies: every gap between consecutive tokens of every request."""
        gaps = []
        for i in range(len(self.requests)):
            if not self.rejected[i] and self._dec_engine[i] >= 0:
                gaps.append(np.diff(self.token_times(i)))
        return np.concatenate(gaps) if gaps else np.zeros(0)

    @property
    def rejected_ids(self) -> list[int]:
        return [r.id for r, bad in zip(self.requests, self.rejected) if bad]

    def summary(self, slo: SLO | None = None) -> dict[str, float | int | str]:
        """vLLM-style summary. duration = last finish - first arrival (s); throughput = output
        tokens / duration; goodput = requests meeting every target in `slo` / duration (a
        one-token answer meets any TPOT target). Latencies: mean, p50, p90, p99 and max, in
        seconds, for TTFT, TPOT, ITL (every gap) and e2e."""
        done = ~self.rejected
        out = self.output_tokens
        duration = float(np.max(self.finish_s[done]) - np.min(self.arrival_s[done])) \
            if done.any() else 0.0
        n_done = int(done.sum())
        tokens = int(out[done].sum())
        s: dict[str, float | int | str] = {
            "policy": self.policy, "model": self.model, "hardware": self.hardware,
            "dtype": self.dtype, "n_gpus": self.n_gpus,
            "n_requests": len(self.requests), "n_completed": n_done,
            "n_rejected": int(self.rejected.sum()), "n_steps": self.n_steps,
            "duration_s": duration, "output_tokens": tokens,
            "throughput_tokens_per_s": tokens / duration if duration > 0 else math.nan,
            "total_tokens_per_s": (tokens + int(self.prompt_tokens[done].sum())) / duration
            if duration > 0 else math.nan,
            "request_throughput_per_s": n_done / duration if duration > 0 else math.nan,
        }
        s.update(_percentiles("ttft", self.ttft_s[done]))
        s.update(_percentiles("tpot", self.tpot_s[done]))
        s.update(_percentiles("itl", self.itl_s))
        s.update(_percentiles("e2e", self.e2e_s[done]))
        if slo is not None:
            good = done.copy()
            if slo.ttft_s is not None:
                good &= self.ttft_s <= slo.ttft_s
            if slo.tpot_s is not None:
                tpot = self.tpot_s
                good &= np.isnan(tpot) | (tpot <= slo.tpot_s)
            if slo.e2e_s is not None:
                good &= self.e2e_s <= slo.e2e_s
            n_good = int(good.sum())
            s["n_good"] = n_good
            s["goodput_req_per_s"] = n_good / duration if duration > 0 else math.nan
            s["goodput_req_per_s_per_gpu"] = s["goodput_req_per_s"] / self.n_gpus
        return s


# ---- the simulator ------------------------------------------------------------------------


class _Simulation:
    def __init__(self, requests: list[Request], policy: Policy, model: Model, hw: Hardware,
                 dtype: str, pricer: _StepPricer, memory_fraction: float,
                 reject_oversized: bool, record_steps: bool, replicas: int = 1) -> None:
        self.policy, self.pricer = policy, pricer
        self.requests = requests
        self.record_steps = record_steps
        self.steps: list[StepRecord] | None = [] if record_steps else None
        kv_bytes = memory_fraction * hw.memory_bytes - weight_bytes(model, dtype)
        if kv_bytes < 0:
            raise ValueError(
                f"{model.name} in {dtype} needs {weight_bytes(model, dtype) / 1e9:.1f} GB of "
                f"weights, more than {memory_fraction:g} x {hw.memory_bytes / 1e9:.0f} GB of "
                f"{hw.name}: choose a smaller model or dtype, a bigger GPU, or raise "
                f"memory_fraction")
        kvpt = pricer.kv_per_token
        capacity = int(kv_bytes // kvpt) if kvpt > 0 else sys.maxsize
        max_len = getattr(model, "max_seq_len", sys.maxsize)

        disagg = isinstance(policy, Disaggregated)
        self.seqs: list[_Seq] = []
        self.rejected = np.zeros(len(requests), bool)
        too_big = []
        for i, r in enumerate(requests):
            total = r.prompt_tokens + r.output_tokens
            if total > capacity or total > max_len:
                too_big.append(i)
            self.seqs.append(_Seq(r, total))
        if too_big:
            r = requests[too_big[0]]
            why = (f"request {r.id} needs {r.prompt_tokens} + {r.output_tokens} tokens of KV cache "
                   f"({(r.prompt_tokens + r.output_tokens) * kvpt / 1e9:.2f} GB), but ")
            why += (f"{model.name} handles at most {max_len} tokens" if
                    r.prompt_tokens + r.output_tokens > max_len else
                    f"{hw.name} has room for {capacity} tokens beside the weights "
                    f"({memory_fraction:g} x {hw.memory_bytes / 1e9:.0f} GB - "
                    f"{weight_bytes(model, dtype) / 1e9:.1f} GB)")
            if not reject_oversized:
                raise ValueError(f"{len(too_big)} request(s) can never fit: {why}. Shorten them, "
                                 "pick more memory, or pass reject_oversized=True to report them "
                                 "as rejected")
            self.rejected[too_big] = True

        self.prefill_queue: deque[_Seq] = deque()
        self.decode_queue: deque[_Seq] = deque()  # disaggregated: prefilled, awaiting a decode GPU
        self.disaggregated = disagg
        if disagg:
            self.prefill_engines = [
                _Engine(f"prefill-{k}", k, "prefill", capacity, self.prefill_queue)
                for k in range(policy.n_prefill)]
            self.decode_engines = [
                _Engine(f"decode-{k}", policy.n_prefill + k, "decode", capacity, deque())
                for k in range(policy.n_decode)]
            self.engines = self.prefill_engines + self.decode_engines
        else:  # data-parallel replicas, each with its own queue
            self.engines = [_Engine(f"gpu-{k}", k, "mixed", capacity,
                                    self.prefill_queue if replicas == 1 else deque())
                            for k in range(replicas)]
        self.heap: list[tuple[float, int, int, object]] = []
        self.counter = itertools.count()

    # -- events --
    _STEP_DONE, _TRANSFER_DONE, _WAKE = 0, 1, 2

    def push(self, t: float, kind: int, obj: object) -> None:
        heapq.heappush(self.heap, (t, next(self.counter), kind, obj))

    def run(self) -> None:
        order = sorted((s for s, bad in zip(self.seqs, self.rejected) if not bad),
                       key=lambda s: (s.req.arrival_s, s.req.id))
        i, n = 0, len(order)
        heap = self.heap
        while i < n or heap:
            now = min(order[i].req.arrival_s if i < n else math.inf,
                      heap[0][0] if heap else math.inf)
            while i < n and order[i].req.arrival_s <= now:
                if len(self.engines) > 1 and not self.disaggregated:
                    # route to the replica with the least work queued or running
                    target = min(self.engines, key=lambda e: len(e.waiting) + e.n_dec
                                 + len(e.prefilling) + len(e.step_chunks))
                    target.waiting.append(order[i])
                else:
                    self.prefill_queue.append(order[i])
                i += 1
            while heap and heap[0][0] <= now:
                _, _, kind, obj = heapq.heappop(heap)
                if kind == self._STEP_DONE:
                    self.finish_step(obj, now)
                elif kind == self._TRANSFER_DONE:
                    seq = obj
                    self.prefill_engines[seq.engine].kv_free += seq.prompt
                    self.engines[seq.dec_engine].incoming.append(seq)
                else:  # a static batch's wait is over
                    obj.wake_at = math.inf
            if self.disaggregated:
                self.dispatch(now)
            for e in self.engines:
                if not e.busy:
                    self.start_step(e, now)
        stuck = [s.req.id for s, bad in zip(self.seqs, self.rejected)
                 if not bad and math.isnan(s.finish)]
        if stuck:  # a scheduler bug, never a user error
            raise RuntimeError(f"simulation ended with {len(stuck)} unfinished requests, e.g. "
                               f"{stuck[:5]}")

    # -- one step --
    def start_step(self, e: _Engine, now: float) -> None:
        p = self.policy
        chunks: list[tuple[_Seq, int]] = []
        if e.role == "decode":
            for seq in e.incoming:
                e.join_decode(seq, len(e.step_ends))
            e.incoming.clear()
        elif isinstance(p, StaticBatching):
            if not e.closed_batch and e.waiting:
                ready = (len(e.waiting) >= p.batch_size
                         or now >= e.waiting[0].req.arrival_s + p.max_wait_s)
                if not ready:
                    wake = e.waiting[0].req.arrival_s + p.max_wait_s
                    if wake < e.wake_at:
                        e.wake_at = wake
                        self.push(wake, self._WAKE, e)
                    return
                while e.waiting and len(chunks) < p.batch_size and e.waiting[0].reserve <= e.kv_free:
                    seq = e.waiting.popleft()
                    e.kv_free -= seq.reserve
                    chunks.append((seq, seq.prompt))
                e.closed_batch = True
        elif isinstance(p, ChunkedPrefill):
            budget = p.token_budget - e.n_dec
            for seq in e.prefilling:
                if budget <= 0:
                    break
                c = min(seq.prompt - seq.done, budget)
                chunks.append((seq, c))
                budget -= c
            slots = p.max_batch - e.n_dec - len(e.prefilling)
            while budget > 0 and slots > 0 and e.waiting and e.waiting[0].reserve <= e.kv_free:
                seq = e.waiting.popleft()
                e.kv_free -= seq.reserve
                e.prefilling.append(seq)
                c = min(seq.prompt, budget)
                chunks.append((seq, c))
                budget -= c
                slots -= 1
        else:  # continuous batching, or a prefill GPU: whole prompts
            cap = p.max_prefill_tokens
            reserve_prompt_only = e.role == "prefill"
            slots = p.max_batch - e.n_dec
            tokens = 0
            while slots > 0 and e.waiting:
                seq = e.waiting[0]
                need = seq.prompt if reserve_prompt_only else seq.reserve
                if need > e.kv_free or (cap is not None and chunks and tokens + seq.prompt > cap):
                    break
                e.waiting.popleft()
                e.kv_free -= need
                chunks.append((seq, seq.prompt))
                tokens += seq.prompt
                slots -= 1
        if not chunks and e.n_dec == 0:
            if isinstance(p, StaticBatching):
                e.closed_batch = False
            return
        # price it: all decodes (one new token each) plus the prefill chunks
        new = e.n_dec
        pairs = kv = e.sum_ctx + e.n_dec
        for seq, c in chunks:
            seq.engine = e.index
            new += c
            pairs += c * seq.done + c * (c + 1) // 2
            kv += seq.done + c
        compute_s, memory_s = self.pricer.times(new, pairs, kv)
        end = now + max(compute_s, memory_s) + self.pricer.overhead
        e.busy, e.step_start, e.step_chunks = True, now, chunks
        if self.steps is not None:
            self.steps.append(StepRecord(
                e.name, now, end, tuple((s.req.id, c) for s, c in chunks),
                tuple(e.decoding), "compute" if compute_s >= memory_s else "memory"))
        self.push(end, self._STEP_DONE, e)

    def finish_step(self, e: _Engine, now: float) -> None:
        s = len(e.step_ends)
        e.step_ends.append(now)
        e.busy = False
        e.sum_ctx += e.n_dec
        heap = e.finish_heap
        while heap and heap[0][0] == s:
            _, _, seq = heapq.heappop(heap)
            seq.finish = now
            e.sum_ctx -= seq.prompt + (s - seq.dec_first) + 1
            e.n_dec -= 1
            e.assigned -= 1
            del e.decoding[seq.req.id]
            e.kv_free += seq.reserve
        for seq, c in e.step_chunks:
            seq.done += c
            if seq.done < seq.prompt:
                continue
            if e.prefilling and e.prefilling[0] is seq:
                e.prefilling.popleft()
            seq.first_token = now
            if e.role == "prefill":
                if seq.output == 1:
                    seq.finish = now
                    e.kv_free += seq.prompt
                else:
                    self.decode_queue.append(seq)
            elif seq.output == 1:
                seq.finish = now
                e.kv_free += seq.reserve
            else:
                e.join_decode(seq, s + 1)
        e.step_chunks = []
        if isinstance(self.policy, StaticBatching) and e.n_dec == 0:
            e.closed_batch = False

    def dispatch(self, now: float) -> None:
        """Disaggregated: give prefilled requests (oldest first) a decode GPU and a transfer."""
        p = self.policy
        q = self.decode_queue
        while q:
            seq = q[0]
            best = max((d for d in self.decode_engines if d.assigned < p.max_batch),
                       key=lambda d: d.kv_free, default=None)
            if best is None or best.kv_free < seq.reserve:
                return
            q.popleft()
            best.kv_free -= seq.reserve
            best.assigned += 1
            seq.dec_engine = best.index
            src = self.prefill_engines[seq.engine]
            start = max(now, src.link_free_at)
            end = start + p.link_latency_s + seq.prompt * self.pricer.kv_per_token / p.link_bytes_per_s
            src.link_free_at = end
            self.push(end, self._TRANSFER_DONE, seq)

    def result(self, model: Model, hw: Hardware, dtype: str) -> SimResult:
        seqs = self.seqs
        return SimResult(
            policy=self.policy.label, model=model.name, hardware=hw.name, dtype=dtype,
            n_gpus=len(self.engines), requests=self.requests,
            first_token_s=np.array([s.first_token for s in seqs]),
            finish_s=np.array([s.finish for s in seqs]),
            rejected=self.rejected,
            n_steps=sum(len(e.step_ends) for e in self.engines),
            steps=self.steps,
            _dec_engine=np.array([s.dec_engine if s.output > 1 else -1 for s in seqs], int),
            _dec_first=np.array([s.dec_first for s in seqs], int),
            _dec_last=np.array([s.dec_last for s in seqs], int),
            _step_ends=[np.array(e.step_ends) for e in self.engines],
        )


def _check_requests(requests: Sequence[Request]) -> list[Request]:
    reqs = list(requests)
    if not reqs:
        raise ValueError("no requests to simulate: give at least one Request")
    seen = set()
    for r in reqs:
        if not isinstance(r, Request):
            raise ValueError(f"requests must be Request objects, got {type(r).__name__}")
        if r.id in seen:
            raise ValueError(f"request id {r.id} appears twice: ids must be unique")
        seen.add(r.id)
        if not (math.isfinite(r.arrival_s) and r.arrival_s >= 0):
            raise ValueError(f"request {r.id}: arrival_s must be a finite time >= 0 s, "
                             f"got {r.arrival_s}")
        for name in ("prompt_tokens", "output_tokens"):
            v = getattr(r, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"request {r.id}: {name} must be an integer >= 1, got {v!r}")
    return reqs


def simulate(requests: Sequence[Request], policy: Policy, *, model: Model | str = "llama-3-8b",
             hw: Hardware | str = "h100-sxm", dtype: str = "bf16",
             compute_dtype: str | None = None, step_overhead_s: float = 0.0,
             memory_fraction: float = 0.9, replicas: int = 1, reject_oversized: bool = False,
             record_steps: bool = False) -> SimResult:
    """Serve `requests` with `policy` on `model` running on `hw` (one GPU per engine; a
    `Hardware` record measured by `utils.profile` works as well as a spec sheet).

    step_overhead_s: fixed seconds added to every step (kernel launches, scheduling).
    memory_fraction: share of `hw.memory_bytes` for weights + KV cache (vLLM's default 0.9).
    replicas: copies of the engine (one GPU each) for the colocated policies; each arrival goes
    to the replica with the fewest requests waiting or running (a fair match for the GPU count
    of `Disaggregated`).
    reject_oversized: report requests whose KV cache can never fit as rejected instead of
    raising ValueError. record_steps: keep a `StepRecord` per step (for timelines).
    Every input is checked before the first step is simulated.
    """
    if not isinstance(policy, POLICIES):
        raise ValueError(f"unknown policy {policy!r}: use StaticBatching, ContinuousBatching, "
                         "ChunkedPrefill or Disaggregated")
    if not (step_overhead_s >= 0 and math.isfinite(step_overhead_s)):
        raise ValueError(f"step_overhead_s must be a finite number of seconds >= 0, "
                         f"got {step_overhead_s!r}")
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction!r}")
    _positive_int("simulate", "replicas", replicas)
    if replicas > 1 and isinstance(policy, Disaggregated):
        raise ValueError("replicas is for the colocated policies; size a Disaggregated policy "
                         "with n_prefill and n_decode")
    m, h = get_model(model), get_hardware(hw)
    reqs = _check_requests(requests)
    pricer = _StepPricer(m, h, dtype, compute_dtype, step_overhead_s)
    sim = _Simulation(reqs, policy, m, h, dtype, pricer, memory_fraction, reject_oversized,
                      record_steps, replicas)
    sim.run()
    return sim.result(m, h, dtype)


# ---- sweeps and the benchmark -------------------------------------------------------------


def sweep_load(policies: Sequence[Policy], rates_per_s: Sequence[float],
               make_requests: Callable[[float], Sequence[Request]],
               slo: SLO | None = None, **simulate_kwargs: object) -> list[dict]:
    """Latency against load: for every rate and policy, `simulate(make_requests(rate), policy)`
    and return one summary row (with 'rate_per_s' added) per pair."""
    rows = []
    for rate in rates_per_s:
        _check_rate(rate)
        reqs = make_requests(rate)
        for p in policies:
            row = simulate(reqs, p, **simulate_kwargs).summary(slo)
            row["rate_per_s"] = float(rate)
            rows.append(row)
    return rows


def bench_serving(n_requests: int = 10_000, repeats: int = 3) -> dict[str, object]:
    """Seconds of CPU to simulate `n_requests` requests with each policy (median of `repeats`).
    Workload: Llama-3-8B on an H100 SXM in bf16, Poisson arrivals at 20 requests/s, prompts of
    128-2,048 tokens, answers of 32-512 tokens, seed 0."""
    from utils.timing import median, time_fn

    reqs = make_workload(n_requests, 20.0, (128, 2048), (32, 512), seed=0)
    policies: list[Policy] = [StaticBatching(32), ContinuousBatching(), ChunkedPrefill(512),
                              Disaggregated(1, 1)]
    rows = []
    for p in policies:
        holder: dict[str, SimResult] = {}

        def run(p: Policy = p, holder: dict = holder) -> None:
            holder["r"] = simulate(reqs, p)

        times = time_fn(run, device="cpu", warmup=0, repeats=repeats)
        r = holder["r"]
        rows.append({"policy": p.label, "n_requests": n_requests, "seconds": median(times),
                     "steps": r.n_steps, "output_tokens": int(r.output_tokens.sum()),
                     "simulated_s": r.summary()["duration_s"]})
    return {"benchmark": "serving", "workload": "llama-3-8b, h100-sxm, bf16, 20 req/s, "
            "prompts 128-2048, outputs 32-512, seed 0", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m utils.serving",
                                 description="Simulate an LLM serving engine on the roofline.")
    ap.add_argument("--bench", action="store_true",
                    help="time the simulator on 10,000 requests per policy and exit")
    ap.add_argument("--requests", type=int, default=None, help="number of requests")
    ap.add_argument("--rate", type=float, default=5.0, help="arrival rate, requests/s")
    ap.add_argument("--prompt", type=int, default=1000, help="prompt tokens")
    ap.add_argument("--output", type=int, default=200, help="output tokens")
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args(argv)
    try:
        if a.bench:
            out = bench_serving(a.requests or 10_000)
            print(f"serving simulator, {out['workload']}")
            for row in out["rows"]:
                print(f"  {row['policy']:<38} {row['n_requests']} requests, {row['steps']} steps "
                      f"in {row['seconds']:.2f} s of CPU")
            return 0
        reqs = make_workload(a.requests or 500, a.rate, a.prompt, a.output, seed=0)
        for p in (StaticBatching(), ContinuousBatching(), ChunkedPrefill(), Disaggregated()):
            s = simulate(reqs, p, model=a.model, hw=a.hardware, dtype=a.dtype).summary()
            print(f"{s['policy']:<38} TTFT p50 {s['ttft_p50_s'] * 1e3:8.1f} ms  "
                  f"p99 {s['ttft_p99_s'] * 1e3:8.1f} ms | TPOT p50 {s['tpot_p50_s'] * 1e3:6.2f} ms "
                  f"p99 {s['tpot_p99_s'] * 1e3:6.2f} ms | {s['throughput_tokens_per_s']:8.0f} tok/s")
    except ValueError as err:
        print(f"python -m utils.serving: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

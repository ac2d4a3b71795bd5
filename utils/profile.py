"""Measure your own kitchen: the device's memory bandwidth and FLOP/s, and the model's TTFT/TPOT.

Two kinds of measurement live here.

1. The device's own roofline. `measure_bandwidth` reads (and copies) a buffer much larger than
   the caches; `measure_matmul_flops` times a large square matrix product. `measure_hardware`
   turns both into a `utils.hardware.Hardware` record with kind "measured", which every roofline
   function accepts next to the spec-sheet records.
2. Sweeps on the model: TTFT against prompt length, TPOT against batch size and context length,
   decode with and without the KV cache, TPOT against model size. Each returns a `Sweep` of plain
   records (JSON-ready), each record holding the measured median, its samples, and the roofline
   prediction made from the measured Hardware record, so a notebook can plot both.

Counting conventions (the same as utils.roofline):
- read bandwidth = buffer bytes / seconds to reduce the buffer (every byte read once);
- copy bandwidth = 2 x buffer bytes / seconds (read once, written once; the extra read a CPU
  does to own a cache line before writing it is not counted, as in the STREAM benchmark);
- GEMM FLOP/s = 2 n^3 / seconds for an (n x n) @ (n x n) product (a multiply-add is 2 FLOP).
Every record carries `utils.device.describe(device, dtype)`: device, its name, dtype, threads,
library versions.

Command line (writes one JSON file; see results/README.md for the reference files):
    python -m utils.profile --out results.json [--device cuda|cpu] [--dtype fp32] [--quick]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from utils import roofline
from utils.cli import Parser
from utils.device import describe, device_name, dtype_name, pick_device, synchronize, to_torch_dtype
from utils.hardware import Hardware, bytes_per_element
from utils.models import ModelShape, get_model
from utils.timing import Stopwatch, median, time_fn

GB = 1e9
MiB = 2**20

# ---- bad input: checked before any long work ---------------------------------------------------


def native_low_precision(device: str | torch.device, dtype: torch.dtype) -> bool:
    """True when `device` runs matmuls in `dtype` at full speed (fp32 always does).

    On a CPU, bf16 needs AVX512-BF16/AMX and fp16 needs AVX512-FP16/AMX; without them PyTorch
    emulates the math and a matmul can run 10-100x slower than in fp32. On CUDA, bf16 needs
    compute capability 8.0 (Ampere) or later; fp16 runs everywhere.
    """
    dev = torch.device(device)
    if dtype == torch.float32:
        return True
    if dev.type == "cuda":
        return dtype != torch.bfloat16 or torch.cuda.is_bf16_supported()
    mkldnn = torch.ops.mkldnn
    try:
        if dtype == torch.bfloat16:
            return bool(mkldnn._is_mkldnn_bf16_supported())
        if dtype == torch.float16:
            return bool(mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):
        return False
    return False


def resolve_dtype(device: str | torch.device, dtype: str | torch.dtype | None = None,
                  force: bool = False) -> torch.dtype:
    """The dtype to measure in: `dtype` (None: the device's default), but a low precision the
    device cannot run natively is replaced by fp32 with a warning, unless `force=True`."""
    dev = torch.device(device)
    wanted = to_torch_dtype(dtype, dev)
    if force or wanted == torch.float32 or native_low_precision(dev, wanted):
        return wanted
    warnings.warn(
        f"{dtype_name(wanted)} matmuls have no native support on this {dev.type} "
        f"({device_name(dev)}): they would be emulated and run many times slower than fp32, "
        "so this measurement uses fp32 instead (pass force=True, or --force, to insist)",
        RuntimeWarning, stacklevel=2)
    return torch.float32


def available_memory_bytes(device: str | torch.device) -> float:
    """Bytes that can still be allocated on `device`: free GPU memory, or the operating
    system's MemAvailable (RAM not in use, page cache included) on a CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return float(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("inf")  # unknown (e.g. Windows): do not block the run


def total_memory_bytes(device: str | torch.device) -> float:
    """Capacity of the device's memory: GPU memory, or installed RAM on a CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return float(torch.cuda.get_device_properties(dev).total_memory)
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("nan")


def check_fits(model: ModelShape | str, device: str | torch.device, dtype: str | torch.dtype,
               extra_bytes: float = 0.0, fraction: float = 0.8) -> float:
    """Raise ValueError, before anything is allocated, if the weights of `model` in `dtype` plus
    `extra_bytes` (KV cache, activations) exceed `fraction` of the memory still available on
    `device`. Returns the bytes needed."""
    shape = get_model(model)
    dev = torch.device(device)
    name = dtype if isinstance(dtype, str) else dtype_name(dtype)
    need = roofline.weight_bytes(shape, name) + extra_bytes
    free = available_memory_bytes(dev)
    if need > fraction * free:
        raise ValueError(
            f"{shape.name} in {name} needs {need / GB:.2f} GB (weights "
            f"{roofline.weight_bytes(shape, name) / GB:.2f} GB + KV cache and activations "
            f"{extra_bytes / GB:.2f} GB) but only {free / GB:.2f} GB of {dev.type} memory is "
            f"available (this check allows {fraction:.0%} of it): choose a smaller model, a "
            "shorter context or batch, or a larger device")
    return need


# ---- the device's own roofline ------------------------------------------------------------------


def default_buffer_bytes(device: str | torch.device, quick: bool = False) -> int:
    """A buffer far larger than every cache: 512 MB on a CPU (256 MB quick; L3 caches are tens of
    MB), 1 GiB on a GPU (512 MiB quick; an H100's L2 is 50 MB); never over a quarter of the
    memory available."""
    dev = torch.device(device)
    if dev.type == "cuda":
        want = 512 * MiB if quick else 1024 * MiB
    else:
        want = 256 * MiB if quick else 512 * MiB
    cap = available_memory_bytes(dev) / 4
    return int(min(want, cap)) // 4096 * 4096


def read_buffer(device: str | torch.device, nbytes: int) -> torch.Tensor:
    """An fp32 buffer of `nbytes` bytes with every page written (untouched pages of a fresh
    allocation can all map to one zeroed page and be read from cache)."""
    if nbytes < 4096:
        raise ValueError(f"buffer of {nbytes} bytes is too small to measure bandwidth: give at "
                         "least 4096 bytes, and far more than the last-level cache")
    return torch.ones(nbytes // 4, dtype=torch.float32, device=device)


#: Reductions that read every element of a 1-D fp32 buffer once. Which one streams fastest
#: depends on the library build and the machine, so a reading takes the fastest of them: a slow
#: reduction kernel must not pass for slow memory (which would flatter every ratio against it).
def _gemv_read(buffer: torch.Tensor) -> object:
    """The buffer as a (n / 1024, 1024) matrix times a vector: a decode step's kind of read. On
    a CPU in fp32 through numpy's BLAS, the library utils.llama's decode path uses. Buffers from
    read_buffer hold a multiple of 1024 elements, so every byte is read."""
    rows = buffer.numel() // 1024
    matrix = buffer[: rows * 1024].view(rows, 1024)
    if buffer.device.type == "cpu" and buffer.dtype == torch.float32:
        return matrix.numpy() @ np.ones(1024, dtype=np.float32)
    return torch.mv(matrix, torch.ones(1024, dtype=buffer.dtype, device=buffer.device))


READ_KERNELS: dict[str, Callable[[torch.Tensor], object]] = {
    "sum": lambda b: b.sum(),
    "amax": lambda b: b.amax(),
    "dot": lambda b: torch.dot(b, b),  # the same memory twice: each cache line is loaded once
    "gemv": _gemv_read,
}


def time_read(buffer: torch.Tensor, kernel: str = "best") -> float:
    """Seconds to read every byte of `buffer` once: with one of READ_KERNELS, or "best" (each
    kernel once, the fastest)."""
    if kernel == "best":
        return min(time_read(buffer, k) for k in READ_KERNELS)
    if kernel not in READ_KERNELS:
        raise ValueError(f"unknown read kernel {kernel!r}: choose best, {', '.join(READ_KERNELS)}")
    with Stopwatch(buffer.device) as sw:
        READ_KERNELS[kernel](buffer)
    return sw.seconds


#: Seconds to wait on a CPU when work passes from one thread pool to the other (PyTorch's
#: OpenMP pool, numpy's BLAS pool). Each keeps its idle workers spinning after it finishes,
#: and a read started while the other pool still spins gets part of a core: on the course's
#: 2-core machine a read right after the other library's work measured 25-30 GB/s, one after
#: a 0.1 s pause 38-41 GB/s.
SETTLE_SECONDS = 0.1


def settle(device: str | torch.device) -> None:
    """Let the other thread pool's spinning workers go idle (CPU only; a no-op on a GPU)."""
    if torch.device(device).type == "cpu":
        time.sleep(SETTLE_SECONDS)


def time_copy(src: torch.Tensor, dst: torch.Tensor) -> float:
    """Seconds to copy `src` into `dst` (reads src once, writes dst once)."""
    with Stopwatch(src.device) as sw:
        dst.copy_(src)
    return sw.seconds


@dataclass
class BandwidthMeasurement:
    """Memory bandwidth in bytes/s, with the samples (seconds) it came from. read_seconds holds,
    per repeat, the fastest of the read kernels; read_kernel_seconds every kernel's samples."""

    read_bytes_per_s: float
    copy_bytes_per_s: float
    buffer_bytes: int
    read_seconds: list[float]
    copy_seconds: list[float]
    read_kernel_seconds: dict[str, list[float]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_bandwidth(device: str | torch.device = "cpu", *, buffer_bytes: int | None = None,
                      repeats: int = 5, warmup: int = 1, quick: bool = False
                      ) -> BandwidthMeasurement:
    """Read and copy bandwidth of `device`'s memory, in bytes/s (medians of `repeats` runs).

    Read: a reduction over an fp32 buffer of `buffer_bytes` (default: `default_buffer_bytes`),
    every byte read once, on all CPU threads or the whole GPU; each repeat runs every kernel of
    READ_KERNELS and keeps the fastest (on a CPU, numpy's gemv between pauses: see settle).
    Copy: the buffer into a second one, 2 x buffer_bytes moved.
    """
    dev = pick_device(device)
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    nbytes = buffer_bytes or default_buffer_bytes(dev, quick)
    if 3 * nbytes > available_memory_bytes(dev):
        raise ValueError(f"a {nbytes / GB:.2f} GB buffer (and its copy) does not fit in the "
                         f"{available_memory_bytes(dev) / GB:.2f} GB available: pass a smaller "
                         "buffer_bytes")
    src = read_buffer(dev, nbytes)
    dst = torch.empty_like(src)
    dst.fill_(0.0)
    nbytes = src.numel() * src.element_size()
    for _ in range(warmup):
        time_read(src)
        time_copy(src, dst)
    kernels: dict[str, list[float]] = {k: [] for k in READ_KERNELS}
    reads, copies = [], []
    for _ in range(repeats):  # alternate, so a noisy moment hits both alike
        for k, times in kernels.items():
            if k == "gemv":  # numpy's BLAS: after and before PyTorch's pool, let it settle
                settle(dev)
            times.append(time_read(src, k))
            if k == "gemv":
                settle(dev)
        reads.append(min(times[-1] for times in kernels.values()))
        copies.append(time_copy(src, dst))
    del src, dst
    return BandwidthMeasurement(nbytes / median(reads), 2 * nbytes / median(copies), nbytes,
                                reads, copies, kernels, describe(dev, torch.float32))


def default_gemm_size(device: str | torch.device, quick: bool = False) -> int:
    """Square GEMM size n: 2048 on a CPU (17 GFLOP, ~0.1 s), 8192 on a GPU (4096 quick)."""
    if torch.device(device).type == "cuda":
        return 4096 if quick else 8192
    return 2048


@dataclass
class MatmulMeasurement:
    """Dense matrix-product throughput in FLOP/s for one dtype, with its samples (seconds)."""

    flops_per_s: float
    n: int
    dtype: str
    seconds: list[float]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def flops(self) -> float:
        """FLOP of one (n x n) @ (n x n) product."""
        return 2.0 * self.n**3

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gemm_operands(device: str | torch.device, dtype: torch.dtype, n: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two random (n x n) matrices and an output buffer, seeded."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    return a, b, torch.empty(n, n, device=device, dtype=dtype)


def time_matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> float:
    """Seconds for one a @ b written into `out`."""
    with Stopwatch(a.device) as sw:
        torch.mm(a, b, out=out)
    return sw.seconds


def measure_matmul_flops(device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
                         *, n: int | None = None, repeats: int = 5, warmup: int = 2,
                         quick: bool = False, force: bool = False) -> MatmulMeasurement:
    """FLOP/s of a large square matrix product in `dtype` (median of `repeats`; 2 n^3 FLOP each).

    dtype None: the device's default (fp32 on CPU). A dtype the device cannot run natively is
    replaced by fp32 with a warning unless force=True (see `resolve_dtype`).
    """
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype, force)
    size = n or default_gemm_size(dev, quick)
    if size < 16:
        raise ValueError(f"GEMM size n must be at least 16, got {size}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    a, b, out = gemm_operands(dev, torch_dtype, size)
    for _ in range(warmup):
        time_matmul(a, b, out)
    seconds = [time_matmul(a, b, out) for _ in range(repeats)]
    return MatmulMeasurement(2.0 * size**3 / median(seconds), size, dtype_name(torch_dtype),
                             seconds, describe(dev, torch_dtype))


def measure_hardware(device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
                     quick: bool = True) -> Hardware:
    """This device as a `Hardware` record of kind "measured": read bandwidth (bytes/s) and GEMM
    FLOP/s in `dtype` (None: the device's default). Cached per process and arguments; quick mode
    takes a few seconds on a 2-core CPU."""
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype)
    return _measure_hardware(str(dev), dtype_name(torch_dtype), bool(quick))


@functools.cache
def _measure_hardware(device: str, dtype: str, quick: bool) -> Hardware:
    dev = torch.device(device)
    repeats = 3 if quick else 7
    bw = measure_bandwidth(dev, repeats=repeats, quick=quick)
    mm = measure_matmul_flops(dev, dtype, repeats=repeats, warmup=1 if quick else 2, quick=quick)
    return hardware_record(dev, bw, mm, quick=quick)


def hardware_record(device: str | torch.device, bandwidth: BandwidthMeasurement,
                    matmul: MatmulMeasurement | Sequence[MatmulMeasurement],
                    quick: bool = False) -> Hardware:
    """A measured `Hardware` record from bandwidth and GEMM measurements (one per dtype)."""
    dev = torch.device(device)
    mms = [matmul] if isinstance(matmul, MatmulMeasurement) else list(matmul)
    name = f"{dev.type} ({device_name(dev)}), measured"
    return Hardware(
        name, {m.dtype: m.flops_per_s for m in mms}, bandwidth=bandwidth.read_bytes_per_s,
        memory_bytes=total_memory_bytes(dev), kind="measured", source="utils.profile",
        notes=(f"read bandwidth of a {bandwidth.buffer_bytes / 1e6:.0f} MB buffer; dense GEMM "
               + ", ".join(f"{m.dtype} n={m.n}" for m in mms)),
        extra={"copy_bandwidth": bandwidth.copy_bytes_per_s,
               "buffer_bytes": bandwidth.buffer_bytes,
               "gemm_n": {m.dtype: m.n for m in mms},
               "quick": quick, **describe(dev, None)},
    )


def hardware_to_dict(hw: Hardware) -> dict[str, Any]:
    """A Hardware record as plain JSON-ready data."""
    return asdict(hw)


# ---- timing the model ---------------------------------------------------------------------------


def model_device(model: Any) -> torch.device:
    return model.output.weight.device


def model_dtype(model: Any) -> torch.dtype:
    return model.output.weight.dtype


def ensure_cache(model: Any, batch: int, length: int, exact: bool = False) -> None:
    """Give `model` a KV cache of at least `batch` rows and `length` slots (exactly that with
    exact=True). A cache that does not qualify is replaced by one of exactly (batch, length),
    after checking that it fits in memory."""
    if length > model.config.max_seq_len:
        raise ValueError(f"{length} positions exceed the context of {model.config.name} "
                         f"({model.config.max_seq_len} tokens): use shorter prompts or contexts")
    if exact and (model.max_batch_size, model.max_seq_len) == (batch, length):
        return
    if not exact and model.max_batch_size >= batch and model.max_seq_len >= length:
        return
    dev, dt = model_device(model), dtype_name(model_dtype(model))
    need = batch * length * roofline.kv_cache_bytes_per_token(model.config, dt)
    free = available_memory_bytes(dev) + model.kv_cache_bytes()  # the old cache is freed first
    if need > 0.8 * free:
        raise ValueError(f"a KV cache of {batch} x {length} tokens for {model.config.name} in {dt} "
                         f"needs {need / GB:.2f} GB but only {free / GB:.2f} GB of {dev.type} "
                         "memory is available: use a smaller batch or shorter context")
    model.setup_caches(batch, length)


def random_tokens(model: Any, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """(batch, length) random token ids on the model's device (seeded)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=gen)
    return ids.to(model_device(model))


@torch.no_grad()  # not inference_mode: the KV cache it allocates must stay usable by generate()
def time_prefill(model: Any, prompt_tokens: int, batch: int = 1, *, repeats: int = 3,
                 warmup: int = 1, use_cache: bool = True) -> list[float]:
    """Seconds of each of `repeats` prefills of `batch` random prompts of `prompt_tokens` tokens:
    one forward pass that fills the KV cache, plus picking the first output token (TTFT without
    queueing). use_cache=False runs the pass without touching the cache."""
    if prompt_tokens < 1 or batch < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need prompt_tokens, batch, repeats >= 1 and warmup >= 0, got "
                         f"{prompt_tokens}, {batch}, {repeats}, {warmup}")
    dev = model_device(model)
    ids = random_tokens(model, batch, prompt_tokens)
    positions = torch.arange(prompt_tokens, device=dev)
    if use_cache:
        ensure_cache(model, batch, prompt_tokens)
    times = []
    for i in range(warmup + repeats):
        synchronize(dev)
        with Stopwatch(dev) as sw:
            logits = model(ids, positions, prompt_tokens) if use_cache else model(ids)
            logits[:, -1].argmax(dim=-1)
        if i >= warmup:
            times.append(sw.seconds)
    return times


@torch.no_grad()  # not inference_mode: the KV cache it allocates must stay usable by generate()
def time_decode(model: Any, batch: int = 1, context: int = 0, *, steps: int = 8, warmup: int = 2,
                use_cache: bool = True, mode: str = "eager") -> list[float]:
    """Seconds of each of `steps` decode steps (TPOT) for `batch` sequences whose KV cache holds
    `context` tokens: each step feeds one token per sequence at the next position and picks the
    next token greedily. The cache holds zeros instead of a real prompt's keys and values: the
    step does the same work, so its time is the same, and no prefill is needed.

    use_cache=False: every step recomputes the whole sequence (context + 1 tokens) without a KV
    cache, as a model without one must. mode: "eager", or "compile" / "cuda_graph" as in
    utils.generate.make_decode_step; these attend over every cache slot (masked), so the cache
    is resized to exactly context + warmup + steps slots for them.
    """
    if batch < 1 or steps < 1 or warmup < 0 or context < 0:
        raise ValueError(f"need batch, steps >= 1 and warmup, context >= 0, got {batch}, "
                         f"{steps}, {warmup}, {context}")
    dev = model_device(model)
    total = warmup + steps
    if not use_cache:
        ids = random_tokens(model, batch, context + 1)
        times = []
        for i in range(total):
            with Stopwatch(dev) as sw:
                model(ids)[:, -1].argmax(dim=-1)
            if i >= warmup:
                times.append(sw.seconds)
        return times
    # compiled and graph steps attend over every slot: size the cache to what is measured
    ensure_cache(model, batch, context + total, exact=mode != "eager")
    from utils.generate import make_decode_step

    step = make_decode_step(model, mode, batch)
    tokens = random_tokens(model, batch, 1)
    pos = torch.full((batch, 1), context, dtype=torch.long, device=dev)
    times = []
    with decode_threads(dev, batch, mode):
        for i in range(total):
            synchronize(dev)
            with Stopwatch(dev) as sw:
                logits = step(tokens, pos, context + i + 1)
                tokens = logits[:, -1].argmax(dim=-1, keepdim=True)
            if i >= warmup:
                times.append(sw.seconds)
            pos = pos + 1
    return times


def decode_threads(device: torch.device, batch: int = 1, mode: str = "eager"
                   ) -> contextlib.AbstractContextManager:
    """The thread setting generate uses for decode steps (utils.generate.decode_threads, when
    that exists), so that timings here match a real generation; else no change."""
    import utils.generate as generate

    if mode not in ("eager", "numpy") or not hasattr(generate, "decode_threads"):
        return contextlib.nullcontext()
    return generate.decode_threads(device, batch)


# ---- sweeps -------------------------------------------------------------------------------------


@dataclass
class Sweep:
    """One sweep: records (plain dicts) of a measurement against the parameter `x`.

    Every record has `x`'s value, `seconds` (median), `samples` (each run, seconds) and
    `predicted_seconds` (the roofline lower bound on the measured Hardware record), plus
    `bound` ("memory" or "compute"), `flops` and `bytes` of the step. `meta` says what it ran on.
    """

    name: str
    x: str
    records: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def column(self, key: str) -> list[Any]:
        """One field of every record, in order (e.g. sweep.column("seconds"))."""
        return [r.get(key) for r in self.records]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def operating_points(self) -> list:
        """Every measured record as a point for utils.plots.roofline_plot: intensity = FLOP /
        bytes of the step, performance = FLOP / measured seconds. Skipped records are left out."""
        from utils.plots import OperatingPoint

        points = []
        for r in self.records:
            if r.get("seconds") is None:
                continue
            label = r.get("model") or f"{self.x.replace('_', ' ')}={r[self.x]}"
            if r.get("cached") is False:
                label += ", no cache"
            points.append(OperatingPoint(label, r["flops"] / r["bytes"], r["flops"] / r["seconds"],
                                         kind="measured"))
        return points

    def plot(self, ax=None, y: str = "seconds", scale: float = 1e3, unit: str = "ms"):
        """Measured (dots) and predicted (line) against x; returns the matplotlib Axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        done = [r for r in self.records if r.get("seconds") is not None]
        xs = [r[self.x] for r in done]
        ax.plot(xs, [r[y] * scale for r in done], "o-", label="measured (median)")
        pred_key = "predicted_" + y if "predicted_" + y in (done[0] if done else {}) else None
        if pred_key:
            ax.plot(xs, [r[pred_key] * scale for r in done], "--", label="roofline prediction")
        ax.set_xlabel(self.x.replace("_", " "))
        ax.set_ylabel(f"{y.replace('_', ' ')} ({unit})")
        ax.set_title(self.name.replace("_", " "))
        ax.grid(True, alpha=0.3)
        ax.legend()
        return ax


@contextlib.contextmanager
def progress_bar(progress: Any, total: int, desc: str) -> Iterator[Any]:
    """None/False: no bar; True: a tqdm.auto bar, closed at the end; else the caller's object
    with update(n) (e.g. its own tqdm bar, which it closes itself)."""
    if progress is not True:
        yield progress or None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, leave=False) as bar:
        yield bar


def tick(bar: Any, label: str) -> None:
    """Advance a bar from progress_bar by one step, showing `label` (no bar: nothing)."""
    if bar is not None:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(label)
        bar.update(1)


def load_for_profile(model: Any = "smollm2-135m", device: str | torch.device | None = None,
                     dtype: str | torch.dtype | None = None, weights: str | None = None,
                     force: bool = False, extra_bytes: float = 0.0) -> Any:
    """A model ready to time: a loaded `utils.llama.Transformer` passes through; a name (or
    ModelShape) is checked against the device's memory, then loaded: SmolLM2-135M with its real
    weights when installed (random otherwise), any other shape with random weights (speed and
    memory do not depend on the values)."""
    if hasattr(model, "config") and hasattr(model, "setup_caches"):
        return model
    from utils.loading import load_model

    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype, force)
    shape = model if isinstance(model, ModelShape) else get_model(model)
    if not isinstance(shape, ModelShape):
        raise ValueError(f"{model!r} has no layer shapes: choose a model of utils.models.MODELS")
    check_fits(shape, dev, torch_dtype, extra_bytes)
    if weights is None and shape.name != "smollm2-135m":
        weights = "random"
    loaded, _ = load_model(shape, dev, torch_dtype, weights=weights, allow_random=True)
    return loaded


def _context(model: Any, hardware: Hardware | None, quick: bool = True
             ) -> tuple[Any, torch.device, str, Hardware]:
    dev, dt = model_device(model), model_dtype(model)
    hw = hardware or measure_hardware(dev, dt, quick=quick)
    return model.config, dev, dtype_name(dt), hw


def _meta(model: Any, dev: torch.device, dtype: str, hw: Hardware, **params: Any) -> dict:
    return {**describe(dev, to_torch_dtype(dtype, dev)), "model": model.config.name,
            "n_params": model.config.n_params, "hardware": hw.name,
            "bandwidth_bytes_per_s": hw.bandwidth, "peak_flops": hw.dense_flops.get(dtype),
            "params": params}


def _record(x_key: str, x: Any, samples: list[float], cost: roofline.StepCost,
            **extra: Any) -> dict[str, Any]:
    seconds = median(samples)
    return {x_key: x, **extra, "seconds": seconds, "samples": samples,
            "predicted_seconds": cost.seconds, "predicted_over_measured": cost.seconds / seconds,
            "bound": cost.bound, "flops": cost.flops, "bytes": cost.bytes,
            "flops_per_s": cost.flops / seconds, "bytes_per_s": cost.bytes / seconds}


def _decode_record(model: Any, hw: Hardware, batch: int, context: int, x_key: str, x: Any, /, *,
                   steps: int, warmup: int, **extra: Any) -> dict[str, Any]:
    """Time decode steps of `batch` sequences at `context` (time_decode) and record them next to
    the roofline cost of such a step on `hw`."""
    cost = roofline.decode_cost(model.config, hw, dtype_name(model_dtype(model)), batch, context)
    samples = time_decode(model, batch, context, steps=steps, warmup=warmup)
    return _record(x_key, x, samples, cost, **extra)


def matmul_sweep(device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
                 token_counts: Iterable[int] = (1, 8, 64, 512), k: int = 4096, m: int = 4096, *,
                 repeats: int = 5, warmup: int = 2, force: bool = False, seed: int = 0,
                 progress: Any = False) -> Sweep:
    """(n x k) activations times one (k x m) weight matrix, for each n in token_counts: how the
    FLOP/s grow as more tokens share each weight read. Records: tokens, seconds (median of
    `repeats`, synchronised), flops = 2nkm, bytes = every input read and the output written
    once (utils.roofline.matmul_bytes), flop_per_byte and flops_per_s. Uses PyTorch's own matmul
    (on a CPU, MKL's: no numpy path as in utils.llama)."""
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype, force)
    counts = list(token_counts)
    if not counts or min(counts) < 1 or k < 1 or m < 1:
        raise ValueError(f"need token counts, k and m >= 1, got {counts}, k={k}, m={m}")
    need = bytes_per_element(dtype_name(torch_dtype)) * (k * m + max(counts) * (k + m))
    if need > available_memory_bytes(dev) / 2:
        raise ValueError(f"the largest matmul needs {need / GB:.1f} GB, more than half the "
                         f"{available_memory_bytes(dev) / GB:.1f} GB available: use fewer tokens "
                         "or smaller k and m")
    gen = torch.Generator().manual_seed(seed)
    weights = torch.randn(k, m, generator=gen).to(dev, torch_dtype)
    with progress_bar(progress, len(counts), "matmul sweep") as bar:
        records = []
        for n in counts:
            x = torch.randn(n, k, generator=gen).to(dev, torch_dtype)
            samples = time_fn(lambda x=x: x @ weights, device=dev, warmup=warmup, repeats=repeats)
            seconds = median(samples)
            flops = roofline.matmul_flops(n, k, m)
            nbytes = roofline.matmul_bytes(n, k, m, dtype_name(torch_dtype))
            records.append({"tokens": n, "seconds": seconds, "samples": samples, "flops": flops,
                            "bytes": nbytes, "flop_per_byte": flops / nbytes,
                            "flops_per_s": flops / seconds})
            tick(bar, f"n={n}")
    return Sweep("matmul_vs_tokens", "tokens", records,
                 {**describe(dev, torch_dtype), "k": k, "m": m})


class OperationCounter(TorchDispatchMode):
    """Counts the tensor operations run inside `with OperationCounter() as counter:`: `count`,
    and `by_name` per operation. Views (reshapes, transposes, slices) only relabel memory and
    launch nothing, so they are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_name: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func is not torch.ops.aten._unsafe_view.default:
            self.count += 1
            self.by_name[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_operations(fn: Callable[[], object]) -> OperationCounter:
    """Run fn() once, without gradients, and count the tensor operations it runs.

    On a CPU with one PyTorch thread utils.llama multiplies small batches in numpy, where the
    counter cannot see them, so fn runs with at least two threads (the PyTorch path)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(threads, 2))
    try:
        with torch.no_grad(), OperationCounter() as counter:
            fn()
    finally:
        torch.set_num_threads(threads)
    return counter


@dataclass
class ProductTimes:
    """Where a numpy decode step's time goes (utils.cpu_decode): its matrix products, grouped by
    weight shape, and everything else. Seconds and bytes are per step."""

    step_seconds: float  # median seconds of a whole step
    products: dict[tuple[int, int], tuple[int, float, float]]  # shape -> (calls, seconds, bytes)

    @property
    def products_seconds(self) -> float:
        return sum(seconds for _, seconds, _ in self.products.values())

    @property
    def rest_seconds(self) -> float:
        """The step minus its matrix products: the small operations around them."""
        return self.step_seconds - self.products_seconds

    def table(self) -> str:
        """One line per weight shape: calls, milliseconds and GB/s per step, then the rest."""
        lines = [f"{'weight shape':<16}{'calls':>6}{'ms/step':>9}{'GB/s':>7}"]
        for (rows, cols), (calls, seconds, nbytes) in self.products.items():
            lines.append(f"{f'{rows} x {cols}':<16}{calls:>6}{seconds * 1e3:>9.2f}"
                         f"{nbytes / seconds / GB:>7.1f}")
        lines.append(f"{'everything else':<22}{self.rest_seconds * 1e3:>9.2f}")
        lines.append(f"{'whole step':<22}{self.step_seconds * 1e3:>9.2f}")
        return "\n".join(lines)


def time_matrix_products(step: Any, token_ids: torch.Tensor, input_pos: torch.Tensor, *,
                         steps: int = 10, warmup: int = 2) -> ProductTimes:
    """Run `step` (a utils.cpu_decode.NumpyDecodeStep) `warmup + steps` times on the same token
    and position, timing each matrix product inside it and each whole step. The products are
    timed in place, between the step's other work and with the caches as the step leaves them,
    which is where their speed matters. Products: means per step; the step: the median."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got {steps} and {warmup}")
    untimed = step.matmul
    totals: dict[tuple[int, int], list[float]] = {}  # shape -> [calls, seconds, bytes]

    def timed(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        out = untimed(x, weight)
        total = totals.setdefault(weight.shape, [0, 0.0, 0.0])
        total[0] += 1
        total[1] += time.perf_counter() - start
        total[2] += weight.nbytes
        return out

    step.matmul = timed
    step_seconds = []
    try:
        with decode_threads(torch.device("cpu"), len(token_ids), "numpy"):
            for i in range(warmup + steps):
                if i == warmup:
                    totals.clear()
                with Stopwatch("cpu") as sw:
                    step(token_ids, input_pos)
                if i >= warmup:
                    step_seconds.append(sw.seconds)
    finally:
        step.matmul = untimed
    products = {shape: (int(calls) // steps, seconds / steps, nbytes / steps)
                for shape, (calls, seconds, nbytes) in totals.items()}
    return ProductTimes(median(step_seconds), products)


def ttft_vs_prompt_length(model: Any = "smollm2-135m", prompt_lengths: Iterable[int] = (16, 64, 256),
                          batch: int = 1, *, repeats: int = 3, warmup: int = 1,
                          hardware: Hardware | None = None, device: str | None = None,
                          dtype: str | None = None, progress: Any = False) -> Sweep:
    """Time to first token (one prefill pass) against prompt length, in seconds, next to the
    roofline lower bound max(FLOP / peak, bytes / bandwidth) on the measured hardware."""
    lengths = sorted({int(n) for n in prompt_lengths})
    model = load_for_profile(model, device, dtype)
    shape, dev, dt, hw = _context(model, hardware)
    with progress_bar(progress, len(lengths), "TTFT vs prompt length") as bar:
        records = []
        for n in lengths:
            samples = time_prefill(model, n, batch, repeats=repeats, warmup=warmup)
            cost = roofline.prefill_cost(shape, hw, dt, n, batch)
            records.append(_record("prompt_tokens", n, samples, cost, batch=batch))
            tick(bar, f"{n} tokens")
    return Sweep("ttft_vs_prompt_length", "prompt_tokens", records,
                 _meta(model, dev, dt, hw, batch=batch, repeats=repeats))


def tpot_vs_batch_size(model: Any = "smollm2-135m", batch_sizes: Iterable[int] = (1, 2, 4, 8),
                       context: int = 128, *, steps: int = 8, warmup: int = 2,
                       hardware: Hardware | None = None, device: str | None = None,
                       dtype: str | None = None, progress: Any = False) -> Sweep:
    """Time per output token (one decode step for the whole batch) against batch size at a fixed
    context; the roofline says it barely grows while the step is memory-bound."""
    sizes = sorted({int(b) for b in batch_sizes})
    model = load_for_profile(model, device, dtype)
    shape, dev, dt, hw = _context(model, hardware)
    ensure_cache(model, max(sizes), context + warmup + steps)
    with progress_bar(progress, len(sizes), "TPOT vs batch size") as bar:
        records = []
        for b in sizes:
            rec = _decode_record(model, hw, b, context, "batch", b, steps=steps, warmup=warmup,
                                 context=context)
            rec["tokens_per_s"] = b / rec["seconds"]
            records.append(rec)
            tick(bar, f"batch {b}")
    return Sweep("tpot_vs_batch_size", "batch", records,
                 _meta(model, dev, dt, hw, context=context, steps=steps))


def tpot_vs_context_length(model: Any = "smollm2-135m",
                           contexts: Iterable[int] = (0, 512, 2048, 4096), batch: int = 1, *,
                           steps: int = 8, warmup: int = 2, hardware: Hardware | None = None,
                           device: str | None = None, dtype: str | None = None,
                           progress: Any = False) -> Sweep:
    """TPOT against the number of tokens already in the KV cache: every step reads all weights
    plus the cache of every sequence, so TPOT grows with context (slope = KV bytes per token /
    bandwidth)."""
    ctxs = sorted({int(c) for c in contexts})
    model = load_for_profile(model, device, dtype)
    shape, dev, dt, hw = _context(model, hardware)
    ensure_cache(model, batch, max(ctxs) + warmup + steps)
    with progress_bar(progress, len(ctxs), "TPOT vs context") as bar:
        records = []
        for c in ctxs:
            rec = _decode_record(model, hw, batch, c, "context", c, steps=steps, warmup=warmup,
                                 batch=batch)
            rec["kv_cache_bytes"] = batch * (c + 1) * roofline.kv_cache_bytes_per_token(shape, dt)
            records.append(rec)
            tick(bar, f"context {c}")
    return Sweep("tpot_vs_context_length", "context", records,
                 _meta(model, dev, dt, hw, batch=batch, steps=steps))


def decode_with_and_without_cache(model: Any = "smollm2-135m",
                                  contexts: Iterable[int] = (16, 64, 256), *, steps: int = 3,
                                  warmup: int = 1, hardware: Hardware | None = None,
                                  device: str | None = None, dtype: str | None = None,
                                  progress: Any = False) -> Sweep:
    """Seconds per new token with the KV cache (one decode step) and without it (recompute the
    whole context + 1 tokens), against context; both with their roofline predictions. Records
    have `cached` True/False."""
    ctxs = sorted({int(c) for c in contexts})
    model = load_for_profile(model, device, dtype)
    shape, dev, dt, hw = _context(model, hardware)
    ensure_cache(model, 1, max(ctxs) + warmup + steps)
    with progress_bar(progress, 2 * len(ctxs), "decode with/without cache") as bar:
        records = []
        for c in ctxs:
            records.append(_decode_record(model, hw, 1, c, "context", c, steps=steps,
                                          warmup=warmup, cached=True))
            tick(bar, f"cached, context {c}")
            samples = time_decode(model, 1, c, steps=steps, warmup=warmup, use_cache=False)
            cost = roofline.prefill_cost(shape, hw, dt, c + 1, kv_cache=False)
            records.append(_record("context", c, samples, cost, cached=False))
            tick(bar, f"recompute, context {c}")
    return Sweep("decode_with_and_without_cache", "context", records,
                 _meta(model, dev, dt, hw, steps=steps))


def default_model_sizes(device: str | torch.device, quick: bool = True) -> tuple[str, ...]:
    """Model shapes for the model-size sweep: small on a CPU, up to 8B on a GPU."""
    if torch.device(device).type == "cuda":
        if quick:
            return ("smollm2-135m", "smollm2-360m", "smollm2-1.7b", "llama-3.2-1b")
        return ("smollm2-135m", "smollm2-360m", "llama-3.2-1b", "smollm2-1.7b", "llama-3-8b")
    return ("smollm2-135m", "smollm2-360m") if quick else \
        ("smollm2-135m", "smollm2-360m", "smollm2-1.7b")


def tpot_vs_model_size(models: Sequence[Any] = ("smollm2-135m", "smollm2-360m"), context: int = 64,
                       *, steps: int = 5, warmup: int = 2, device: str | None = None,
                       dtype: str | None = None, hardware: Hardware | None = None,
                       time_budget_s: float | None = None, progress: Any = False) -> Sweep:
    """Batch-1 TPOT of random-weight models of several shapes (speed does not depend on the
    values), against weight bytes. A model that does not fit in memory, or whose load and decode
    would exceed `time_budget_s` (estimated from the roofline), is skipped with the reason in
    its record (`seconds` None) instead of stopping the sweep. Each model's prediction uses a
    bandwidth reading taken just before it (`bandwidth_bytes_per_s` in its record)."""
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype)
    dt = dtype_name(torch_dtype)
    hw = hardware or measure_hardware(dev, torch_dtype)
    with progress_bar(progress, len(models), "TPOT vs model size") as bar:
        records, start = [], time.perf_counter()
        for item in models:
            loaded = hasattr(item, "config")
            shape = item.config if loaded else get_model(item)
            cost = roofline.decode_cost(shape, hw, dt, 1, context)
            base = {"model": shape.name, "n_params": shape.n_params,
                    "weight_bytes": roofline.weight_bytes(shape, dt)}
            skip = None
            if time_budget_s is not None:
                # random initialisation dominates on a CPU (roughly 40e6 parameters/s here)
                init_rate = 2e9 if dev.type == "cuda" else 40e6
                estimate = shape.n_params / init_rate + 3 * (warmup + steps) * cost.seconds
                left = time_budget_s - (time.perf_counter() - start)
                if estimate > left:
                    skip = f"skipped: about {estimate:.0f} s needed, {max(left, 0):.0f} s of budget left"
            model = None
            if skip is None and not loaded:
                try:
                    model = load_for_profile(shape, dev, torch_dtype,
                                             extra_bytes=(context + warmup + steps)
                                             * roofline.kv_cache_bytes_per_token(shape, dt))
                except ValueError as err:
                    skip = f"skipped: {err}"
            elif loaded:
                model = item
            if skip is not None:
                records.append({**base, "seconds": None, "predicted_seconds": cost.seconds,
                                "skipped": skip})
            else:
                # the sweep spans minutes, and a shared machine's bandwidth drifts: predict each
                # model from a reading taken just before it
                now = measure_bandwidth(dev, quick=True, repeats=3).read_bytes_per_s
                records.append(_decode_record(
                    model, dataclasses.replace(hw, bandwidth=now), 1, context, "weight_bytes",
                    base["weight_bytes"], steps=steps, warmup=warmup, model=shape.name,
                    n_params=shape.n_params, context=context, bandwidth_bytes_per_s=now))
            if not loaded:
                del model
                _free(dev)
            tick(bar, shape.name)
    meta = {**describe(dev, torch_dtype), "hardware": hw.name, "bandwidth_bytes_per_s": hw.bandwidth,
            "peak_flops": hw.dense_flops.get(dt),
            "params": {"context": context, "steps": steps, "weights": "random"}}
    return Sweep("tpot_vs_model_size", "weight_bytes", records, meta)


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- the standard profile and its command line --------------------------------------------------

#: A small Llama-shaped model for smoke tests of the whole pipeline (seconds, not minutes).
TINY_MODEL = ModelShape("tiny-llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128,
                        vocab_size=512, tied_embeddings=True, max_seq_len=1024)
TINY_MODEL_X2 = ModelShape("tiny-llama-x2", n_layers=4, d_model=128, n_heads=4, n_kv_heads=2,
                           d_ff=256, vocab_size=512, tied_embeddings=True, max_seq_len=1024)


def profile_plan(device: str | torch.device, quick: bool = False, tiny: bool = False
                 ) -> dict[str, dict[str, Any]]:
    """The settings of each standard sweep (keyword arguments of the sweep functions)."""
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    if tiny:
        return {
            "ttft_vs_prompt_length": {"prompt_lengths": (8, 64), "repeats": 2},
            "tpot_vs_batch_size": {"batch_sizes": (1, 4), "context": 16, "steps": 3},
            "tpot_vs_context_length": {"contexts": (0, 256), "steps": 3},
            "decode_with_and_without_cache": {"contexts": (8, 64), "steps": 2},
            "tpot_vs_model_size": {"models": (TINY_MODEL, TINY_MODEL_X2), "context": 16,
                                   "steps": 3},
        }
    if quick:
        return {
            "ttft_vs_prompt_length": {"prompt_lengths": (16, 128, 512), "repeats": 3},
            "tpot_vs_batch_size": {"batch_sizes": (1, 2, 4, 8), "context": 128, "steps": 6},
            "tpot_vs_context_length": {"contexts": (0, 1024, 4096), "steps": 6},
            "decode_with_and_without_cache": {"contexts": (16, 64, 256), "steps": 3},
            "tpot_vs_model_size": {"models": default_model_sizes(dev, quick=True), "context": 64,
                                   "steps": 5, "time_budget_s": 600 if gpu else 30},
        }
    return {
        "ttft_vs_prompt_length": {"prompt_lengths": (16, 64, 256, 512, 1024, 2048) if not gpu
                                  else (16, 64, 256, 1024, 2048, 4096, 8192), "repeats": 5},
        "tpot_vs_batch_size": {"batch_sizes": (1, 2, 4, 8, 16, 32) if not gpu
                               else (1, 2, 4, 8, 16, 32, 64, 128, 256), "context": 256,
                               "steps": 10},
        "tpot_vs_context_length": {"contexts": (0, 512, 1024, 2048, 4096, 8000), "steps": 10},
        "decode_with_and_without_cache": {"contexts": (16, 64, 256, 1024), "steps": 5},
        "tpot_vs_model_size": {"models": default_model_sizes(dev, quick=False), "context": 256,
                               "steps": 10, "time_budget_s": 1200},
    }


SWEEPS = {
    "ttft_vs_prompt_length": ttft_vs_prompt_length,
    "tpot_vs_batch_size": tpot_vs_batch_size,
    "tpot_vs_context_length": tpot_vs_context_length,
    "decode_with_and_without_cache": decode_with_and_without_cache,
    "tpot_vs_model_size": tpot_vs_model_size,
}

#: Top-level keys of the JSON file `python -m utils.profile` writes (documented in results/README.md).
RESULT_KEYS = ("schema", "created", "command", "device", "dtype", "quick", "hardware",
               "bandwidth", "matmul", "model", "sweeps", "elapsed_seconds")


def run_profile(device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
                quick: bool = False, tiny: bool = False, model: Any = None,
                force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Measure the device (bandwidth, GEMM FLOP/s) and run every standard sweep; return one
    JSON-ready dict with the keys RESULT_KEYS. Checks the device, dtype and memory first."""
    start = time.perf_counter()
    dev = pick_device(device)
    torch_dtype = resolve_dtype(dev, dtype, force)
    dt = dtype_name(torch_dtype)
    plan = profile_plan(dev, quick, tiny)
    shape = TINY_MODEL if tiny else get_model(model or "smollm2-135m")
    check_fits(shape, dev, torch_dtype)
    total = 3 + sum(len(next(iter(v for k, v in p.items() if k in (
        "prompt_lengths", "batch_sizes", "contexts", "models")))) * (
        2 if name == "decode_with_and_without_cache" else 1) for name, p in plan.items())
    with progress_bar(progress, total, "profile") as bar:
        small = quick or tiny
        bw = measure_bandwidth(dev, quick=small, repeats=3 if small else 7,
                               buffer_bytes=64 * MiB if tiny else None)
        tick(bar, f"bandwidth {bw.read_bytes_per_s / GB:.1f} GB/s")
        mm = measure_matmul_flops(dev, torch_dtype, quick=small, repeats=3 if small else 7,
                                  n=512 if tiny else None, force=force)
        tick(bar, f"GEMM {mm.flops_per_s / 1e9:.0f} GFLOP/s")
        hw = hardware_record(dev, bw, mm, quick=quick)
        weights = "random" if tiny else None
        loaded = load_for_profile(shape, dev, torch_dtype, weights=weights, force=force)
        tick(bar, f"loaded {shape.name}")
        real = shape.name == "smollm2-135m" and _has_real_weights() and not tiny
        sweeps = {}
        for name, params in plan.items():
            params = dict(params)
            if name == "tpot_vs_model_size":
                # reuse the loaded model for its own shape rather than loading it twice
                params["models"] = [loaded if getattr(m, "name", m) == shape.name else m
                                    for m in params["models"]]
                sweeps[name] = SWEEPS[name](hardware=hw, device=dev, dtype=torch_dtype,
                                            progress=bar, **params).to_dict()
            else:
                sweeps[name] = SWEEPS[name](loaded, hardware=hw, progress=bar, **params).to_dict()
    return {
        "schema": "prefill-decode/profile/v1",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python -m utils.profile " + " ".join(sys.argv[1:]),
        "device": describe(dev, torch_dtype),
        "dtype": dt,
        "quick": bool(quick),
        "hardware": hardware_to_dict(hw),
        "bandwidth": bw.to_dict(),
        "matmul": mm.to_dict(),
        "model": {"name": shape.name, "n_params": shape.n_params,
                  "weight_bytes": roofline.weight_bytes(shape, dt),
                  "weights": "gguf" if real else "random"},
        "sweeps": sweeps,
        "elapsed_seconds": time.perf_counter() - start,
    }


def _has_real_weights() -> bool:
    try:
        from utils.gguf_weights import find_gguf_file

        find_gguf_file()
        return True
    except (FileNotFoundError, ImportError):
        return False


def default_results_name(device: str | torch.device | None = None) -> str:
    """results/<device>-<date>.json, the name reference result files use: the GPU's name, or
    'cpu-' and the CPU's model name."""
    dev = pick_device(device)
    label = device_name(dev) if dev.type == "cuda" else f"cpu {device_name(dev)}"
    slug = "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return f"results/{slug}-{time.strftime('%Y-%m-%d')}.json"



def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m utils.profile",
                description="Measure this device's bandwidth and FLOP/s, then TTFT and TPOT "
                            "sweeps of the model; write everything to one JSON file.")
    p.add_argument("--out", default=None,
                   help="JSON file to write (default results/<device>-<date>.json)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    p.add_argument("--dtype", default=None, help="fp32, bf16 or fp16 (default: the device's)")
    p.add_argument("--model", default=None, help="model shape to profile (default smollm2-135m)")
    p.add_argument("--quick", action="store_true", help="fewer points (minutes on a laptop CPU)")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny random model and two points per sweep (a smoke test, seconds)")
    p.add_argument("--force", action="store_true",
                   help="use the dtype even if the device has no native support for it")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for everything (default: PyTorch's, one per core)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    try:
        if a.threads is not None:
            if a.threads < 1:
                raise ValueError(f"--threads must be at least 1, got {a.threads}")
            torch.set_num_threads(a.threads)
        dev = pick_device(a.device)
        out = a.out or default_results_name(dev)
        result = run_profile(dev, a.dtype, quick=a.quick, tiny=a.tiny, model=a.model,
                             force=a.force, progress=not a.no_progress)
    except ValueError as err:
        print(f"python -m utils.profile: error: {err}", file=sys.stderr)
        return 2
    folder = os.path.dirname(out)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    hw = result["hardware"]
    print(f"{result['device']['device_name']} ({result['dtype']}): read bandwidth "
          f"{hw['bandwidth'] / GB:.1f} GB/s, GEMM {next(iter(hw['dense_flops'].values())) / 1e9:.0f}"
          f" GFLOP/s; {len(result['sweeps'])} sweeps in {result['elapsed_seconds']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Timers that are right on CPU and GPU.

A GPU runs work asynchronously: a bare wall clock measures how long it took to *queue* the work.
On CUDA we record CUDA events around the region and synchronise before reading them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch


class Stopwatch:
    """Time a region: `with Stopwatch(device) as sw: ...; sw.seconds`."""

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.seconds = float("nan")

    def __enter__(self) -> Stopwatch:
        if self.device.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3  # elapsed_time is in ms
        else:
            self.seconds = time.perf_counter() - self._t0


def time_fn(fn: Callable[[], object], *, device: str | torch.device = "cpu", warmup: int = 2,
            repeats: int = 5) -> list[float]:
    """Run `fn` `warmup` times untimed, then `repeats` times timed; return seconds per call."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        with Stopwatch(device) as sw:
            fn()
        times.append(sw.seconds)
    return times


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence of measurements."""
    if len(values) == 0:
        raise ValueError("median of no measurements")
    return float(statistics.median(values))

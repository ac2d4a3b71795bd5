"""Roofline plots: log-log attainable FLOP/s against arithmetic intensity, with operating points."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from utils.hardware import Hardware, get_hardware
from utils.models import Model, get_model
from utils.roofline import attainable_flops, decode_cost, prefill_cost


@dataclass(frozen=True)
class OperatingPoint:
    """One kernel or step placed on a roofline: intensity in FLOP/byte, performance in FLOP/s
    (attainable by the roofline unless measured)."""

    label: str
    flop_per_byte: float
    flops_per_second: float
    kind: str = "predicted"  # or "measured"


def operating_points(model: Model | str, hw: Hardware | str, dtype: str = "bf16",
                     prompt_lengths: Iterable[int] = (128, 1024, 8192),
                     batch_sizes: Iterable[int] = (1, 16, 256),
                     context: int = 0) -> list[OperatingPoint]:
    """Prefill at several prompt lengths and decode at several batch sizes, on the roof."""
    m, h = get_model(model), get_hardware(hw)
    points = []
    for p in prompt_lengths:
        c = prefill_cost(m, h, dtype, p)
        points.append(OperatingPoint(f"prefill P={p}", c.flop_per_byte, c.flops / c.seconds))
    for b in batch_sizes:
        c = decode_cost(m, h, dtype, b, context)
        points.append(OperatingPoint(f"decode B={b}", c.flop_per_byte, c.flops / c.seconds))
    return points


def roofline_plot(hardware: Sequence[Hardware | str] | Hardware | str, dtype: str = "bf16",
                  points: Sequence[OperatingPoint] = (), ax=None, title: str | None = None,
                  intensity_range: tuple[float, float] = (0.1, 1e5)):
    """Draw each device's roof (min(peak, intensity x bandwidth)) and the operating points.

    Returns the matplotlib Axes. Axes: intensity in FLOP/byte, performance in TFLOP/s, both log.
    """
    import matplotlib.pyplot as plt

    devices = [get_hardware(h) for h in
               ([hardware] if isinstance(hardware, (str, Hardware)) else hardware)]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    x = np.logspace(np.log10(intensity_range[0]), np.log10(intensity_range[1]), 400)
    for h in devices:
        y = [attainable_flops(i, h, dtype) / 1e12 for i in x]
        (line,) = ax.plot(x, y, label=f"{h.name} ({h.kind}, {dtype})")
        ridge = h.ridge_flop_per_byte(dtype)
        ax.axvline(ridge, color=line.get_color(), ls=":", lw=1)
        ax.annotate(f"ridge {ridge:.0f}", (ridge, h.peak_flops(dtype) / 1e12), xytext=(4, -14),
                    textcoords="offset points", fontsize=8, color=line.get_color())
    for p in points:
        marker = "o" if p.kind == "measured" else "x"
        ax.scatter([p.flop_per_byte], [p.flops_per_second / 1e12], marker=marker, zorder=3)
        ax.annotate(p.label, (p.flop_per_byte, p.flops_per_second / 1e12), xytext=(5, 5),
                    textcoords="offset points", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable performance (TFLOP/s)")
    ax.set_title(title or "Decode sits on the memory slope; long prefills reach the compute roof")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax

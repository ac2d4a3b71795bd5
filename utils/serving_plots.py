"""Plots of serving simulations (utils.serving): a timeline of steps, latency distributions per
policy, and latency against load. Every function returns its matplotlib Axes (or array of Axes);
every default title states what the data show, computed from the data."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from utils.serving import SimResult

PREFILL_COLOR = "tab:orange"
DECODE_COLOR = "tab:blue"
WAIT_COLOR = "0.75"
POLICY_COLORS = {"static": "tab:gray", "continuous": "tab:red", "chunked": "tab:green",
                 "disaggregated": "tab:purple"}


def policy_color(label: str) -> str | None:
    """The same colour for a policy in every figure (by the first word of its label)."""
    return POLICY_COLORS.get(label.split()[0]) if label else None


def timeline(result: SimResult, ax=None, title: str | None = None,
             request_ids: Sequence[int] | None = None, ms: bool = True):
    """Gantt chart: one row per request, one box per engine step it is in (orange: a piece of
    its prompt, blue: one decode token), a grey line while it waits (queue or KV transfer).
    Needs `simulate(..., record_steps=True)`. A long box in every row is a step that stalled
    everyone."""
    import matplotlib.pyplot as plt

    if result.steps is None:
        raise ValueError("this result has no step records: simulate(..., record_steps=True)")
    ids = list(request_ids) if request_ids is not None else [r.id for r in result.requests]
    row = {rid: k for k, rid in enumerate(ids)}
    scale = 1e3 if ms else 1.0
    prefill: dict[int, list[tuple[float, float]]] = {rid: [] for rid in ids}
    decode: dict[int, list[tuple[float, float]]] = {rid: [] for rid in ids}
    for s in result.steps:
        box = (s.start_s * scale, (s.end_s - s.start_s) * scale)
        for rid, _ in s.prefill:
            if rid in row:
                prefill[rid].append(box)
        for rid in s.decode:
            if rid in row:
                decode[rid].append(box)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.35 * len(ids) + 1.5))
    index = {r.id: i for i, r in enumerate(result.requests)}
    for rid in ids:
        y = row[rid]
        i = index[rid]
        end = result.finish_s[i] * scale
        ax.hlines(y, result.requests[i].arrival_s * scale, end, color=WAIT_COLOR, lw=1.5, zorder=1)
        ax.broken_barh(prefill[rid], (y - 0.4, 0.8), facecolors=PREFILL_COLOR,
                       edgecolors="white", linewidth=0.5, zorder=2)
        ax.broken_barh(decode[rid], (y - 0.4, 0.8), facecolors=DECODE_COLOR,
                       edgecolors="white", linewidth=0.3, zorder=2)
        ax.plot(result.requests[i].arrival_s * scale, y, marker="|", color="k", ms=8, zorder=3)
    ax.set_yticks(range(len(ids)), [f"req {rid}" for rid in ids], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)" if ms else "time (s)")
    ax.set_ylabel("request")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=PREFILL_COLOR, label="prefill (piece of prompt)"),
                       Patch(color=DECODE_COLOR, label="decode (one token)"),
                       Patch(color=WAIT_COLOR, label="waiting (| = arrival)")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title is None:
        lengths = np.array([s.end_s - s.start_s for s in result.steps]) * 1e3
        title = (f"{result.policy}: steps take {np.median(lengths):.1f} ms typically, "
                 f"the longest {lengths.max():.3g} ms")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def _plain_log_ticks(axis) -> None:
    """Label a log axis with plain numbers (5, 20, 100) instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _scale_for(ax, which: str, values: Sequence[float]) -> str:
    """Log scale (plain tick labels) when the values span more than 20x, else linear."""
    v = np.asarray([x for x in values if np.isfinite(x) and x > 0])
    if v.size and v.max() / v.min() > 20:
        getattr(ax, f"set_{which}scale")("log")
        _plain_log_ticks(getattr(ax, f"{which}axis"))
        return ", log scale"
    return ""


def _ecdf(ax, values_ms: np.ndarray, label: str) -> None:
    v = np.sort(values_ms[~np.isnan(values_ms)])
    if v.size:
        ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label,
                color=policy_color(label))


def latency_distributions(results: Sequence[SimResult], axes=None, title: str | None = None):
    """Two panels: the cumulative distribution of TTFT and of TPOT (ms) for each result (one
    policy each) on the same workload. Dotted line: the 99th percentile."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 4))
    samples = {"TTFT (ms)": [], "TPOT (ms)": []}
    for r in results:
        done = ~r.rejected
        samples["TTFT (ms)"].extend(r.ttft_s[done] * 1e3)
        samples["TPOT (ms)"].extend(r.tpot_s[done] * 1e3)
        _ecdf(axes[0], r.ttft_s[done] * 1e3, r.policy)
        _ecdf(axes[1], r.tpot_s[done] * 1e3, r.policy)
    for ax, (name, values) in zip(axes, samples.items()):
        ax.axhline(0.99, color="k", ls=":", lw=0.8)
        ax.set_xlabel(name + _scale_for(ax, "x", values))
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    axes[0].set_title("time to first token", fontsize=10)
    axes[1].set_title("time per output token", fontsize=10)
    if title is None:
        s = [r.summary() for r in results]
        best_ttft = min(s, key=lambda x: x["ttft_p99_s"])
        best_tpot = min(s, key=lambda x: x["tpot_p99_s"])
        title = (f"Lowest p99 TTFT: {best_ttft['policy']} ({best_ttft['ttft_p99_s'] * 1e3:.0f} ms); "
                 f"lowest p99 TPOT: {best_tpot['policy']} ({best_tpot['tpot_p99_s'] * 1e3:.1f} ms)")
    axes[0].figure.suptitle(title, fontsize=11)
    return axes


_LABELS = {
    "goodput_req_per_s_per_gpu": "goodput per GPU (requests/s meeting the SLO)",
    "goodput_req_per_s": "goodput (requests/s meeting the SLO)",
    "throughput_tokens_per_s": "throughput (output tokens/s)",
}


def latency_vs_load(rows: Sequence[dict], metrics: Sequence[str] = ("ttft_p99_s", "tpot_p99_s"),
                    axes=None, title: str | None = None):
    """One panel per metric against arrival rate (requests/s), one line per policy. Latencies
    (keys ending in _s) are drawn in ms, on a log scale when they span more than 20x; other keys
    (goodput, throughput) as they are. `rows` come from `utils.serving.sweep_load`."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
        axes = axes[0]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    names = {"ttft": "TTFT", "tpot": "TPOT", "itl": "inter-token latency", "e2e": "end-to-end"}
    for ax, metric in zip(axes, metrics):
        seconds = metric.endswith("_s")  # latencies, drawn in ms; anything else as it is
        scale = 1e3 if seconds else 1.0
        for p in policies:
            pts = sorted((r["rate_per_s"], r[metric]) for r in rows if r["policy"] == p)
            ax.plot([x for x, _ in pts], [y * scale for _, y in pts], marker="o", label=p,
                    color=policy_color(p))
        ax.set_xlabel("arrival rate (requests/s)")
        if seconds:
            kind, stat = metric.split("_")[:2]
            log = _scale_for(ax, "y", [r[metric] * 1e3 for r in rows])
            ax.set_ylabel(f"{stat} {names.get(kind, kind)} (ms{log})")
        else:
            ax.set_ylabel(_LABELS.get(metric, metric))
        ax.grid(True, which="both", alpha=0.3)
    axes[-1].legend(fontsize=8)
    if title is None:
        top = max(r["rate_per_s"] for r in rows)
        at_top = [r for r in rows if r["rate_per_s"] == top]
        m = next((x for x in metrics if x.endswith("_s")), None)
        if m is None:
            raise ValueError("give a title when no metric is a latency (ending in _s)")
        best = min(at_top, key=lambda r: r[m])
        worst = max(at_top, key=lambda r: r[m])
        title = (f"At {top:g} requests/s, {m.split('_')[1]} {names.get(m.split('_')[0])}: "
                 f"{best['policy']} {best[m] * 1e3:.0f} ms, {worst['policy']} {worst[m] * 1e3:.0f} ms")
    axes[0].figure.suptitle(title, fontsize=11)
    return axes

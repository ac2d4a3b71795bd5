"""Interactive figures for the notebooks: one request on the roofline, explored with sliders.

The computation lives in `utils.roofline.request_timeline`; this module only draws it and wires
it to ipywidgets, so a notebook cell stays one line: `request_explorer()`.
"""

from __future__ import annotations

from utils.hardware import BYTES_PER_ELEMENT, HARDWARE, Hardware, get_hardware
from utils.models import MODELS, get_model
from utils.roofline import (
    RequestTimeline,
    kv_cache_bytes_per_token,
    request_timeline,
    weight_bytes,
)

BOUND_COLORS = {"compute": "tab:orange", "memory": "tab:blue"}
PROMPT_CHOICES = (1, 16, 64, 128, 256, 512, 1000, 2000, 4000, 8000, 16000, 32000)
OUTPUT_CHOICES = (1, 10, 50, 100, 200, 500, 1000, 2000, 4000)
BATCH_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def math_dtype(hw: Hardware | str, dtype: str) -> str:
    """Precision of the arithmetic for weights stored in `dtype`: the same, except int4 weights,
    which are unpacked to 16-bit (bf16 where the device has it, else fp16) before the math."""
    h = get_hardware(hw)
    if dtype == "int4":
        return "bf16" if "bf16" in h.dense_flops else "fp16"
    return dtype


def _runs(timeline: RequestTimeline) -> list[tuple[str, int, int]]:
    """Consecutive decode steps bound by the same limit: (bound, first step, last step + 1)."""
    runs: list[tuple[str, int, int]] = []
    for i, step in enumerate(timeline.decode):
        if runs and runs[-1][0] == step.bound:
            runs[-1] = (step.bound, runs[-1][1], i + 1)
        else:
            runs.append((step.bound, i, i + 1))
    return runs


def _scale(seconds: float) -> tuple[float, str]:
    return (1e3, "ms") if seconds < 2 else (1.0, "s")


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 2 else f"{seconds:.3g} s"


def describe_timeline(timeline: RequestTimeline, batch: int = 1) -> str:
    """Two lines of numbers for a timeline: where the time goes, and which limit binds."""
    t = timeline
    share = t.ttft_seconds / t.total_seconds
    lines = [f"TTFT {_fmt(t.ttft_seconds)} (prefill, {t.prefill.bound}-bound, "
             f"{t.prefill.flop_per_byte:,.0f} FLOP/byte): {share:.0%} of the request's "
             f"{_fmt(t.total_seconds)}."]
    if t.decode:
        bounds = " then ".join(f"{b}-bound" for b, _, _ in _runs(t))
        lines.append(f"Decode: {len(t.decode)} steps, mean TPOT {_fmt(t.mean_tpot_seconds)} "
                     f"({bounds}, {t.decode[0].flop_per_byte:.3g} FLOP/byte at the first step); "
                     f"{batch / t.mean_tpot_seconds:,.0f} tokens/s for the batch of {batch}.")
    return "\n".join(lines)


def plot_request_timeline(timeline: RequestTimeline, title: str | None = None, fig=None):
    """Two panels: the request as a time bar (prefill, then decode; colour = the limit that binds)
    and each step's compute time and memory time. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t = timeline
    if fig is None:
        fig = plt.figure(figsize=(9, 5.2))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 2.2]})
    k, unit = _scale(t.total_seconds)

    # the request as one bar: prefill, then runs of decode steps bound by the same limit
    top.barh(0, t.ttft_seconds * k, color=BOUND_COLORS[t.prefill.bound], edgecolor="black",
             hatch="//")
    start = t.ttft_seconds
    for bound, i, j in _runs(t):
        width = sum(s.seconds for s in t.decode[i:j])
        top.barh(0, width * k, left=start * k, color=BOUND_COLORS[bound], edgecolor="black")
        start += width
    top.set_yticks([])
    top.set_xlim(0, t.total_seconds * k)
    top.set_xlabel(f"time since the request arrived ({unit})")
    top.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch="//", label="prefill"),
                        Patch(color=BOUND_COLORS["compute"], label="compute-bound"),
                        Patch(color=BOUND_COLORS["memory"], label="memory-bound")],
               fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.55), ncol=3)

    # each step's two limits: the larger one is the step's time
    steps = range(1, len(t.decode) + 1)
    bottom.scatter([0], [t.prefill.compute_seconds * 1e3], color=BOUND_COLORS["compute"],
                   marker="s", zorder=3, label="prefill: compute time")
    bottom.scatter([0], [t.prefill.memory_seconds * 1e3], color=BOUND_COLORS["memory"],
                   marker="s", zorder=3, label="prefill: memory time")
    if t.decode:
        bottom.plot(steps, [s.compute_seconds * 1e3 for s in t.decode],
                    color=BOUND_COLORS["compute"], label="decode step: compute time")
        bottom.plot(steps, [s.memory_seconds * 1e3 for s in t.decode],
                    color=BOUND_COLORS["memory"], label="decode step: memory time")
    bottom.set_yscale("log")
    bottom.set_xlabel("step (0 = prefill, n = the step that writes output token n + 1)")
    bottom.set_ylabel("time of one step (ms)")
    bottom.grid(True, which="both", alpha=0.3)
    bottom.legend(fontsize=8, loc="best")

    if title is None:
        share = t.ttft_seconds / t.total_seconds
        decode_bound = ("no decode" if not t.decode else
                        " then ".join(f"{b}-bound" for b, _, _ in _runs(t)))
        title = (f"Prefill ({t.prefill.bound}-bound) is {share:.0%} of the time; "
                 f"decode is {decode_bound}")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def request_explorer(model: str = "llama-3-8b", hardware: str = "h100-sxm", dtype: str = "bf16",
                     prompt_tokens: int = 2000, output_tokens: int = 200, batch: int = 1):
    """Sliders and menus for one request (model, GPU, dtype, prompt and output length, batch);
    redraws `plot_request_timeline` on every change. Returns the widget to display."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    def pick(options, value, description):
        return w.SelectionSlider(options=list(options), value=value, description=description,
                                 continuous_update=False, style={"description_width": "initial"})

    controls = {
        "model": w.Dropdown(options=list(MODELS), value=model, description="model"),
        "hardware": w.Dropdown(options=list(HARDWARE), value=hardware, description="GPU"),
        "dtype": w.Dropdown(options=list(BYTES_PER_ELEMENT), value=dtype,
                            description="weights"),
        "prompt_tokens": pick(PROMPT_CHOICES, prompt_tokens, "prompt tokens"),
        "output_tokens": pick(OUTPUT_CHOICES, output_tokens, "output tokens"),
        "batch": pick(BATCH_CHOICES, batch, "batch"),
    }

    def draw(model, hardware, dtype, prompt_tokens, output_tokens, batch):
        m, h = get_model(model), get_hardware(hardware)
        need = (weight_bytes(m, dtype)
                + batch * (prompt_tokens + output_tokens) * kv_cache_bytes_per_token(m, dtype))
        if need > h.memory_bytes:
            print(f"Does not fit: {m.name} in {dtype} with {batch} x {prompt_tokens + output_tokens} "
                  f"tokens of KV cache needs {need / 1e9:.1f} GB; {h.name} has "
                  f"{h.memory_bytes / 1e9:.0f} GB. Try a smaller batch, shorter texts or int4.")
            return
        try:
            t = request_timeline(m, h, dtype, prompt_tokens, output_tokens, batch,
                                 compute_dtype=math_dtype(h, dtype))
        except ValueError as err:  # e.g. bf16 on a T4
            print(f"Cannot simulate: {err}")
            return
        print(describe_timeline(t, batch))
        print(f"Math in {math_dtype(h, dtype)} at the spec-sheet dense peak; "
              f"{h.bandwidth / 1e12:.3g} TB/s; weights {weight_bytes(m, dtype) / 1e9:.3g} GB.")
        plot_request_timeline(t)
        plt.show()

    out = w.interactive_output(draw, controls)
    c = controls
    return w.VBox([w.HBox([c["model"], c["hardware"], c["dtype"]]),
                   w.HBox([c["prompt_tokens"], c["output_tokens"], c["batch"]]), out])

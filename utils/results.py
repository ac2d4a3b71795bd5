"""Reference result files: runs of `python -m utils.profile` kept in results/ from machines a
reader may not have (a GPU, another CPU), shown beside the live numbers of the reader's own.

    from utils.results import reference_results, results_table
    print(results_table(reference_results()))

Every number here is read from a file that the profiler wrote; nothing is typed by hand. Which
files exist, and who ran them where, is in results/README.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The folder of reference files: beside utils/ in a checkout of the course. A pip install of
#: the package has none (reference_results then returns an empty list).
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
SCHEMA = "prefill-decode/profile/v1"


@dataclass(frozen=True)
class ResultSummary:
    """One machine at a glance. Rates are measured by the run, not spec-sheet peaks.

    bandwidth: memory read bandwidth, bytes/s. flops: GEMM FLOP/s in `dtype`.
    tpot_seconds / tpot_predicted_seconds: one batch-1 decode step of `model` with
    `tpot_context` tokens cached, measured (median) and predicted from the run's own measured
    bandwidth. ttft_seconds: prefill of `ttft_prompt_tokens` tokens, the longest prompt of the run.
    """

    source: str
    machine: str
    device: str
    dtype: str
    model: str
    bandwidth: float
    flops: float
    tpot_seconds: float | None
    tpot_predicted_seconds: float | None
    tpot_context: int | None
    ttft_seconds: float | None
    ttft_prompt_tokens: int | None
    created: str = ""

    @property
    def ridge_flop_per_byte(self) -> float:
        """FLOP per byte at which this machine's measured roofline bends."""
        return self.flops / self.bandwidth


def load_result(path: str | Path) -> dict[str, Any]:
    """Read one file written by `python -m utils.profile`, checking that it is one."""
    from utils.profile import RESULT_KEYS

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no result file {path}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}): write it with "
                         "python -m utils.profile --out FILE") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path} is not a profile result: schema {found!r}, expected {SCHEMA!r}")
    missing = [k for k in RESULT_KEYS if k not in data]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: a profile result has "
                         f"{', '.join(RESULT_KEYS)}")
    return data


def summarize(data: dict[str, Any], source: str = "") -> ResultSummary:
    """The headline numbers of one result (as load_result returns it)."""
    hw = data["hardware"]
    sweeps = data["sweeps"]
    tpot = _first_done(sweeps.get("tpot_vs_batch_size"), lambda r: r.get("batch") == 1)
    ttft = _last_done(sweeps.get("ttft_vs_prompt_length"))
    return ResultSummary(
        source=source, machine=str(data["device"].get("device_name", "?")),
        device=str(data["device"].get("device", "?")), dtype=data["dtype"],
        model=data["model"]["name"], bandwidth=float(hw["bandwidth"]),
        flops=float(hw["dense_flops"][data["dtype"]]),
        tpot_seconds=tpot and tpot["seconds"],
        tpot_predicted_seconds=tpot and tpot["predicted_seconds"],
        tpot_context=tpot and tpot.get("context"),
        ttft_seconds=ttft and ttft["seconds"],
        ttft_prompt_tokens=ttft and ttft["prompt_tokens"],
        created=str(data.get("created", "")))


def _done(sweep: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [r for r in (sweep or {}).get("records", []) if r.get("seconds") is not None]


def _first_done(sweep: dict[str, Any] | None, keep) -> dict[str, Any] | None:
    return next((r for r in _done(sweep) if keep(r)), None)


def _last_done(sweep: dict[str, Any] | None) -> dict[str, Any] | None:
    done = _done(sweep)
    return done[-1] if done else None


def reference_results(folder: str | Path | None = None) -> list[ResultSummary]:
    """A summary of every reference file in `folder` (default RESULTS_DIR), by file name;
    `*.tmp.json` scratch runs are skipped. No folder (e.g. a pip install): an empty list."""
    folder = RESULTS_DIR if folder is None else Path(folder)
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.glob("*.json") if not p.name.endswith(".tmp.json"))
    return [summarize(load_result(p), p.name) for p in files]


@dataclass(frozen=True)
class ModelSizePoint:
    """One record of a reference file's `tpot_vs_model_size` sweep: a batch-1 decode step of a
    random-weight model of that shape. step_bytes: bytes the step reads; seconds: measured
    (None if the run skipped it, with the reason in `skipped`); predicted_seconds: the roofline
    from a bandwidth reading taken just before it."""

    source: str
    device: str
    machine: str
    model: str
    step_bytes: float
    seconds: float | None
    predicted_seconds: float
    skipped: str | None = None

    @property
    def predicted_over_measured(self) -> float | None:
        return None if self.seconds is None else self.predicted_seconds / self.seconds


def model_size_points(folder: str | Path | None = None) -> list[ModelSizePoint]:
    """The model-size sweep of every reference file (see reference_results), in file order;
    a file without that sweep adds nothing."""
    folder = RESULTS_DIR if folder is None else Path(folder)
    points = []
    for summary in reference_results(folder):
        sweep = load_result(folder / summary.source)["sweeps"].get("tpot_vs_model_size") or {}
        for r in sweep.get("records", []):
            points.append(ModelSizePoint(
                summary.source, summary.device, summary.machine, r.get("model", "?"),
                float(r.get("bytes", r.get("weight_bytes", 0))), r.get("seconds"),
                float(r["predicted_seconds"]), r.get("skipped")))
    return points


def results_table(rows: list[ResultSummary]) -> str:
    """A fixed-width text table of summaries: machine, measured limits, TPOT and TTFT."""
    head = (f"{'machine':<34}{'dtype':<6}{'read GB/s':>10}{'GEMM TFLOP/s':>14}{'ridge F/B':>10}"
            f"{'TPOT ms (pred.)':>18}{'TTFT ms @ tokens':>20}")
    lines = [head, "-" * len(head)]
    for r in rows:
        tpot = (f"{r.tpot_seconds * 1e3:.1f} ({r.tpot_predicted_seconds * 1e3:.1f})"
                if r.tpot_seconds is not None else "-")
        ttft = (f"{r.ttft_seconds * 1e3:,.0f} @ {r.ttft_prompt_tokens:,}"
                if r.ttft_seconds is not None else "-")
        name = f"{r.device}: {r.machine}"
        lines.append(f"{name[:33]:<34}{r.dtype:<6}{r.bandwidth / 1e9:>10.1f}{r.flops / 1e12:>14.2f}"
                     f"{r.ridge_flop_per_byte:>10.1f}{tpot:>18}{ttft:>20}")
    return "\n".join(lines)

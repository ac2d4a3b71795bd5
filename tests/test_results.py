"""Reference result files: the committed ones are genuine profiler output with their provenance,
and the summary shown in the chapters reads the right numbers out of a file."""

import copy
import json
import re
from pathlib import Path

import pytest

from utils.profile import RESULT_KEYS
from utils.results import (
    RESULTS_DIR,
    SCHEMA,
    load_result,
    model_size_points,
    reference_results,
    results_table,
    summarize,
)

COMMITTED = sorted(p for p in RESULTS_DIR.glob("*.json") if not p.name.endswith(".tmp.json"))


def fake_result() -> dict:
    """A minimal profile result with numbers chosen to be checked by hand."""
    return {
        "schema": SCHEMA, "created": "2026-11-29T12:00:00+0000",
        "command": "python -m utils.profile --quick", "quick": True, "elapsed_seconds": 90.0,
        "device": {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "dtype": "bf16"},
        "dtype": "bf16",
        "hardware": {"name": "h100, measured", "kind": "measured", "bandwidth": 3.0e12,
                     "dense_flops": {"bf16": 7.5e14}, "memory_bytes": 8e10},
        "bandwidth": {"read_bytes_per_s": 3.0e12}, "matmul": {"flops_per_s": 7.5e14},
        "model": {"name": "smollm2-135m", "n_params": 134515008, "weight_bytes": 269030016,
                  "weights": "gguf"},
        "sweeps": {
            "tpot_vs_batch_size": {"name": "tpot_vs_batch_size", "x": "batch", "meta": {},
                                   "records": [
                {"batch": 2, "context": 256, "seconds": 0.0031, "predicted_seconds": 0.0001},
                {"batch": 1, "context": 256, "seconds": 0.0030, "predicted_seconds": 0.00009}]},
            "ttft_vs_prompt_length": {"name": "ttft_vs_prompt_length", "x": "prompt_tokens",
                                      "meta": {}, "records": [
                {"prompt_tokens": 512, "seconds": 0.004, "predicted_seconds": 0.001},
                {"prompt_tokens": 2048, "seconds": 0.012, "predicted_seconds": 0.004},
                {"prompt_tokens": 8192, "seconds": None, "skipped": "time budget"}]},
        },
    }


def test_summary_reads_the_headline_numbers_by_hand() -> None:
    s = summarize(fake_result(), "h100.json")
    assert s.machine == "NVIDIA H100 80GB HBM3" and s.device == "cuda" and s.dtype == "bf16"
    assert s.bandwidth == 3.0e12 and s.flops == 7.5e14
    assert s.ridge_flop_per_byte == pytest.approx(250.0)  # 7.5e14 / 3e12
    assert (s.tpot_seconds, s.tpot_predicted_seconds, s.tpot_context) == (0.0030, 0.00009, 256)
    assert (s.ttft_seconds, s.ttft_prompt_tokens) == (0.012, 2048)  # the skipped 8192 is not used
    table = results_table([s])
    assert "cuda: NVIDIA H100 80GB HBM3" in table and "250.0" in table
    assert "3.0 (0.1)" in table and "12 @ 2,048" in table and "3000.0" in table


def test_a_result_without_sweeps_still_summarizes() -> None:
    data = fake_result()
    data["sweeps"] = {}
    s = summarize(data)
    assert s.tpot_seconds is None and s.ttft_seconds is None
    assert results_table([s]).splitlines()[-1].split()[-2:] == ["-", "-"]  # no TPOT, no TTFT


def test_bad_files_are_named_with_what_was_expected(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ValueError, match="junk.json is not valid JSON"):
        load_result(tmp_path / "junk.json")
    other = fake_result() | {"schema": "something/else"}
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="schema 'something/else', expected 'prefill-decode/profile/v1'"):
        load_result(tmp_path / "other.json")
    partial = fake_result()
    del partial["matmul"]
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    with pytest.raises(ValueError, match="lacks matmul"):
        load_result(tmp_path / "partial.json")
    with pytest.raises(FileNotFoundError, match="no result file"):
        load_result(tmp_path / "absent.json")


def test_reference_results_skip_scratch_runs_and_missing_folders(tmp_path: Path) -> None:
    assert reference_results(tmp_path / "nowhere") == []
    (tmp_path / "b-gpu.json").write_text(json.dumps(fake_result()))
    cpu = copy.deepcopy(fake_result())
    cpu["device"]["device_name"] = "AMD EPYC"
    (tmp_path / "a-cpu.json").write_text(json.dumps(cpu))
    (tmp_path / "c-scratch.tmp.json").write_text("{broken")
    rows = reference_results(tmp_path)
    assert [r.source for r in rows] == ["a-cpu.json", "b-gpu.json"]
    assert rows[0].machine == "AMD EPYC"


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_reference_files_are_genuine_and_listed(path: Path) -> None:
    data = load_result(path)
    assert tuple(data) == RESULT_KEYS
    assert data["command"].startswith("python -m utils.profile")
    # the summary's numbers are the raw measurements of the same run
    assert data["hardware"]["bandwidth"] == data["bandwidth"]["read_bytes_per_s"]
    assert data["hardware"]["dense_flops"][data["dtype"]] == data["matmul"]["flops_per_s"]
    for sweep in data["sweeps"].values():
        for rec in sweep["records"]:
            if rec.get("seconds") is not None:  # each median is one of its samples' medians
                samples = sorted(rec["samples"])
                assert samples[0] <= rec["seconds"] <= samples[-1]
    # provenance: a row of the README's table names the file, the machine and a commit
    readme = (RESULTS_DIR / "README.md").read_text()
    row = next((line for line in readme.splitlines() if f"`{path.name}`" in line), None)
    assert row is not None, f"add {path.name} to the table in results/README.md"
    assert re.search(r"\b[0-9a-f]{7,40}\b", row), f"the README row of {path.name} needs a commit"


def test_the_course_ships_at_least_one_reference_file() -> None:
    assert COMMITTED, "results/ holds no reference file: run python -m utils.profile --out ..."
    assert all(r.bandwidth > 0 and r.flops > 0 for r in reference_results())


def test_the_readme_example_runs_on_the_committed_file(monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    readme = (RESULTS_DIR / "README.md").read_text()
    section = readme.split("## Reading a file in a notebook", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(RESULTS_DIR.parent)
    namespace: dict = {}
    exec(compile(code, "results/README.md", "exec"), namespace)
    assert namespace["hw"].kind == "measured"
    assert namespace["ttft"].operating_points()


def test_model_size_points_read_every_file_and_keep_skips(tmp_path: Path) -> None:
    with_sizes = fake_result()
    with_sizes["sweeps"]["tpot_vs_model_size"] = {
        "name": "tpot_vs_model_size", "x": "weight_bytes", "meta": {}, "records": [
            {"weight_bytes": 5.4e8, "model": "smollm2-135m", "bytes": 5.5e8, "seconds": 0.020,
             "predicted_seconds": 0.0125},
            {"weight_bytes": 3.2e10, "model": "llama-3-8b", "seconds": None,
             "predicted_seconds": 0.7, "skipped": "skipped: does not fit"}]}
    (tmp_path / "a.json").write_text(json.dumps(with_sizes))
    (tmp_path / "b.json").write_text(json.dumps(fake_result()))  # no model-size sweep
    small, big = model_size_points(tmp_path)
    assert (small.source, small.model, small.step_bytes) == ("a.json", "smollm2-135m", 5.5e8)
    assert small.predicted_over_measured == pytest.approx(0.625)
    assert big.seconds is None and big.predicted_over_measured is None
    assert big.skipped == "skipped: does not fit" and big.step_bytes == 3.2e10

"""Device and precision choice, and the timers every measurement uses."""

from __future__ import annotations

import time

import pytest
import torch

from utils.device import (
    default_dtype,
    describe,
    device_name,
    dtype_name,
    pick_device,
    start_notebook,
    to_torch_dtype,
)
from utils.timing import Stopwatch, median, time_fn


def test_cpu_defaults_to_fp32() -> None:
    assert default_dtype("cpu") == torch.float32
    assert pick_device("cpu").type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no CUDA GPU"):
        pick_device("cuda")


def test_bad_device_and_dtype_names() -> None:
    with pytest.raises(ValueError, match="choose cpu or cuda"):
        pick_device("tpu")
    with pytest.raises(ValueError, match="choose one of fp32, bf16, fp16"):
        to_torch_dtype("fp64", "cpu")
    assert to_torch_dtype("bf16", "cpu") == torch.bfloat16
    assert dtype_name(torch.float16) == "fp16"


def test_describe_records_versions() -> None:
    info = describe("cpu", torch.float32)
    assert info["device"] == "cpu" and info["dtype"] == "fp32" and info["torch"] == torch.__version__
    assert info["cpu_cores"] >= 1 and info["machine"]
    import numpy

    assert info["numpy"] == numpy.__version__


def test_cpu_name_comes_from_cpuinfo(tmp_path) -> None:
    (tmp_path / "x86").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                                  "model name\t: AMD EPYC 7R13 Processor\nflags\t: avx2\n")
    assert device_name("cpu", tmp_path / "x86") == "AMD EPYC 7R13 Processor"
    (tmp_path / "arm").write_text("processor\t: 0\nBogoMIPS\t: 48.00\n\nModel\t: Raspberry Pi 5\n")
    assert device_name("cpu", tmp_path / "arm") == "Raspberry Pi 5"
    assert device_name("cpu", tmp_path / "missing")  # falls back to the platform's name


def test_start_notebook_seeds_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    dev, dtype = start_notebook(seed=3)
    a = torch.rand(3)
    start_notebook(seed=3)
    assert torch.equal(a, torch.rand(3))
    out = capsys.readouterr().out
    assert dev.type in out and dtype_name(dtype) in out


def test_stopwatch_measures_a_sleep() -> None:
    with Stopwatch("cpu") as sw:
        time.sleep(0.05)
    assert 0.045 < sw.seconds < 1.0


def test_time_fn_runs_warmup_and_repeats() -> None:
    calls = []
    times = time_fn(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)
    assert median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError, match="repeats"):
        time_fn(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="no measurements"):
        median([])


def test_on_chip_bytes_on_this_cpu_is_kilobytes_to_a_gigabyte() -> None:
    import math

    from utils.device import on_chip_bytes

    counter = on_chip_bytes("cpu")
    assert math.isnan(counter) or 1e4 < counter < 1e9

"""Microbenchmarks, sweeps, the profile command line and the benchmarks: sanity and consistency.

No timing thresholds: speeds depend on the machine and its neighbours. The tests check how each
number is computed (against hand calculations), that repeated readings agree within a loose
factor, and the physics every machine shows (a longer prompt takes longer to prefill; decode at
batch 4 costs far less than 4 steps at batch 1).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

from utils import roofline
from utils.bench import bench_decode, decode_bytes, format_decode
from utils.bench import main as bench_main
from utils.hardware import Hardware, get_hardware
from utils.models import ModelShape
from utils.profile import (
    READ_KERNELS,
    RESULT_KEYS,
    SWEEPS,
    TINY_MODEL,
    Sweep,
    check_fits,
    measure_bandwidth,
    measure_hardware,
    measure_matmul_flops,
    read_buffer,
    resolve_dtype,
    run_profile,
    time_decode,
    tpot_vs_batch_size,
    ttft_vs_prompt_length,
)
from utils.profile import main as profile_main
from utils.timing import median

MiB = 2**20


@pytest.fixture(scope="module")
def hw() -> Hardware:
    return measure_hardware("cpu")


@pytest.fixture(scope="module")
def smollm():
    """SmolLM2-135M's shape with random weights: the same speed as the real model, no file."""
    from utils.loading import load_model

    model, _ = load_model("smollm2-135m", "cpu", "fp32", weights="random")
    return model


@pytest.fixture
def one_thread():
    """Compare timings on one CPU thread: on a machine shared with other jobs, a multi-threaded
    step can stall for milliseconds whenever one of its threads is not scheduled, while a
    single thread only slows down in proportion. The physics checked here holds either way.
    numpy's BLAS (the fp32 CPU decode path of utils.llama.linear) gets one thread too."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        yield
    torch.set_num_threads(before)


def within(a: float, b: float, factor: float) -> bool:
    return 1 / factor < a / b < factor


# ---- the device's own roofline ------------------------------------------------------------------

def test_bandwidth_counts_bytes_and_is_stable(one_thread) -> None:
    first = measure_bandwidth("cpu", buffer_bytes=128 * MiB, repeats=3)
    second = measure_bandwidth("cpu", buffer_bytes=128 * MiB, repeats=3)
    for m in (first, second):
        assert m.buffer_bytes == 128 * MiB
        assert len(m.read_seconds) == len(m.copy_seconds) == 3
        # each reading is the fastest of the read kernels
        for i, best in enumerate(m.read_seconds):
            assert best == min(times[i] for times in m.read_kernel_seconds.values())
        # read: every byte once; copy: read once and written once
        assert m.read_bytes_per_s == pytest.approx(128 * MiB / median(m.read_seconds))
        assert m.copy_bytes_per_s == pytest.approx(2 * 128 * MiB / median(m.copy_seconds))
        assert m.read_bytes_per_s > 0 and m.copy_bytes_per_s > 0
        assert m.meta["device"] == "cpu" and m.meta["torch"] == torch.__version__
    assert within(first.read_bytes_per_s, second.read_bytes_per_s, 3)
    assert within(first.copy_bytes_per_s, second.copy_bytes_per_s, 3)


def test_every_read_kernel_reads_every_element() -> None:
    # a buffer of ones with one 7 planted in the last element: each kernel's answer shows it
    # touched all 4096 x 1024 elements, the tail included
    buf = read_buffer("cpu", 16 * MiB)
    buf[-1] = 7.0
    n = buf.numel()
    expect = {"sum": n + 6.0, "amax": 7.0, "dot": n + 48.0}
    assert set(READ_KERNELS) == {"sum", "amax", "dot", "gemv"}
    for name, kernel in READ_KERNELS.items():
        out = kernel(buf)
        if name == "gemv":  # one sum of 1024 elements per row
            rows = torch.as_tensor(out)
            assert rows.shape == (n // 1024,) and float(rows[:-1].min()) == float(rows[:-1].max()) == 1024
            assert float(rows[-1]) == 1024 + 6
        else:
            assert float(out) == expect[name], name


def test_bandwidth_rejects_tiny_and_huge_buffers() -> None:
    with pytest.raises(ValueError, match="too small"):
        measure_bandwidth("cpu", buffer_bytes=1000)
    with pytest.raises(ValueError, match="does not fit"):
        measure_bandwidth("cpu", buffer_bytes=2**50)


def test_matmul_flops_counts_2n3_and_is_stable(one_thread) -> None:
    runs = [measure_matmul_flops("cpu", "fp32", n=768, repeats=5) for _ in range(2)]
    for m in runs:
        assert m.n == 768 and m.dtype == "fp32" and len(m.seconds) == 5
        assert m.flops == 2 * 768**3
        assert m.flops_per_s == pytest.approx(2 * 768**3 / median(m.seconds))
    assert within(runs[0].flops_per_s, runs[1].flops_per_s, 3)


def test_measured_hardware_feeds_the_roofline(hw: Hardware) -> None:
    assert hw.kind == "measured" and hw.bandwidth > 0 and hw.dense_flops["fp32"] > 0
    assert measure_hardware("cpu") is hw  # cached per process
    assert get_hardware("cpu") is hw
    assert hw.memory_bytes > 1e9
    # decode of SmolLM2-135M at batch 1 is memory-bound: its bound is weight bytes / bandwidth
    cost = roofline.decode_cost("smollm2-135m", hw, "fp32")
    assert cost.bound == "memory"
    assert cost.seconds == pytest.approx(134_515_008 * 4 / hw.bandwidth, rel=1e-3)


# ---- bad input: clear messages before work ------------------------------------------------------

def test_low_precision_without_native_support_falls_back_to_fp32(monkeypatch) -> None:
    import utils.profile as profile

    monkeypatch.setattr(profile, "native_low_precision", lambda device, dtype: False)
    with pytest.warns(RuntimeWarning, match="no native support.*fp32 instead"):
        assert resolve_dtype("cpu", "bf16") == torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_dtype("cpu", "bf16", force=True) == torch.bfloat16
        assert resolve_dtype("cpu", "fp32") == torch.float32
    with pytest.raises(ValueError, match="choose one of fp32, bf16, fp16"):
        resolve_dtype("cpu", "fp64")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_fails_before_any_work(tmp_path, capsys) -> None:
    with pytest.raises(ValueError, match="no CUDA GPU"):
        run_profile(device="cuda")
    out = tmp_path / "r.json"
    assert profile_main(["--device", "cuda", "--out", str(out)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err and not out.exists()


def test_model_too_big_is_refused_before_loading(capsys) -> None:
    with pytest.raises(ValueError, match=r"llama-3-70b in fp32 needs 2\d\d\.\d\d GB"):
        check_fits("llama-3-70b", "cpu", "fp32")
    assert check_fits("smollm2-135m", "cpu", "fp32") == pytest.approx(134_515_008 * 4)
    with pytest.raises(ValueError, match="available"):
        bench_decode("llama-3-70b", "cpu", "fp32", weights="random")
    assert bench_main(["decode", "--model", "llama-3-70b", "--weights", "random"]) == 2
    assert "needs" in capsys.readouterr().err


# ---- sweeps on the model ------------------------------------------------------------------------

def test_ttft_grows_with_prompt_length(smollm, hw: Hardware, one_thread) -> None:
    sweep = ttft_vs_prompt_length(smollm, (16, 256), repeats=3, hardware=hw)
    short, long = sweep.records
    assert (short["prompt_tokens"], long["prompt_tokens"]) == (16, 256)
    assert short["seconds"] == median(short["samples"]) and len(short["samples"]) == 3
    assert min(long["samples"]) > min(short["samples"])  # the fastest runs: least disturbed
    assert long["predicted_seconds"] > short["predicted_seconds"]
    assert long["predicted_seconds"] == pytest.approx(
        roofline.prefill_seconds("smollm2-135m", hw, "fp32", 256))
    assert long["flops"] == pytest.approx(roofline.forward_flops("smollm2-135m", 256))
    assert sweep.column("prompt_tokens") == [16, 256]
    assert sweep.meta["dtype"] == "fp32" and sweep.meta["model"] == "smollm2-135m"
    json.dumps(sweep.to_dict())  # plain data


def test_decode_at_batch_4_costs_far_less_than_4_steps(smollm, hw: Hardware, one_thread) -> None:
    sweep = tpot_vs_batch_size(smollm, (1, 4), context=32, steps=5, hardware=hw)
    one, four = sweep.records
    # memory-bound: the weights are read once for all 4 rows. (Measured here: about 2.2x; a
    # small-M GEMM streams the weights less efficiently than batch 1's matrix-vector product.)
    assert min(four["samples"]) < 3.0 * min(one["samples"])
    assert four["tokens_per_s"] == pytest.approx(4 / four["seconds"])
    assert one["bound"] == four["bound"] == "memory"
    # hand count: weights + (32 + 1) cached positions x 2 x 30 layers x 192 x 4 bytes, per row
    assert four["bytes"] == pytest.approx(134_515_008 * 4 + 4 * 33 * 2 * 30 * 192 * 4)


def test_time_decode_without_cache_recomputes_the_sequence(smollm, one_thread) -> None:
    cached = time_decode(smollm, 1, 128, steps=3, warmup=1)
    recomputed = time_decode(smollm, 1, 128, steps=3, warmup=1, use_cache=False)
    assert len(cached) == len(recomputed) == 3
    assert min(recomputed) > min(cached)  # 129 tokens through the model vs 1


# ---- the command lines --------------------------------------------------------------------------

def test_profile_cli_writes_the_documented_json(tmp_path, root) -> None:
    out = tmp_path / "results.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # robust on a shared machine; same code path
    proc = subprocess.run([sys.executable, "-m", "utils.profile", "--tiny", "--no-progress",
                           "--device", "cpu", "--out", str(out)],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "GB/s" in proc.stdout and str(out) in proc.stdout
    data = json.loads(out.read_text())
    assert tuple(data) == RESULT_KEYS
    assert data["device"]["device"] == "cpu" and data["dtype"] == "fp32"
    assert data["hardware"]["kind"] == "measured" and data["hardware"]["bandwidth"] > 0
    assert data["hardware"]["bandwidth"] == data["bandwidth"]["read_bytes_per_s"]
    assert data["matmul"]["flops_per_s"] == data["hardware"]["dense_flops"]["fp32"]
    assert data["model"]["name"] == TINY_MODEL.name
    assert set(data["sweeps"]) == set(SWEEPS)
    for name, sweep in data["sweeps"].items():
        assert sweep["name"] == name and sweep["records"], name
        for rec in sweep["records"]:
            assert rec[sweep["x"]] is not None
            assert rec["seconds"] > 0 and rec["predicted_seconds"] > 0
            assert len(rec["samples"]) >= 1
    for rec in data["sweeps"]["tpot_vs_model_size"]["records"]:  # each with its own reading
        assert rec["predicted_seconds"] == pytest.approx(
            max(rec["bytes"] / rec["bandwidth_bytes_per_s"], rec["flops"] / data["matmul"]["flops_per_s"]))
    # the file reads back as results/README.md shows
    assert Hardware(**data["hardware"]).kind == "measured"
    ttft = Sweep(**data["sweeps"]["ttft_vs_prompt_length"])
    assert ttft.column("prompt_tokens") == [8, 64]


def test_sweep_plot_shows_measured_and_predicted() -> None:
    import matplotlib

    matplotlib.use("Agg")
    sweep = Sweep("tpot_vs_batch_size", "batch",
                  [{"batch": b, "seconds": 0.01 * b, "predicted_seconds": 0.008} for b in (1, 2)])
    ax = sweep.plot()
    measured, predicted = ax.get_lines()
    assert list(measured.get_ydata()) == pytest.approx([10.0, 20.0])  # milliseconds
    assert list(predicted.get_ydata()) == pytest.approx([8.0, 8.0])
    assert ax.get_xlabel() == "batch" and "ms" in ax.get_ylabel()


def test_bench_usage_and_unknown_benchmark(capsys) -> None:
    assert bench_main([]) == 2
    assert "usage: python -m utils.bench {decode,prefill,serving}" in capsys.readouterr().err
    assert bench_main(["fastest"]) == 2
    assert "unknown benchmark 'fastest': choose one of decode, prefill" in capsys.readouterr().err


def test_decode_bytes_by_hand(smollm) -> None:
    # 134,515,008 parameters x 4 bytes (the tied 49152 x 576 table once) + 129 cached positions
    # x (K and V) x 30 layers x (3 KV heads x 64) x 4 bytes
    assert decode_bytes(smollm, 128) == 538_060_032 + 129 * 2 * 30 * 192 * 4


def test_decode_bytes_count_one_row_of_an_untied_embedding() -> None:
    from types import SimpleNamespace

    from utils.models import get_model

    llama = SimpleNamespace(config=get_model("llama-3-8b"),
                            output=SimpleNamespace(weight=torch.empty(0, dtype=torch.bfloat16)))
    n = get_model("llama-3-8b").n_params
    table = 128256 * 4096
    assert decode_bytes(llama, 0) == 2 * (n - table + 4096) + 1 * 2 * 32 * 1024 * 2


def test_bench_decode_reports_pairwise_ratios() -> None:
    r = bench_decode(TINY_MODEL, "cpu", "fp32", weights="random", context=8, pairs=3, steps=2,
                     reads=1, buffer_bytes=64 * MiB, mode="eager")
    assert len(r.pair_ratios) == len(r.limit_samples) == len(r.model_samples) == 3
    for ratio, a, b in zip(r.pair_ratios, r.limit_samples, r.model_samples):
        assert ratio == pytest.approx((r.work / b) / (64 * MiB / a))
    assert r.ratio == pytest.approx(median(r.pair_ratios))
    report = format_decode(r).splitlines()
    assert re.fullmatch(r"decode: \d+\.\d\d of measured memory bandwidth \(\d+\.\d GB/s of "
                        r"\d+\.\d GB/s\), \d+\.\d tokens/s", report[-1]), report[-1]
    # a tiny model is all overhead: the report points to a shape that is not, and to numpy
    assert r.ratio < 0.7 and "--model smollm2-1.7b --weights random" in report[-2]
    assert "--mode numpy" in report[-2]


def test_bench_decode_measures_the_numpy_step_by_default_on_a_cpu_in_fp32() -> None:
    r = bench_decode(TINY_MODEL, "cpu", "fp32", weights="random", context=8, pairs=1, steps=1,
                     reads=1, buffer_bytes=64 * MiB)
    assert r.params["mode"] == "numpy"
    assert "mode numpy" in format_decode(r).splitlines()[0]
    assert "utils.cpu_decode" in format_decode(r).splitlines()[-2]
    with pytest.raises(ValueError, match="choose one of eager, compile, cuda_graph, numpy"):
        bench_decode(TINY_MODEL, "cpu", "fp32", weights="random", mode="graph")


def test_bench_serving_dispatches_to_the_simulator(capsys) -> None:
    assert bench_main(["serving"]) == 0
    out = capsys.readouterr().out
    assert "10000 requests" in out and "continuous" in out and "disaggregated" in out


# ---- the chapters' measurements: operations per step, and the matmul sweep -----------------------

def test_operation_counter_counts_computations_not_views() -> None:
    from utils.profile import count_operations

    a, b = torch.ones(4, 4), torch.ones(4, 4)
    counted = count_operations(lambda: (a + b).view(16)[2:].t() * 2)  # view, slice, t: views
    assert counted.count == 2 and counted.by_name == {"add": 1, "mul": 1}
    # a reshape that cannot relabel memory (of a transposed matrix) copies: that one counts
    assert count_operations(lambda: a.t().reshape(16)).by_name == {"clone": 1}


def test_decode_operations_grow_by_the_same_count_per_layer() -> None:
    """A decode step is a fixed set of operations per layer plus a fixed head and tail, and
    the count does not depend on the width of the matrices."""
    from utils.loading import load_model
    from utils.profile import count_operations

    def ops(n_layers: int, d_model: int) -> int:
        shape = ModelShape("count", n_layers=n_layers, d_model=d_model, n_heads=4, n_kv_heads=2,
                           d_ff=2 * d_model, vocab_size=64, tied_embeddings=True, max_seq_len=32)
        model, _ = load_model(shape, device="cpu", weights="random")
        model.setup_caches(1, 16)
        return count_operations(lambda: model(torch.tensor([[3]]), torch.tensor([[5]]))).count

    two, four, six = ops(2, 32), ops(4, 32), ops(6, 32)
    per_layer = (four - two) // 2
    assert per_layer > 10 and six - four == four - two == 2 * per_layer
    assert ops(4, 64) == four  # wider matrices, the same operations


def test_matmul_sweep_counts_flops_and_bytes_by_hand() -> None:
    from utils.profile import matmul_sweep

    sweep = matmul_sweep("cpu", "fp32", token_counts=(1, 32), k=256, m=128, repeats=3, warmup=1)
    assert sweep.name == "matmul_vs_tokens" and sweep.column("tokens") == [1, 32]
    one, many = sweep.records
    assert one["flops"] == 2 * 1 * 256 * 128
    assert one["bytes"] == 4 * (1 * 256 + 256 * 128 + 1 * 128)  # fp32: read x and W, write y
    assert many["flop_per_byte"] == pytest.approx(2 * 32 * 256 * 128 / (4 * (32 * 256 + 256 * 128 + 32 * 128)))
    assert many["flop_per_byte"] > 10 * one["flop_per_byte"]
    for rec in sweep.records:
        assert len(rec["samples"]) == 3 and rec["flops_per_s"] == pytest.approx(rec["flops"] / rec["seconds"])
    with pytest.raises(ValueError, match="need token counts"):
        matmul_sweep("cpu", "fp32", token_counts=(0,))
    with pytest.raises(ValueError, match="more than half"):
        matmul_sweep("cpu", "fp32", token_counts=(1,), k=2**20, m=2**20)


# ---- .ci/gpu-check: the prepared GPU run ----------------------------------------------------------

def gpu_check_steps(root) -> list[tuple[str, int, list[str]]]:
    import shlex

    text = (root / ".ci" / "gpu-check").read_text().replace("\\\n", " ")
    steps = []
    for line in text.splitlines():
        if line.startswith("step "):
            _, name, limit, *command = shlex.split(line)
            steps.append((name, int(limit), command))
    return steps


def test_gpu_check_refuses_a_machine_without_cuda(root, tmp_path) -> None:
    assert subprocess.run(["bash", "-n", str(root / ".ci" / "gpu-check")]).returncode == 0
    proc = subprocess.run([str(root / ".ci" / "gpu-check"), str(tmp_path / "out")], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 2
    assert "no CUDA GPU visible" in proc.stderr and not (tmp_path / "out").exists()
    proc = subprocess.run([str(root / ".ci" / "gpu-check")], cwd=root, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHON": "/nonexistent/python"})
    assert proc.returncode == 2 and "cannot import torch" in proc.stderr


def test_gpu_check_steps_are_valid_command_lines(root, tmp_path) -> None:
    """Every step's arguments parse: on this CPU machine each stops at the CUDA check, with
    the clear message, not at a usage error."""
    steps = gpu_check_steps(root)
    assert steps[0][0] == "decode-llama-3-8b-cuda_graph"
    assert len(steps) + 1 <= 8  # + nvidia-smi.log: what a lent GPU machine sends back
    assert sum(limit for _, limit, _ in steps) <= 570  # inside a 600 s command, with start-up
    for name, _, command in steps:
        argv = [sys.executable if a == "$py" else a.replace("$out", str(tmp_path)) for a in command]
        proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (name, proc.stderr[-500:])
        assert "no CUDA GPU" in proc.stderr, (name, proc.stderr[-500:])


def test_sweep_records_become_measured_roofline_points() -> None:
    sweep = Sweep("decode_with_and_without_cache", "context", [
        {"context": 64, "cached": True, "seconds": 0.02, "flops": 3e8, "bytes": 6e8},
        {"context": 64, "cached": False, "seconds": 0.5, "flops": 4e10, "bytes": 6e8},
        {"context": 999, "cached": True, "seconds": None, "skipped": "time budget"},
    ])
    cached, recomputed = sweep.operating_points()  # the skipped record is left out
    assert (cached.label, recomputed.label) == ("context=64", "context=64, no cache")
    assert cached.flop_per_byte == pytest.approx(0.5) and cached.flops_per_second == pytest.approx(1.5e10)
    assert recomputed.flop_per_byte == pytest.approx(4e10 / 6e8)
    assert recomputed.flops_per_second == pytest.approx(8e10) and recomputed.kind == "measured"
    sizes = Sweep("tpot_vs_model_size", "weight_bytes",
                  [{"weight_bytes": 5e8, "model": "smollm2-135m", "seconds": 0.02, "flops": 3e8,
                    "bytes": 5.4e8}])
    assert sizes.operating_points()[0].label == "smollm2-135m"


def test_progress_bar_closes_its_own_bar_but_not_the_callers() -> None:
    from utils.profile import progress_bar, tick

    with pytest.raises(RuntimeError), progress_bar(True, 3, "test") as bar:
        tick(bar, "one")
        raise RuntimeError("a sweep failed half-way")
    assert bar.n == 1 and bar.disable is True  # tqdm disables a bar when it is closed

    class Callers:
        closed, ticks = False, 0

        def update(self, n: int) -> None:
            self.ticks += n

        def close(self) -> None:
            self.closed = True

    mine = Callers()
    with progress_bar(mine, 3, "test") as bar:
        tick(bar, "one")
    assert bar is mine and mine.ticks == 1 and not mine.closed
    with progress_bar(False, 3, "test") as bar:
        tick(bar, "nothing to show")
    assert bar is None

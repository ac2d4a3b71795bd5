"""Pick the device and the precision a notebook runs in, and describe them for the record."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import torch

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """CUDA when present, else CPU; an explicit request is checked, not silently downgraded."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"unknown device {device!r}: choose cpu or cuda") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but this machine has no CUDA GPU: use 'cpu' "
                         "(on Colab: Runtime > Change runtime type > GPU)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}: choose cpu or cuda")
    return dev


def default_dtype(device: str | torch.device) -> torch.dtype:
    """fp32 on CPU (bf16 matmuls are very slow without native support); on CUDA bf16 where the
    GPU has it (Ampere and later), else fp16 (e.g. a T4)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def to_torch_dtype(dtype: str | torch.dtype | None, device: str | torch.device) -> torch.dtype:
    """Turn 'fp32' / 'bf16' / 'fp16' (or a torch dtype, or None for the default) into a torch dtype."""
    if dtype is None:
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}: choose one of {', '.join(_DTYPES)}")
        return dtype
    key = str(dtype).lower()
    if key not in _DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}: choose one of {', '.join(_DTYPES)}")
    return _DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16' or 'fp16': the names the roofline tables use."""
    for name, value in _DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"unsupported dtype {dtype}: choose one of {', '.join(_DTYPES)}")


def synchronize(device: str | torch.device) -> None:
    """Wait for queued GPU work; a no-op on CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: str | torch.device, cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The GPU's name, or the CPU's model name (Linux: /proc/cpuinfo), e.g. 'AMD EPYC'."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and value.strip():
                return value.strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "cpu"


def describe(device: str | torch.device, dtype: torch.dtype | None = None) -> dict[str, object]:
    """What a measurement ran on: device, its name, dtype, thread count and library versions."""
    dev = torch.device(device)
    info: dict[str, object] = {
        "device": dev.type,
        "device_name": device_name(dev),
        "dtype": dtype_name(dtype) if dtype is not None else None,
        "torch": torch.__version__,
        "numpy": np.__version__,  # its BLAS runs utils.llama's CPU decode path
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_cores": os.cpu_count(),
        "machine": platform.machine(),
    }
    if dev.type == "cuda":
        info["cuda"] = torch.version.cuda
    return info


def start_notebook(seed: int = 0, device: str | None = None) -> tuple[torch.device, torch.dtype]:
    """Seed every random generator, pick the device and precision, and say what was picked."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    dev = pick_device(device)
    dtype = default_dtype(dev)
    print(f"Running on {dev.type} ({device_name(dev)}) in {dtype_name(dtype)}, torch {torch.__version__}.")
    if dev.type == "cpu":
        print("No GPU found: that is fine, everything runs on the CPU. "
              "On Colab, Runtime > Change runtime type > T4 GPU gives you one.")
    return dev, dtype


def on_chip_bytes(device: str | torch.device) -> float:
    """The "counter": on-chip memory in bytes. GPU: L2 + shared memory of all SMs. CPU: every
    distinct data or unified cache (Linux sysfs only, else nan)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        shared = getattr(p, "shared_memory_per_multiprocessor", 0) * p.multi_processor_count
        return float(p.L2_cache_size + shared)
    caches = {}
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            kind, level, size, shared = ((index / f).read_text().strip()
                                         for f in ("type", "level", "size", "shared_cpu_list"))
        except OSError:
            continue
        if kind != "Instruction":
            caches[(level, shared)] = int(size.rstrip("K")) * 1024
    return float(sum(caches.values())) if caches else float("nan")

"""Accelerators and their spec-sheet peaks.

Every FLOP/s figure is a *dense* peak (no 2:4 structured sparsity); NVIDIA's headline tensor-core
figures are sparse and twice as large. Bandwidths are HBM/GDDR peaks in bytes/s (10^9 = GB);
capacities in bytes. The `source` of each entry is a key of references.bib.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

TERA = 1e12
GB = 1e9
MB = 1e6
KB = 1e3
MiB = 2**20
KiB = 2**10

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
}


def bytes_per_element(dtype: str) -> float:
    """Bytes per stored element of `dtype` ('fp32', 'bf16', 'int4', ...)."""
    key = str(dtype).lower().replace("float32", "fp32").replace("bfloat16", "bf16").replace(
        "float16", "fp16")
    if key not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of {', '.join(BYTES_PER_ELEMENT)}")
    return BYTES_PER_ELEMENT[key]


@dataclass(frozen=True)
class Hardware:
    """One device's limits.

    dense_flops: peak FLOP/s per dtype, dense. bandwidth: memory bytes/s. memory_bytes: HBM (or
    DRAM) capacity. l2_bytes and sram_bytes (shared memory/L1 summed over all SMs): the on-chip
    "counter". kind: "spec sheet" or "measured".
    """

    name: str
    dense_flops: dict[str, float]
    bandwidth: float
    memory_bytes: float
    l2_bytes: float = 0.0
    sram_bytes: float = 0.0
    kind: str = "spec sheet"
    source: str = ""
    notes: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.bandwidth <= 0:
            raise ValueError(f"{self.name}: bandwidth must be positive bytes/s, got {self.bandwidth}")
        if not self.dense_flops or any(v <= 0 for v in self.dense_flops.values()):
            raise ValueError(f"{self.name}: dense_flops must map dtypes to positive FLOP/s")

    def peak_flops(self, dtype: str, sparse: bool = False) -> float:
        """Peak FLOP/s for `dtype`; `sparse=True` gives the 2:4-sparsity headline (2x dense)
        where the datasheet quotes one (tensor-core dtypes of Ampere and later)."""
        bytes_per_element(dtype)  # validates the name
        key = str(dtype).lower()
        if key not in self.dense_flops:
            hint = ""
            if key == "bf16" and "fp16" in self.dense_flops:
                hint = " (it predates bfloat16: use fp16)"
            elif key == "int4":
                hint = " (for 4-bit weights with 16-bit math, pass compute_dtype='bf16' or 'fp16')"
            raise ValueError(
                f"{self.name} has no {key} peak{hint}: choose one of {', '.join(self.dense_flops)}")
        flops = self.dense_flops[key]
        if sparse:
            if key == "fp32" or self.kind != "spec sheet":
                raise ValueError(f"{self.name}: no sparse peak for {key}")
            return 2 * flops
        return flops

    def ridge_flop_per_byte(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) at which compute and memory time are equal."""
        return self.peak_flops(dtype) / self.bandwidth


HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in [
        Hardware(
            "h100-sxm",
            {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "bf16": 989.4 * TERA, "fp16": 989.4 * TERA,
             "fp8": 1978.9 * TERA, "int8": 1978.9 * TERA},
            bandwidth=3.35e12, memory_bytes=80 * GB, l2_bytes=50 * MB, sram_bytes=132 * 228 * KiB,
            source="nvidia2023h100", notes="132 SMs, up to 228 KiB shared memory each",
        ),
        Hardware(
            "h100-pcie",
            {"fp32": 51 * TERA, "tf32": 378 * TERA, "bf16": 756 * TERA, "fp16": 756 * TERA,
             "fp8": 1513 * TERA, "int8": 1513 * TERA},
            bandwidth=2.0e12, memory_bytes=80 * GB, l2_bytes=50 * MB, sram_bytes=114 * 228 * KiB,
            source="nvidia2023h100", notes="114 SMs",
        ),
        Hardware(
            "h200",
            {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "bf16": 989.4 * TERA, "fp16": 989.4 * TERA,
             "fp8": 1978.9 * TERA, "int8": 1978.9 * TERA},
            bandwidth=4.8e12, memory_bytes=141 * GB, l2_bytes=50 * MB, sram_bytes=132 * 228 * KiB,
            source="nvidia2024h200", notes="SXM; same compute as H100 SXM, more and faster HBM3e",
        ),
        Hardware(
            "a100-80gb",
            {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "bf16": 312 * TERA, "fp16": 312 * TERA,
             "int8": 624 * TERA},
            bandwidth=2.039e12, memory_bytes=80 * GB, l2_bytes=40 * MB, sram_bytes=108 * 164 * KiB,
            source="nvidia2021a100", notes="SXM; 108 SMs, up to 164 KiB shared memory each",
        ),
        Hardware(
            "l4",
            {"fp32": 30.3 * TERA, "tf32": 60 * TERA, "bf16": 121 * TERA, "fp16": 121 * TERA,
             "fp8": 242.5 * TERA, "int8": 242.5 * TERA},
            bandwidth=300e9, memory_bytes=24 * GB, l2_bytes=48 * MB, sram_bytes=58 * 100 * KiB,
            source="nvidia2023l4", notes="GDDR6; 58 SMs",
        ),
        Hardware(
            "t4",
            {"fp32": 8.1 * TERA, "fp16": 65 * TERA, "int8": 130 * TERA},
            bandwidth=320e9, memory_bytes=16 * GB, l2_bytes=4 * MB, sram_bytes=40 * 64 * KiB,
            source="nvidia2019t4",
            notes="Turing: no bf16 or tf32; GDDR6; 40 SMs, 64 KiB shared memory each; Colab's free GPU",
        ),
    ]
}


def get_hardware(name: str | Hardware) -> Hardware:
    """Look a device up by name; 'cpu' measures this machine (see utils.profile)."""
    if isinstance(name, Hardware):
        return name
    key = str(name).strip().lower()
    if key in HARDWARE:
        return HARDWARE[key]
    if key == "cpu":
        from utils.profile import measure_hardware

        return measure_hardware("cpu")
    choices = [*HARDWARE, "cpu"]
    close = difflib.get_close_matches(key, choices, n=3, cutoff=0.4)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ValueError(f"unknown hardware {name!r}{hint}: choose one of {', '.join(choices)}")

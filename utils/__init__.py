"""Prefill & Decode: the course's Python package.

Modules, one job each: hardware (spec sheets), models (shapes), roofline (napkin math), device
and timing (where and how to measure), llama (the model), cpu_decode (its decode step in numpy,
for CPUs), gguf_weights and loading (weights in), tokenizer, generate, chat (CLI), profile and
bench (measurements), serving and serving_plots (a scheduler simulator), plots and widgets
(figures, interactive controls), feedback and grading (graded exercises), notebook_setup (the
notebooks' first cell), results (reference measurements), cli (what the command lines share).
"""

from utils.hardware import HARDWARE, Hardware, get_hardware
from utils.models import MODELS, ModelShape, dense_model, get_model

__all__ = ["HARDWARE", "MODELS", "Hardware", "ModelShape", "dense_model", "get_hardware",
           "get_model", "load_model"]


def __getattr__(name: str):  # load_model pulls in torch; import it only when asked
    if name == "load_model":
        from utils.loading import load_model

        return load_model
    raise AttributeError(f"module 'utils' has no attribute {name!r}")

"""What the benchmark ran on: machine, CPU, memory, GPUs and driver, package versions."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Any

from tinydl.backends.base import THREAD_VARIABLES, cpu_model

PACKAGES = (
    "tinydl",
    "numpy",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "torch",
    "ncnn",
    "ai-edge-litert",
    "wgpu",
    "matplotlib",
)


def versions() -> dict[str, str | None]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def nvidia_gpus() -> list[dict[str, str]]:
    """NVIDIA GPUs as nvidia-smi lists them (name, driver, memory); empty without one."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in text.strip().splitlines():
        name, driver, memory = (p.strip() for p in line.split(",", 2))
        gpus.append({"name": name, "driver": driver, "memory": memory})
    return gpus


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "gpus": nvidia_gpus(),
    }
    if hasattr(os, "getloadavg"):
        # Other work on the machine shows in the timings; the load says how much there was.
        info["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    info["environment"] = {
        k: os.environ[k] for k in (*THREAD_VARIABLES, "CUDA_VISIBLE_DEVICES") if k in os.environ
    }
    return info

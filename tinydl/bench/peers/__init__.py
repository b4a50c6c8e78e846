"""Peer runtimes, one module each: `targets(model, config)` lists what that peer can measure
here, as Targets or as Skipped entries that say why not. Each module imports its library only
inside those calls, so a missing library is a skip, never an ImportError.
"""

from __future__ import annotations

import importlib
import importlib.util

from tinydl.bench.harness import Config, Model, Skipped, Target

# --peers name -> module under tinydl.bench.peers
PEERS = {
    "onnxruntime": "onnxruntime",
    "torch": "torch",
    "ncnn": "ncnn",
    "litert": "litert",
}


def peer_targets(names: list[str], model: Model, config: Config) -> list[Target | Skipped]:
    out: list[Target | Skipped] = []
    for name in names:
        module = importlib.import_module(f"tinydl.bench.peers.{PEERS[name]}")
        out += module.targets(model, config)
    return out


def missing(package: str, name: str, pip: str) -> Skipped:
    return Skipped(name, f"{package} is not installed (pip install {pip})", name.split("/")[0])


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


__all__ = ["PEERS", "installed", "missing", "peer_targets"]

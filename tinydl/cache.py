"""Where tinydl keeps what it learns between processes: $TINYDL_CACHE_DIR, by default
~/.cache/tinydl. Each user of it has a folder of its own: cuda/ (compiled kernels), webgpu/
(shader-path choices), templates/ (compiled kernel templates), profiles/ (pipeline profiles),
models/ and sessions/ (imported models and compiled sessions: tinydl/snapshot.py).
Everything there can be deleted; it is made again."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TINYDL_CACHE_DIR"


def cache_dir(*parts: str) -> Path:
    """$TINYDL_CACHE_DIR (or ~/.cache/tinydl), joined with `parts`; not created."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "tinydl"
    return Path(root, *parts)

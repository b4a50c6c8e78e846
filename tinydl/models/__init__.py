"""The models tinydl ships: ESPCN ×2 and ×3 (our own weights, trained by tools/train_espcn.py).

    from tinydl.models import espcn_path, load_espcn
    graph = load_espcn(3)                # a validated ir.Graph: y (N,1,H,W) in [0,1] -> (N,1,3H,3W)

The .tdl files are package data, found with importlib.resources, so they work from a wheel too.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from tinydl.errors import InvalidInputError

ESPCN_SCALES = (2, 3)


def espcn_path(scale: int) -> Path:
    """Path of the shipped ESPCN ×`scale` model file (scale 2 or 3)."""
    if scale not in ESPCN_SCALES:
        raise InvalidInputError(f"ESPCN scale must be one of {ESPCN_SCALES}, got {scale!r}")
    # pip installs (wheel or editable) put package data on disk, so the resource is a real file.
    return Path(str(files(__package__) / f"espcn_x{scale}.tdl"))


def espcn_graph(layers, scale: int, name: str | None = None):
    """ESPCN (Shi et al. 2016) as an ir.Graph from its weights.

    `layers` is [(w1, b1), (w2, b2), (w3, b3)] in PyTorch/ONNX layout (out, in, kh, kw):
    conv 5×5 1→64, tanh, conv 3×3 64→32, tanh, conv 3×3 32→r², pixel shuffle (DepthToSpace CRD,
    PyTorch's PixelShuffle order). Input `y` is the luma channel in [0, 1], (N, 1, H, W) float32.
    """
    import numpy as np

    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    nodes, inits, x = [], {}, "y"
    for i, (w, b) in enumerate(layers, start=1):
        w = np.ascontiguousarray(w, np.float32)
        inits[f"conv{i}.weight"] = w
        inits[f"conv{i}.bias"] = np.ascontiguousarray(b, np.float32)
        pad = w.shape[-1] // 2
        out = f"conv{i}"
        nodes.append(
            Node(
                "Conv",
                [x, f"conv{i}.weight", f"conv{i}.bias"],
                [out],
                {"pads": [pad] * 4, "kernel_shape": list(w.shape[2:])},
                name=out,
            )
        )
        x = out
        if i < len(layers):
            nodes.append(Node("Tanh", [x], [f"tanh{i}"], name=f"tanh{i}"))
            x = f"tanh{i}"
    nodes.append(
        Node("DepthToSpace", [x], ["hr"], {"blocksize": scale, "mode": "CRD"}, name="pixel_shuffle")
    )
    graph = Graph(
        inputs=[Value("y", "float32", ("N", 1, "H", "W"))],
        outputs=[Value("hr", "float32", ("N", 1, None, None))],
        nodes=nodes,
        initializers=inits,
        name=name or f"espcn_x{scale}",
        metadata={"scale": scale, "input": "luma (BT.601 full range) in [0, 1]"},
    )
    return validate(graph)


def load_espcn(scale: int):
    """The shipped ESPCN ×`scale` as a validated ir.Graph."""
    from tinydl.runtime.loader import load

    return load(espcn_path(scale))


__all__ = ["ESPCN_SCALES", "espcn_graph", "espcn_path", "load_espcn"]

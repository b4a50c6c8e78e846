"""MemorySource: frames from memory — a list, an iterator or a NumPy array — the source of
tests and notebooks (Collect is the matching sink).

Inputs:  none (a source)
Outputs: out (Frame; Tensor with tensor=True) — an array item becomes a Frame (HxWx3, or HxW for
         format "gray") or a Tensor; a Frame (or, with tensor=True, a Tensor) is sent as it is
Options: items (a list or tuple, any other iterable or iterator — read lazily, once — or an
         array whose first axis numbers the frames, e.g. (N, H, W, 3) uint8), format ("rgb" |
         "bgr" | "gray" | "ycbcr": the arrays' color format), fps (float: array item i gets
         pts i / fps seconds; None: no timestamps; frames go as fast as downstream takes them),
         tensor (bool: arrays become Tensors), flow_id (int)

Items are sent as they are, not copied: leave them alone while the app runs. Expanded
instances each send the whole list or array; an iterator would be shared, so give each
instance its own. Runs on the thread executor only (the items live in the app's process).

From an app file, the items come from Python: an option whose whole value is one variable
keeps that variable's object, so

    # app.yaml:  src: {type: MemorySource, options: {items: "${frames}", fps: 25}}
    app = App.load("app.yaml", {"frames": frames})

feeds it (`tinydl pipeline run` cannot: its --set values are text).

Example:
    frames = np.random.default_rng(0).integers(0, 256, (30, 48, 64, 3), dtype=np.uint8)
    app.add("src", MemorySource(frames, fps=30))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import COLOR_FORMATS, Frame, Tensor

_END = object()


class MemorySource(Component):
    """The items of a list, iterator or array, in order, as Frames (or Tensors)."""

    inputs: dict = {}
    outputs = {"out": Frame}
    executors = ("thread",)

    def __init__(
        self,
        items: Iterable[Any] | np.ndarray,
        format: str = "rgb",
        fps: float | None = None,
        tensor: bool = False,
        flow_id: int | None = None,
    ):
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise PipelineError(
                "MemorySource: items must be a list, an iterator or an array, "
                f"got {type(items).__name__}"
            )
        if format not in COLOR_FORMATS:
            raise PipelineError(f"MemorySource: format must be one of {COLOR_FORMATS}")
        if fps is not None and not fps > 0:
            raise PipelineError(f"MemorySource: fps must be positive, got {fps!r}")
        self.items, self.format, self.fps, self.tensor = items, format, fps, tensor
        self.flow_id = flow_id

    def output_types(self, input_types):
        return {"out": Tensor if self.tensor else Frame}

    def open(self, ctx):
        self.iterator = iter(self.items)
        self.index = 0
        if self.flow_id is not None:
            ctx.flow_id = self.flow_id

    def process(self, ctx, inputs):
        item = next(self.iterator, _END)
        if item is _END:
            return None
        index, self.index = self.index, self.index + 1
        kind = Tensor if self.tensor else Frame
        if isinstance(item, kind):
            return {"out": item}
        if not isinstance(item, np.ndarray):
            raise PipelineError(
                f"MemorySource: item {index} is a {type(item).__name__}; expected a NumPy "
                f"array or a {kind.__name__}"
            )
        if self.tensor:
            return {"out": Tensor(item)}
        channels = () if self.format == "gray" else (3,)
        if item.ndim != 2 + len(channels) or item.shape[2:] != channels:
            want = "HxW" if self.format == "gray" else "HxWx3"
            raise PipelineError(
                f"MemorySource: item {index} has shape {item.shape}; a {self.format} frame is "
                f"{want}"
            )
        pts = None if self.fps is None else index / self.fps
        return {"out": Frame(item, self.format, pts)}

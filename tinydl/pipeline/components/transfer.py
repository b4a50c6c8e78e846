"""ToDevice and ToHost: move tensors onto a backend's device and back, as stages of their own,
so that with the thread executor the copy of frame n+1 overlaps the compute of frame n.

ToDevice
  Inputs:  in (Tensor or Frame — a frame's pixel array —, or a Batch of them)
  Outputs: out (DeviceTensor, or Batch[DeviceTensor]); one made from a Frame remembers the
           frame's format and pts (`DeviceTensor.frame`)
  Options: backend (str, "cpu": the name tinydl.backends knows it by), batch_axis (bool: a
           frame's pixels go up as (1, H, W, C), for a model that takes a batch of frames in
           channels-last order, such as tinydl superres's frame graph)

ToHost
  Inputs:  in (DeviceTensor, or Batch[DeviceTensor])
  Outputs: out (Tensor, or Batch[Tensor]); with frames=True, Frames (or Batch[Frame]): each
           device tensor must remember the frame it came from (ToDevice of a Frame, through
           Inference with output_as="device"), whose format and pts the downloaded pixels get,
           the batch axis taken off again
  Options: frames (bool, False)

Example (a frame model kept on the GPU from upload to download):
    app.add("up", ToDevice(backend="cuda", batch_axis=True))
    app.add("infer", Inference(model=session, output_as="device"))   # NHWC u8 in, u8 out
    app.add("down", ToHost(frames=True))                              # Frames again
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, DeviceTensor, Frame, Tensor, union


def _kind_of(got: Any, out: type) -> Any:
    batched = isinstance(got, type) and issubclass(got, Batch)
    single = isinstance(got, type) and not batched
    return Batch[out] if batched else out if single else union(out, Batch[out])


def _map(payload: Any, fn) -> Any:
    return payload.map(fn) if isinstance(payload, Batch) else fn(payload)


class ToDevice(Component):
    """Tensors (or frames' pixels) copied to a backend's device."""

    inputs = {"in": union(Tensor, Frame, Batch[Tensor], Batch[Frame])}
    outputs = {"out": union(DeviceTensor, Batch[DeviceTensor])}

    def __init__(self, backend: str = "cpu", batch_axis: bool = False):
        self.backend_name = backend
        self.batch_axis = batch_axis

    def output_types(self, input_types):
        return {"out": _kind_of(input_types.get("in", Any), DeviceTensor)}

    def open(self, ctx):
        from tinydl.backends import get_backend

        self.backend = get_backend(self.backend_name)

    def _one(self, item: Any) -> DeviceTensor:
        if isinstance(item, Frame):
            array = item.image[None] if self.batch_axis else item.image
            data = self.backend.to_device(array)
            return DeviceTensor(data, self.backend.name, replace(item, image=None), self.batch_axis)
        return DeviceTensor(self.backend.to_device(item.data), self.backend.name)

    def process(self, ctx, inputs):
        return {"out": _map(inputs["in"].payload, self._one)}


class ToHost(Component):
    """Device tensors copied back to host (NumPy) tensors, or frames."""

    inputs = {"in": union(DeviceTensor, Batch[DeviceTensor])}
    outputs = {"out": union(Tensor, Frame, Batch[Tensor], Batch[Frame])}

    def __init__(self, frames: bool = False):
        self.frames = frames
        if frames:
            self.outputs = {"out": union(Frame, Batch[Frame])}

    def output_types(self, input_types):
        return {"out": _kind_of(input_types.get("in", Any), Frame if self.frames else Tensor)}

    def open(self, ctx):
        from tinydl.backends import get_backend

        self.get_backend = get_backend

    def _one(self, item: DeviceTensor) -> Tensor | Frame:
        host = self.get_backend(item.backend).to_host(item.data)
        if not self.frames:
            return Tensor(host)
        if item.frame is None:
            raise PipelineError(
                "ToHost(frames=True): this device tensor holds no frame (upload Frames with "
                "ToDevice to keep their format and pts)"
            )
        if item.batch_axis and host.ndim == 4 and host.shape[0] == 1:
            host = host[0]
        return replace(item.frame, image=host)

    def process(self, ctx, inputs):
        return {"out": _map(inputs["in"].payload, self._one)}

"""ToDevice and ToHost: move tensors onto a backend's device and back, as stages of their own,
so that with the thread executor the copy of frame n+1 overlaps the compute of frame n.

ToDevice
  Inputs:  in (Tensor or Frame — a frame's pixel array —, or a Batch of them)
  Outputs: out (DeviceTensor, or Batch[DeviceTensor])
  Options: backend (str, "cpu": the name tinydl.backends knows it by)

ToHost
  Inputs:  in (DeviceTensor, or Batch[DeviceTensor])
  Outputs: out (Tensor, or Batch[Tensor])

Example:
    app.add("up", ToDevice(backend="cuda"))
    app.add("infer", Inference(model="m.tdl", backends="cuda", output_as="device"))
    app.add("down", ToHost())
"""

from __future__ import annotations

from typing import Any

from tinydl.pipeline.component import Component
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

    def __init__(self, backend: str = "cpu"):
        self.backend_name = backend

    def output_types(self, input_types):
        return {"out": _kind_of(input_types.get("in", Any), DeviceTensor)}

    def open(self, ctx):
        from tinydl.backends import get_backend

        self.backend = get_backend(self.backend_name)

    def _one(self, item: Any) -> DeviceTensor:
        array = item.image if isinstance(item, Frame) else item.data
        return DeviceTensor(self.backend.to_device(array), self.backend.name)

    def process(self, ctx, inputs):
        return {"out": _map(inputs["in"].payload, self._one)}


class ToHost(Component):
    """Device tensors copied back to host (NumPy) tensors."""

    inputs = {"in": union(DeviceTensor, Batch[DeviceTensor])}
    outputs = {"out": union(Tensor, Batch[Tensor])}

    def output_types(self, input_types):
        return {"out": _kind_of(input_types.get("in", Any), Tensor)}

    def _one(self, item: DeviceTensor) -> Tensor:
        from tinydl.backends import get_backend

        return Tensor(get_backend(item.backend).to_host(item.data))

    def process(self, ctx, inputs):
        return {"out": _map(inputs["in"].payload, self._one)}

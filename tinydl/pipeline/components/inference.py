"""Inference: run a tinydl model (a Session on any backend) on tensors, frames, or batches.

Inputs:  in (Tensor, DeviceTensor or Frame, or a Batch of one of them: the items are stacked
         along the model's batch axis and run at once)
Outputs: out (Tensor, DeviceTensor or Frame per `output_as`; a Batch in gives a Batch out, item
         by item with the items' ids; a DeviceTensor names the backend whose partition makes the
         output, Session.output_backends: with backends "cuda,cpu", "cpu" for a cpu node's)
Options: model (a .onnx/.tdl path, "tinydl:NAME" for a model shipped in tinydl/models,
         "ppocr:det|cls|rec" for PP-OCRv4 as rapidocr-onnxruntime ships it, an ir.Graph, or a
         Session already compiled — used as it is, by every instance, and then backends,
         precision and strict are not used), backends (priority list or a comma-separated
         string, "cpu" default: the fastest CPU path, "numpy" the reference; e.g. "cuda,cpu"),
         precision ("fp32" | "fp16"), strict (bool: no fallback), input / output (names;
         default the model's only input and its first output), channels (list of frame
         channels fed to the model, default all), output_as ("tensor" | "device" | "frame"),
         keep_channels (bool, with output_as "frame", channels and normalize: the channels not
         fed to the model are resized to the output's size and kept, so a
         luma-only super-resolution model gives a color frame), layout ("NCHW" | "NHWC": how
         a frame is laid out for the model), normalize (bool, True: uint8 pixels fed as x/255
         and answered back from 0..1; False: the pixels as they are, for a model that takes and
         gives uint8 frames), mean / std (per channel, with normalize: (x/255 - mean) / std),
         resize (a frame's size for the model, tinydl.images.resize_policy: "640x480",
         "letterbox 640x640", "multiple 32", "multiple 32 min 736" as PP-OCR's detector;
         bilinear; default: as the frame comes), color ("rgb" | "bgr": the channel order the
         model takes, frames converted from their own format; default: as they come)

Frames are fed through tinydl.images.image_to_tensor: by default NCHW float32, uint8 pixels
divided by 255. A frame out is the reverse (tinydl.images.tensor_to_image): HWC, clipped to
[0, 1], and back to uint8 if the input frame was. An item whose rank is one less than the model
input's gets a batch axis of 1, removed again on the way out. A DeviceTensor that carries a
frame (ToDevice of a Frame) keeps it through output_as="device", so ToHost(frames=True) can
give the frame back. An empty Batch (a frame with nothing to run on) gives an empty Batch and
runs nothing. Added with `in_flight=2` (or more), a call whose outputs go to the host (output_as
"tensor" or "frame") only enqueues the run and the copy of its output (`Backend.to_host_later`:
asynchronous into page-locked memory on cuda, at once on other backends) and answers with a
`Later`, so the next batch is enqueued while the GPU runs this one.

Example (ESPCN x2 on the Y channel of YCbCr frames, four streams batched together):
    app.add("sr", Inference(model="tinydl:espcn_x2", channels=[0], output_as="frame",
                            keep_channels=True))
Example (PP-OCR's text detector: BGR, short side 736, sides multiples of 32, mean/std 0.5):
    app.add("det", Inference(model="ch_PP-OCRv4_det_infer.onnx", resize="multiple 32 min 736",
                             color="bgr", mean=0.5, std=0.5))
Example (a frame graph that takes and gives uint8 (N, H, W, 3), as tinydl superres runs it):
    app.add("sr", Inference(model=session, layout="NHWC", normalize=False, output_as="frame"))
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import InvalidModelError
from tinydl.images import LAYOUTS, image_to_tensor, resize_image, resize_policy, tensor_to_image
from tinydl.pipeline.component import Component, Later
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, DeviceTensor, Frame, Tensor, union

from ._image import convert, resize

_ITEM = (Tensor, DeviceTensor, Frame)
_OUT = {"tensor": Tensor, "device": DeviceTensor, "frame": Frame}


# PP-OCR's models as the rapidocr-onnxruntime package ships them ("ppocr:det" etc.).
PPOCR_MODELS = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
}


def resolve_model(model: Any) -> Any:
    """A path, "tinydl:NAME" (tinydl/models/NAME.tdl), "ppocr:det|cls|rec" (PP-OCRv4 from the
    rapidocr-onnxruntime package), or a Graph as is."""
    if not isinstance(model, str | Path):
        return model
    text = str(model)
    if text.startswith("ppocr:"):
        name = PPOCR_MODELS.get(text[len("ppocr:") :])
        if name is None:
            raise PipelineError(f"{text}: expected one of {[f'ppocr:{k}' for k in PPOCR_MODELS]}")
        try:
            import rapidocr_onnxruntime
        except ImportError:
            raise PipelineError(
                f"{text}: the PP-OCR models come with rapidocr-onnxruntime: "
                "pip install 'tinydl[ocr]'"
            ) from None
        return Path(rapidocr_onnxruntime.__file__).parent / "models" / name
    if not text.startswith("tinydl:"):
        return model
    from tinydl.runtime.loader import shipped_path

    try:
        return shipped_path(text)
    except InvalidModelError as exc:
        raise PipelineError(str(exc)) from None


def open_session(
    model: Any, backends: Any, precision: str, strict: bool, gpu: str | None = None
) -> Any:
    """A Session for a model option: a compiled Session as it is, else the model compiled; on
    `gpu` ("cuda:1", the GPU a deployment gave this instance) when its backend is one of
    `backends`."""
    import tinydl
    from tinydl.pipeline.profile import backend_names

    if isinstance(model, tinydl.Session):
        return model
    device = gpu if gpu and gpu.split(":")[0] in backend_names(backends) else None
    return tinydl.compile(
        resolve_model(model), backends=backends, precision=precision, strict=strict, device=device
    )


class Inference(Component):
    """A model run by a tinydl Session, on one item or a batch at a time."""

    uses_ctx_gpu = True

    inputs = {"in": union(*_ITEM, *(Batch[t] for t in _ITEM))}
    outputs = {"out": union(*_OUT.values(), *(Batch[t] for t in _OUT.values()))}

    def __init__(
        self,
        model: Any,
        backends: str | list[str] = "cpu",
        precision: str = "fp32",
        strict: bool = False,
        input: str | None = None,
        output: str | None = None,
        channels: list[int] | None = None,
        output_as: str = "tensor",
        keep_channels: bool = False,
        layout: str = "NCHW",
        normalize: bool = True,
        mean: float | list[float] | None = None,
        std: float | list[float] | None = None,
        resize: str | None = None,
        color: str | None = None,
    ):
        if output_as not in _OUT:
            raise PipelineError(f"Inference: output_as must be one of {list(_OUT)}")
        if keep_channels and (output_as != "frame" or channels is None or not normalize):
            raise PipelineError(
                "Inference: keep_channels needs output_as='frame', channels and normalize"
            )
        if layout not in LAYOUTS:
            raise PipelineError(f"Inference: layout must be one of {list(LAYOUTS)}")
        if not normalize and (mean is not None or std is not None):
            raise PipelineError("Inference: mean and std go with normalize=True")
        self.model, self.backends, self.precision, self.strict = model, backends, precision, strict
        self.input, self.output, self.channels = input, output, channels
        self.output_as, self.keep_channels = output_as, keep_channels
        if color not in (None, "rgb", "bgr"):
            raise PipelineError(f"Inference: color must be 'rgb' or 'bgr', got {color!r}")
        self.layout, self.normalize, self.mean, self.std = layout, normalize, mean, std
        self.resize = None if resize is None else resize_policy(resize)
        self.color = color
        if output_as == "frame":
            self.inputs = {"in": union(Frame, Batch[Frame])}

    def output_types(self, input_types: dict[str, Any]) -> dict[str, Any]:
        got, out = input_types["in"], _OUT[self.output_as]
        batched = isinstance(got, type) and issubclass(got, Batch)
        single = isinstance(got, type) and not batched and got is not Any
        return {"out": Batch[out] if batched else out if single else union(out, Batch[out])}

    def open(self, ctx):
        self.session = open_session(
            self.model, self.backends, self.precision, self.strict, getattr(ctx, "gpu", None)
        )
        names = [v.name for v in self.session.inputs]
        if self.input is None and len(names) != 1:
            raise PipelineError(f"Inference: the model has inputs {names}; choose one with input=")
        self.input = self.input or names[0]
        if self.input not in names:
            raise PipelineError(f"Inference: the model has no input {self.input!r}; it has {names}")
        spec = next(v for v in self.session.inputs if v.name == self.input)
        self.rank = None if spec.shape is None else len(spec.shape)
        self.output = self.output or self.session.outputs[0].name
        # The backend whose partition makes the output: a device output is its tensor.
        self.owner = self.session.output_backends.get(self.output)

    def _feed(self, item: Any) -> tuple[Any, bool]:
        """The array for one item, and whether a batch axis was added."""
        if isinstance(item, DeviceTensor):
            return item.data, False
        if isinstance(item, Frame):
            image = item.image
            if self.color is not None:
                image = convert(image, item.format, self.color)
            if self.resize is not None:
                image = resize_image(image, self.resize.fit(*image.shape[:2]))
            image = image if image.ndim == 3 else image[..., None]
            if self.channels is not None:
                image = image[..., self.channels]
            if self.normalize:
                x = image_to_tensor(image, self.layout, self.mean, self.std)
            else:
                x = image if self.layout == "NHWC" else image.transpose(2, 0, 1)
        elif isinstance(item, Tensor):
            x = np.asarray(item.data)
        else:
            raise PipelineError(f"Inference: cannot feed a {type(item).__name__}")
        if self.rank is not None and x.ndim == self.rank - 1:
            return x[None], True
        return x, False

    def _answer(self, out: Any, source: Any) -> Any:
        if self.output_as == "device":
            # No partition makes an output that is an input passed through (as it was fed).
            fed = source.backend if isinstance(source, DeviceTensor) else "cpu"
            if isinstance(source, DeviceTensor):  # keeps the frame it carries, if any
                return DeviceTensor(out, self.owner or fed, source.frame, source.batch_axis)
            return DeviceTensor(out, self.owner or fed)
        if self.output_as == "tensor":
            return Tensor(out)
        if not isinstance(source, Frame):
            raise PipelineError("Inference: output_as='frame' needs frames in")
        if not self.normalize:
            y = out if self.layout == "NHWC" else np.moveaxis(out, 0, -1)
            if source.image.ndim == 2 and y.shape[-1] == 1:
                y = y[..., 0]
            return replace(source, image=y, format=self.color or source.format)
        y = tensor_to_image(out, self.layout, self.mean, self.std, dtype=np.float32)
        if self.keep_channels:
            h, w = y.shape[:2]
            image = source.image if source.image.ndim == 3 else source.image[..., None]
            full = resize(image_to_tensor(image, "NHWC"), w, h, "linear")
            full[..., self.channels] = y
            y = full
        if source.image.dtype == np.uint8:
            y = tensor_to_image(y, "NHWC")
        if source.image.ndim == 2 and y.shape[-1] == 1:
            y = y[..., 0]
        return replace(source, image=y, format=self.color or source.format)

    def process(self, ctx, inputs):
        payload = inputs["in"].payload
        items = payload.payloads() if isinstance(payload, Batch) else [payload]
        if not items:
            return {"out": Batch([])}
        fed = [self._feed(item) for item in items]
        if len(fed) == 1 and not isinstance(fed[0][0], np.ndarray):
            x = fed[0][0]  # a device tensor, as it came
        else:
            # Host arrays are copied into one batch where the model runs (on a GPU: each one
            # straight into its place, asynchronously from page-locked frames).
            x = self.session.stack_input(self.input, [f[0] for f in fed])
        if self.output_as != "device" and ctx.in_flight > 1:
            # The run and the copy of its output are only enqueued; the node's completion
            # thread waits for them while the next inputs are enqueued (add(..., in_flight=n)).
            y = self.session.run({self.input: x}, outputs="device")[self.output]
            y, wait = self._backend_of_output().to_host_later(y)

            def finish():
                wait()
                return self._answers(payload, items, fed, y)

            return Later(finish)
        kind = "device" if self.output_as == "device" else [self.output]
        y = self.session.run({self.input: x}, outputs=kind)[self.output]
        return self._answers(payload, items, fed, y)

    def _backend_of_output(self):
        from tinydl.backends import get_backend

        name = self.session.output_backends.get(self.output)
        return get_backend(name if name is not None else "cpu")

    def _answers(self, payload, items, fed, y) -> dict:
        # One item run as it came gets the whole output (no slice, which a device tensor such
        # as webgpu's may not have).
        whole = len(items) == 1 and not fed[0][1]
        answers, start = [], 0
        for item, (xi, added) in zip(items, fed, strict=True):
            n = 1 if added else xi.shape[0]
            yi = y if whole else y[start] if added else y[start : start + n]
            start += n
            answers.append(self._answer(yi, item))
        if isinstance(payload, Batch):
            return {
                "out": Batch([p.derive(a) for p, a in zip(payload.items, answers, strict=True)])
            }
        return {"out": answers[0]}

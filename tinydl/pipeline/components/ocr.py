"""OCR: text lines cut out of frames by their boxes, turned upright and read (PP-OCR).

CropBoxes
  Inputs:  image (Frame, or a Batch of them), boxes (Quads from TextBoxes, or a Batch of them)
           — joined by (flow_id, request_id)
  Outputs: out (TextCrops: each box cut out and straightened at its own size; a Batch in
           gives a Batch out; no boxes gives no crops)
  Options: height (None: crops at their own size; N: resized to N pixels high, the width from
           the aspect ratio — less to carry, but the models resize them again)

TextDirection
  Inputs:  in (TextCrops, or a Batch of them: the crops of every item are run together)
  Outputs: out (the same, crops classified upside down turned by 180 degrees)
  Options: model ("ppocr:cls"), backends ("cpu"), precision, strict, batch_size (6 crops per
           model call), thresh (0.9: turned only above it), height (48) and width (192): the
           model's input size, color ("bgr": the channel order the model takes)

TextRecognize
  Inputs:  in (TextCrops, or a Batch of them: the crops of every item are run together)
  Outputs: out (Quads: one per line read, its box, its text as label, the mean probability of
           its characters as score; a Batch in gives a Batch out, item for item; a frame with
           no text gives zero quads)
  Options: model ("ppocr:rec"), backends ("cpu"), precision, strict, batch_size (6 crops per
           model call), min_score (0.5: lines read with less are dropped), height (48: the
           model's input height), width (320: the narrowest input), characters (the
           dictionary: a file with one character a line; default: the model's "character"
           metadata, as PP-OCR's ONNX models carry it), color ("bgr")

LinesJson
  Inputs:  in (Quads with labels: the lines of one frame, as TextRecognize gives them)
  Outputs: none (a sink)
  Options: path (a JSON file written at close, None: none), names (one name per request id,
           e.g. the image files ImageSource reads; default: the frame number)
  Keeps `results` in (flow_id, request_id) order: {"image": name, "flow": flow_id, "frame":
  request_id, "lines": [{"box": [[x, y] x 4], "text": str, "score": float}]}. Runs on the
  thread executor only (its results live in the app's process).

These are RapidOCR 1.4.4's steps with its defaults. A box is cut out with a perspective warp
(bicubic, edges replicated) at its own size, turned by 90 degrees when it is at least 1.5
times higher than wide: `crop_quad` does it, the one function to swap for a device warp. Each
model resizes a crop once (bilinear) to its input height: the classifier squeezes it to at most
`width` and zero-pads it; the recognizer sorts the crops by aspect ratio, runs `batch_size` at
a time, each batch padded to its widest crop (which is squeezed by up to a pixel, as PP-OCR
does), and decodes greedily (CTC: repeats merged, blanks dropped). Cropping to the model height
first and resizing again changes the recognized text of about one line in ten (spaces, mostly),
hence crops at their own size by default.
Crops travel with their frame, so batching crops across frames is `Batch` before TextDirection
and `Unbatch` after TextRecognize: every frame gets its own lines back, in order. Needs OpenCV
(the `ocr` extra).

Example (after TextBoxes; four frames' crops recognized together):
    app.add("crops", CropBoxes())
    app.add("frames", Batch(max_size=4, max_wait=0))
    app.add("upright", TextDirection())
    app.add("read", TextRecognize())
    app.add("lines", Unbatch())
    app.connect("src", "crops.image")
    app.connect("boxes", "crops.boxes")
    app.connect("crops", "frames")
    app.connect("frames", "upright")
    app.connect("upright", "read")
    app.connect("read", "lines")
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Batch, Frame, Quads, union

from ._image import convert
from .inference import open_session, resolve_model
from .text_boxes import ocr_modules


@dataclass
class TextCrops:
    """The text lines of one frame, each box of `quads` to be read straightened: either cut out
    already (`crops[i]`, (h_i, w_i[, C]) uint8 in `format`), or described by the frame's pixels
    (`image`) and the boxes, cut on demand: by OpenCV on the host (`pixels()`, exactly as
    PP-OCR), or by tinydl.Warp inside a model's session on the device (`matrices()`). `turned`
    marks the crops read upside down (turned by 180 degrees)."""

    crops: list[np.ndarray] | None
    quads: Quads
    format: str = "rgb"
    image: np.ndarray | None = None
    turned: np.ndarray | None = None
    # The frame in a model's channel order, and uploaded, per (backend, color): shared by the
    # models that read the same crops, so a frame goes to the device once.
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if self.crops is None and self.image is None:
            raise PipelineError("TextCrops: give the crops or the image they are cut from")
        if self.turned is None:
            self.turned = np.zeros(len(self), bool)

    def __len__(self) -> int:
        return len(self.crops) if self.crops is not None else len(np.asarray(self.quads.points))

    @property
    def points(self) -> np.ndarray:
        return np.asarray(self.quads.points, np.float32).reshape(-1, 4, 2)

    @property
    def ratios(self) -> np.ndarray:
        """Each crop's width / height (after a tall box is turned to read across)."""
        if self.crops is not None:
            return np.array([c.shape[1] / c.shape[0] for c in self.crops], np.float64)
        sizes = [upright_size(q) for q in self.points]
        return np.array([w / h for w, h in sizes], np.float64)

    def pixels(self) -> list[np.ndarray]:
        """The crops as uint8 pixels (cut on the host with OpenCV when not cut yet)."""
        if self.crops is None:
            self.crops = [crop_quad(self.image, q) for q in self.points]
            self.crops = [
                np.ascontiguousarray(c[::-1, ::-1]) if t else c
                for c, t in zip(self.crops, self.turned, strict=True)
            ]
        return self.crops

    def turn(self, which: list[int]) -> TextCrops:
        """The same crops with `which` turned by 180 degrees."""
        turned = self.turned.copy()
        turned[which] ^= True
        crops = None
        if self.crops is not None:
            crops = list(self.crops)
            for i in which:
                crops[i] = np.ascontiguousarray(crops[i][::-1, ::-1])
        return TextCrops(crops, self.quads, self.format, self.image, turned, self.cache)

    def matrices(
        self, height: int, width: int, max_width: int, which: list[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """tinydl.Warp's matrices (K, 3, 3) that cut crops `which` out of `image` straight into
        a model input `height` high and `width` wide, and the mask (K, 1, width, 1) of the
        columns each crop fills: its width at that height (rounded up, at most `max_width`)."""
        m = np.zeros((len(which), 3, 3), np.float32)
        mask = np.zeros((len(which), 1, width, 1), np.float32)
        points = self.points
        for i, k in enumerate(which):
            m[i], filled = crop_matrix(points[k], height, max_width, bool(self.turned[k]))
            mask[i, 0, :filled] = 1
        return m, mask


def upright_size(quad: np.ndarray) -> tuple[int, int]:
    """(width, height) of a box's crop as PP-OCR cuts it, after a tall one is turned."""
    _, w, h = quad_transform(quad)
    return (h, w) if h / w >= 1.5 else (w, h)


def quad_transform(quad: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The perspective matrix from a box's crop (w x h pixels, as PP-OCR's
    get_rotate_crop_image sizes it) to image pixels, and w, h."""
    p = np.asarray(quad, np.float64).reshape(4, 2)
    w = max(1, int(max(np.linalg.norm(p[0] - p[1]), np.linalg.norm(p[2] - p[3]))))
    h = max(1, int(max(np.linalg.norm(p[0] - p[3]), np.linalg.norm(p[1] - p[2]))))
    target = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    return perspective(target, p), w, h


def perspective(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 3x3 projective map taking the 4 points src to dst (OpenCV's getPerspectiveTransform,
    solved in float64)."""
    a = np.zeros((8, 8))
    b = np.zeros(8)
    for i, ((x, y), (u, v)) in enumerate(zip(src, dst, strict=True)):
        a[i] = [x, y, 1, 0, 0, 0, -x * u, -y * u]
        a[i + 4] = [0, 0, 0, x, y, 1, -x * v, -y * v]
        b[i], b[i + 4] = u, v
    return np.append(np.linalg.solve(a, b), 1.0).reshape(3, 3)


def crop_matrix(quad: np.ndarray, height: int, max_width: int, turned: bool = False):
    """The matrix from a model input's pixels to image pixels that does PP-OCR's crop (the box
    straightened, a tall one turned to read across, `turned`: by 180 degrees more) and its
    resize to `height` (bilinear, half-pixel centres as cv2.resize) in one resampling, and the
    width the crop fills (ceil(height x aspect), at most max_width)."""
    m, w, h = quad_transform(quad)
    if h / w >= 1.5:  # np.rot90: crop pixel (u, v) of the turned crop is (w - 1 - v, u)
        m = m @ np.array([[0, -1, w - 1], [1, 0, 0], [0, 0, 1]], np.float64)
        w, h = h, w
    if turned:
        m = m @ np.array([[-1, 0, w - 1], [0, -1, h - 1], [0, 0, 1]], np.float64)
    filled = min(math.ceil(height * w / h), max_width)
    sx, sy = w / filled, h / height
    scale = np.array([[sx, 0, 0.5 * sx - 0.5], [0, sy, 0.5 * sy - 0.5], [0, 0, 1]], np.float64)
    return (m @ scale).astype(np.float32), filled


def fit_height(cv2, crop: np.ndarray, height: int, max_width: int | None = None) -> np.ndarray:
    """A crop resized (bilinear) to `height`, its width from its aspect ratio (rounded up),
    squeezed to at most `max_width`."""
    width = math.ceil(height * crop.shape[1] / crop.shape[0])
    width = width if max_width is None else min(width, max_width)
    return crop if crop.shape[:2] == (height, width) else cv2.resize(crop, (width, height))


def crop_quad(image: np.ndarray, quad: np.ndarray, height: int | None = None) -> np.ndarray:
    """The quadrilateral `quad` (4, 2) of an image straightened (as PP-OCR's
    get_rotate_crop_image), at its own size or resized to `height`."""
    cv2, _ = ocr_modules()
    p = np.asarray(quad, np.float32)
    w = max(1, int(max(np.linalg.norm(p[0] - p[1]), np.linalg.norm(p[2] - p[3]))))
    h = max(1, int(max(np.linalg.norm(p[0] - p[3]), np.linalg.norm(p[1] - p[2]))))
    target = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32)
    warp = cv2.getPerspectiveTransform(p, target)
    cut = cv2.warpPerspective(
        image, warp, (w, h), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC
    )
    if cut.shape[0] / cut.shape[1] >= 1.5:  # a vertical line is read turned to horizontal
        cut = np.rot90(cut)
    return cut if height is None else fit_height(cv2, cut, height)


def _pairs(a: Any, b: Any, fn, what: str) -> Any:
    """fn(a, b) for single payloads, or item by item for two batches of the same size."""
    if isinstance(a, Batch) != isinstance(b, Batch) or (isinstance(a, Batch) and len(a) != len(b)):
        raise PipelineError(f"{what}: both inputs must be single or same-size batches")
    if isinstance(a, Batch):
        return Batch(
            [
                p.derive(fn(x, y))
                for p, x, y in zip(a.items, a.payloads(), b.payloads(), strict=True)
            ]
        )
    return fn(a, b)


class CropBoxes(Component):
    """Each box of a frame to be cut out and straightened: by default the frame and its boxes,
    cut where the models run (TextDirection/TextRecognize's `crops`); with `height`, cut here."""

    inputs = {"image": union(Frame, Batch[Frame]), "boxes": union(Quads, Batch[Quads])}
    outputs = {"out": union(TextCrops, Batch[TextCrops])}

    def __init__(self, height: int | None = None):
        if height is not None and height < 1:
            raise PipelineError(f"CropBoxes: height must be positive, got {height}")
        self.height = height

    def output_types(self, input_types):
        batched = isinstance(input_types["boxes"], type) and issubclass(input_types["boxes"], Batch)
        return {"out": Batch[TextCrops] if batched else TextCrops}

    def open(self, ctx):
        ocr_modules()

    def crops(self, frame: Frame, quads: Quads) -> TextCrops:
        if not isinstance(frame, Frame) or not isinstance(quads, Quads):
            raise PipelineError(
                f"CropBoxes: expected a Frame and Quads, got {type(frame).__name__} and "
                f"{type(quads).__name__}"
            )
        if self.height is None:
            return TextCrops(None, quads, frame.format, image=frame.image)
        cuts = [crop_quad(frame.image, q, self.height) for q in np.asarray(quads.points)]
        return TextCrops(cuts, quads, frame.format)

    def process(self, ctx, inputs):
        image, boxes = inputs["image"].payload, inputs["boxes"].payload
        return {"out": _pairs(image, boxes, self.crops, "CropBoxes")}


CROPS = ("auto", "host", "device")
CROP_INPUTS = ("image", "matrix", "mask")


def crop_graph(model: Any, height: int) -> Any:
    """A recognizer or classifier behind its crops: inputs image (1, H, W, 3) uint8 in the
    model's channel order, matrix (K, 3, 3) and mask (K, 1, width, 1); tinydl.Warp cuts the
    crops straight to the model's input, `height` x width (the width read from the mask's
    shape when the run is planned), normalized as PP-OCR does ((x/255 - 0.5) / 0.5), the
    columns past each crop zero."""
    import tinydl
    from tinydl import snapshot
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    g = model if isinstance(model, Graph) else tinydl.load(model)
    origin = snapshot.model_key(g)
    (x,) = g.inputs
    nodes = [
        Node("Cast", ["image"], ["crop/pixels"], {"to": 1}, name="crop/cast"),
        Node("Shape", ["mask"], ["crop/mask_shape"], name="crop/mask_shape"),
        Node("Gather", ["crop/mask_shape", "crop/two"], ["crop/width"], name="crop/width"),
        Node("Concat", ["crop/height", "crop/width"], ["crop/size"], {"axis": 0}, name="crop/size"),
        Node(
            "tinydl.Warp",
            ["crop/pixels", "matrix", "crop/size"],
            ["crop/warped"],
            {"border": "replicate", "layout": "NHWC"},
            name="crop/warp",
        ),
        Node("Mul", ["crop/warped", "crop/scale"], ["crop/scaled"], name="crop/scale"),
        Node("Add", ["crop/scaled", "crop/offset"], ["crop/normalized"], name="crop/offset"),
        Node("Mul", ["crop/normalized", "mask"], ["crop/masked"], name="crop/mask"),
        Node("Transpose", ["crop/masked"], [x.name], {"perm": [0, 3, 1, 2]}, name="crop/nchw"),
    ]
    consts = {
        "crop/two": np.array([2], np.int64),
        "crop/height": np.array([height], np.int64),
        "crop/scale": np.array(1 / 127.5, np.float32),
        "crop/offset": np.array(-1.0, np.float32),
    }
    graph = validate(
        Graph(
            [
                Value("image", "uint8", (1, "H", "W", 3)),
                Value("matrix", "float32", ("K", 3, 3)),
                Value("mask", "float32", ("K", 1, "M", 1)),
            ],
            [Value(v.name, v.dtype, None) for v in g.outputs],
            nodes + g.nodes,
            {**g.initializers, **consts},
            name=f"{g.name}+crop",
            metadata=dict(g.metadata),
        )
    )
    snapshot.derive_origin(graph, g, origin)  # (its compiles kept by the session cache)
    return graph


class _CropModel(Component):
    """A model run over the crops of one or several frames, `batch_size` crops at a time."""

    uses_ctx_gpu = True
    inputs = {"in": union(TextCrops, Batch[TextCrops])}

    def __init__(
        self,
        model: Any,
        backends: str | list[str] = "cpu",
        precision: str = "fp32",
        strict: bool = False,
        batch_size: int = 6,
        height: int = 48,
        width: int = 0,
        color: str = "bgr",
        crops: str = "auto",
    ):
        if batch_size < 1:
            raise PipelineError(f"{type(self).__name__}: batch_size must be >= 1")
        if color not in ("rgb", "bgr"):
            raise PipelineError(f"{type(self).__name__}: color is 'rgb' or 'bgr', got {color!r}")
        if crops not in CROPS:
            raise PipelineError(f"{type(self).__name__}: crops is one of {CROPS}, got {crops!r}")
        self.model, self.backends, self.precision, self.strict = model, backends, precision, strict
        self.batch_size, self.height, self.width, self.color = batch_size, height, width, color
        self.crops = crops

    def output_types(self, input_types):
        batched = isinstance(input_types["in"], type) and issubclass(input_types["in"], Batch)
        out = self.outputs["out"][0]
        return {"out": Batch[out] if batched else out}

    def on_device(self) -> bool:
        """Whether crops are cut inside the model's session: `crops="device"`, or "auto" with a
        GPU backend first. A compiled Session given as the model says it itself: one made from
        crop_graph (inputs image, matrix, mask) cuts, any other does not."""
        import tinydl
        from tinydl.pipeline.profile import GPU_BACKENDS, backend_names

        if isinstance(self.model, tinydl.Session):
            cuts = [v.name for v in self.model.inputs] == list(CROP_INPUTS)
            if self.crops != "auto" and cuts != (self.crops == "device"):
                raise PipelineError(
                    f"{type(self).__name__}: crops={self.crops!r}, but the Session given "
                    + ("cuts crops itself" if cuts else "takes crops cut already")
                    + " (make one that cuts them from ocr.crop_graph)"
                )
            return cuts
        if self.crops != "auto":
            return self.crops == "device"
        names = backend_names(self.backends)
        return bool(names and names[0] in GPU_BACKENDS)

    def open(self, ctx):
        from tinydl import Session

        self.cv2, _ = ocr_modules()
        self.device = self.on_device()
        model = self.model
        if self.device and not isinstance(model, Session):
            model = crop_graph(resolve_model(self.model), self.height)
        self.session = open_session(
            model, self.backends, self.precision, self.strict, getattr(ctx, "gpu", None)
        )
        self.input = self.session.inputs[0].name
        self.output = self.session.outputs[0].name
        # The memory the frame is fed to: where the crop's first step runs ("host" on cpu).
        placement = self.session.placement
        backend = placement.nodes.get("crop/cast") if self.device else None
        self.frame_memory = placement.memory.get(backend, "host")

    def run(self, chunk: list[tuple[TextCrops, int]], width: int, max_width: int) -> np.ndarray:
        """The model's output for crops (item, index) resized to its height, filling up to
        `max_width` of a zero-padded (N, 3, height, width) batch, normalized as PP-OCR does:
        (x/255 - 0.5) / 0.5. Cut on the host, or by the session itself from each frame."""
        if not self.device:
            return self.run_host(chunk, width, max_width)
        if any(item.image is None for item, _ in chunk):
            raise PipelineError(
                f"{type(self).__name__}: crops given as pixels reach a model that cuts them out "
                "of their frame itself (crops='auto' on a GPU backend); use crops='host'"
            )
        groups: dict[int, tuple[TextCrops, list[int], list[int]]] = {}
        for pos, (item, k) in enumerate(chunk):
            group = groups.setdefault(id(item), (item, [], []))
            group[1].append(pos)
            group[2].append(k)
        out = None
        # A model call per frame: its crops cut from its pixels on the device, as many as
        # batch_size (rows past the crops are masked out), so one shape serves every call.
        for item, positions, which in groups.values():
            m, mask = item.matrices(self.height, width, max_width, which)
            pad = max(self.batch_size - len(which), 0)
            m = np.concatenate([m, np.tile(np.eye(3, dtype=np.float32), (pad, 1, 1))])
            mask = np.concatenate([mask, np.zeros((pad, *mask.shape[1:]), np.float32)])
            feeds = {"image": self.frame(item), "matrix": m, "mask": mask}
            y = self.session.run(feeds, outputs=[self.output])[self.output][: len(which)]
            if out is None:
                out = np.empty((len(chunk), *y.shape[1:]), y.dtype)
            out[positions] = y
        return out

    def chunks(self, order: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
        """The crops in model calls of up to batch_size; with crops cut on the device, a call
        takes the crops of one frame only (its pixels are the call's image)."""
        out: list[list[tuple[int, int]]] = []
        for k, i in order:
            if not out or len(out[-1]) == self.batch_size or (self.device and out[-1][0][0] != k):
                out.append([])
            out[-1].append((k, i))
        return out

    def frame(self, item: TextCrops) -> Any:
        """The item's frame in the model's channel order (uint8, (1, H, W, 3)), uploaded once
        per backend and shared with the other models that read the same crops."""
        key = (self.frame_memory, self.color)
        found = item.cache.get(key)
        if found is None:
            image = item.image
            if image.dtype != np.uint8:
                image = np.clip(np.rint(np.asarray(image, np.float32) * 255), 0, 255)
                image = image.astype(np.uint8)
            pixels = np.ascontiguousarray(convert(image, item.format, self.color))[None]
            found = item.cache[key] = self.session.stack_input("image", [pixels])
        return found

    def run_host(self, chunk, width: int, max_width: int) -> np.ndarray:
        x = np.zeros((len(chunk), 3, self.height, width), np.float32)
        for i, (item, k) in enumerate(chunk):
            crop = fit_height(self.cv2, item.pixels()[k], self.height, max_width)
            pixels = convert(crop, item.format, self.color).astype(np.float32)
            x[i, :, :, : crop.shape[1]] = (pixels.transpose(2, 0, 1) / 255 - 0.5) / 0.5
        return self.session.run({self.input: x}, outputs=[self.output])[self.output]

    def process(self, ctx, inputs):
        payload = inputs["in"].payload
        items = payload.payloads() if isinstance(payload, Batch) else [payload]
        for item in items:
            if not isinstance(item, TextCrops):
                raise PipelineError(f"{type(self).__name__}: expected TextCrops, got {item!r}")
        # Every crop of every item, sorted by aspect ratio so a model call pads little.
        flat = [(k, i) for k, item in enumerate(items) for i in range(len(item))]
        ratios = np.concatenate([item.ratios for item in items] + [np.zeros(0)])
        order = [flat[j] for j in np.argsort(ratios, kind="stable")]
        if self.device:  # each frame's crops together, by ratio (PP-OCR's order per image)
            order.sort(key=lambda ki: ki[0])
        answers = self.answer(items, order)
        if isinstance(payload, Batch):
            return {
                "out": Batch([p.derive(a) for p, a in zip(payload.items, answers, strict=True)])
            }
        return {"out": answers[0]}


class TextDirection(_CropModel):
    """Crops read upside down (PP-OCR's 0/180 classifier) turned the right way up."""

    outputs = {"out": union(TextCrops, Batch[TextCrops])}

    def __init__(self, model: Any = "ppocr:cls", thresh: float = 0.9, width: int = 192, **kw):
        super().__init__(model, width=width, **kw)
        self.thresh = thresh

    def answer(self, items: list[TextCrops], order: list[tuple[int, int]]) -> list[TextCrops]:
        upside_down: list[list[int]] = [[] for _ in items]
        for chunk in self.chunks(order):
            probs = self.run([(items[k], i) for k, i in chunk], self.width, self.width)
            for (k, i), p in zip(chunk, probs, strict=True):
                if np.argmax(p) == 1 and p[1] > self.thresh:
                    upside_down[k].append(i)
        return [
            item.turn(which) if which else item
            for item, which in zip(items, upside_down, strict=True)
        ]


def read_characters(source: Any) -> list[str]:
    """A CTC dictionary: the lines of a file, or a model's "character" metadata text."""
    text = Path(source).read_text(encoding="utf-8") if isinstance(source, Path) else source
    return text.splitlines()


def ctc_greedy(probs: np.ndarray, characters: list[str]) -> list[tuple[str, float]]:
    """Greedy CTC decoding of (N, T, C) probabilities; class 0 is the blank, class i > 0 is
    characters[i - 1], the class after the last character a space (PP-OCR's convention).
    Each text comes with the mean probability of its characters (0 for an empty text)."""
    table = np.array(["", *characters, " "], dtype=object)
    if probs.shape[-1] != len(table):
        raise PipelineError(
            f"TextRecognize: the model scores {probs.shape[-1]} classes, the dictionary has "
            f"{len(table)} (blank + {len(characters)} characters + space)"
        )
    best = probs.argmax(axis=-1)
    prob = probs.max(axis=-1).astype(np.float64)
    keep = best != 0
    keep[:, 1:] &= best[:, 1:] != best[:, :-1]
    count = keep.sum(axis=1)
    mean = np.where(count > 0, (prob * keep).sum(axis=1) / np.maximum(count, 1), 0.0)
    return [("".join(table[b[k]]), float(m)) for b, k, m in zip(best, keep, mean, strict=True)]


class TextRecognize(_CropModel):
    """The text of each crop (PP-OCR's CTC recognizer), as the frame's lines."""

    outputs = {"out": union(Quads, Batch[Quads])}

    def __init__(
        self,
        model: Any = "ppocr:rec",
        min_score: float = 0.5,
        width: int = 320,
        characters: str | None = None,
        width_step: int | None = None,
        **kw,
    ):
        super().__init__(model, width=width, **kw)
        if width_step is not None and width_step < 1:
            raise PipelineError(f"TextRecognize: width_step must be >= 1, got {width_step}")
        self.min_score, self.characters, self.width_step = min_score, characters, width_step

    def open(self, ctx):
        super().open(ctx)
        if self.characters is not None:
            self.table = read_characters(Path(self.characters))
            return
        meta = self.session.graph.metadata.get("onnx_metadata", {})
        if "character" not in meta:
            raise PipelineError(
                "TextRecognize: the model carries no 'character' metadata; give characters="
            )
        self.table = read_characters(meta["character"])

    def answer(self, items: list[TextCrops], order: list[tuple[int, int]]) -> list[Quads]:
        read: dict[tuple[int, int], tuple[str, float]] = {}
        ratios = [item.ratios for item in items]
        for chunk in self.chunks(order):
            # PP-OCR's batch width: the widest crop's at the model's height, at least `width`;
            # on the device rounded up to width_step (zero columns), so few shapes are planned.
            widest = max(self.width / self.height, *(ratios[k][i] for k, i in chunk))
            filled = int(self.height * widest)
            step = self.width_step or (64 if self.device else 1)
            probs = self.run([(items[k], i) for k, i in chunk], -(-filled // step) * step, filled)
            read.update(zip(chunk, ctc_greedy(probs, self.table), strict=True))
        lines = []
        for k, item in enumerate(items):
            texts = [read[(k, i)] for i in range(len(item))]
            keep = [i for i, (_, score) in enumerate(texts) if score >= self.min_score]
            lines.append(
                Quads(
                    item.points[keep],
                    np.array([texts[i][1] for i in keep], np.float32),
                    [texts[i][0] for i in keep],
                )
            )
        return lines


def lines_json(quads: Quads) -> list[dict]:
    """A frame's lines as JSON-ready dicts: box corners (x, y) in pixels, text, score."""
    points = np.asarray(quads.points, np.float64).reshape(-1, 4, 2)
    scores = [] if quads.scores is None else np.asarray(quads.scores, np.float64)
    return [
        {"box": box.tolist(), "text": text, "score": round(float(score), 6)}
        for box, text, score in zip(points, quads.labels or [], scores, strict=True)
    ]


class LinesJson(Component):
    """Every frame's lines, in frame order, kept and (with `path`) written as JSON at close."""

    inputs = {"in": Quads}
    outputs: dict = {}
    executors = ("thread",)

    def __init__(self, path: str | None = None, names: list[str] | None = None):
        self.path, self.names = path, names
        self.lock = threading.Lock()
        self.found: dict[tuple[int, int], list[dict]] = {}

    def process(self, ctx, inputs):
        packet = inputs["in"]
        if not isinstance(packet.payload, Quads):
            raise PipelineError(f"LinesJson: expected Quads, got {type(packet.payload).__name__}")
        with self.lock:
            self.found[packet.key] = lines_json(packet.payload)
        return None

    @property
    def results(self) -> list[dict]:
        with self.lock:
            found = sorted(self.found.items())
        names = self.names or []
        return [
            {
                "image": names[r % len(names)] if names else r,
                "flow": f,
                "frame": r,
                "lines": lines,
            }
            for (f, r), lines in found
        ]

    def close(self, ctx):
        if self.path is not None:
            Path(self.path).write_text(json.dumps(self.results, ensure_ascii=False, indent=1))
        return None

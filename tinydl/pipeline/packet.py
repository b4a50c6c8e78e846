"""Packets and the payload types that travel in them, and the port-type rules the App checks.

A `Packet` is a payload plus the ids that say where it belongs: `app_id`, `flow_id` (which stream),
`request_id` (which frame of that stream) and `timestamp` (when its frame entered the app, in
nanoseconds of the monotonic clock, which all processes of one host share). `(flow_id,
request_id)` is the frame's key: the framework's accounting follows every frame by it.

Payloads are plain objects; the library's are `Frame`, `Tensor`, `DeviceTensor`, `Batch`,
`Rects`, `Quads`, `Landmarks` and `Text`, and any other class is a user type. Payloads are
treated as immutable once sent: a fan-out hands the same object to every consumer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")  # a port type bound per node from what is connected to it (Batch: T -> Batch[T])


class Packet:
    """A payload and its ids. `derive` makes an output packet that keeps the ids."""

    __slots__ = ("payload", "flow_id", "request_id", "timestamp", "app_id")

    def __init__(
        self,
        payload: Any,
        flow_id: int = 0,
        request_id: int = 0,
        timestamp: int | None = None,
        app_id: str = "",
    ):
        self.payload = payload
        self.flow_id = flow_id
        self.request_id = request_id
        self.timestamp = time.monotonic_ns() if timestamp is None else timestamp
        self.app_id = app_id

    @property
    def key(self) -> tuple[int, int]:
        return (self.flow_id, self.request_id)

    def keys(self) -> list[tuple[int, int]]:
        """The keys of the frames this packet carries: its own, or its items' for a Batch."""
        if isinstance(self.payload, Batch):
            return [k for item in self.payload.items for k in item.keys()]
        return [(self.flow_id, self.request_id)]

    def derive(self, payload: Any) -> Packet:
        return Packet(payload, self.flow_id, self.request_id, self.timestamp, self.app_id)

    def __reduce__(self):
        return (Packet, (self.payload, self.flow_id, self.request_id, self.timestamp, self.app_id))

    def __repr__(self) -> str:
        return (
            f"Packet({type(self.payload).__name__}, flow={self.flow_id}, request={self.request_id})"
        )


# -- payload types -------------------------------------------------------------------------------

COLOR_FORMATS = ("rgb", "bgr", "gray", "ycbcr")


@dataclass
class Frame:
    """An image: HxWxC (or HxW for gray) array, uint8 or float in [0, 1]; `pts` in seconds."""

    image: np.ndarray
    format: str = "rgb"
    pts: float | None = None

    @property
    def height(self) -> int:
        return int(self.image.shape[0])

    @property
    def width(self) -> int:
        return int(self.image.shape[1])


@dataclass
class Tensor:
    """A host array (NumPy)."""

    data: np.ndarray


@dataclass
class DeviceTensor:
    """A tensor owned by a backend (`data` is the backend's object; the cpu backend's is NumPy).

    `frame`: when the tensor holds a Frame's pixels (ToDevice of a Frame, and what Inference
    makes of it), that Frame with `image` None — its format and pts — so that ToHost gives a
    Frame back; `batch_axis`: a leading axis of 1 was added to the pixels on the way up (and is
    taken off again on the way down)."""

    data: Any
    backend: str = "cpu"
    frame: Frame | None = None
    batch_axis: bool = False


@dataclass
class Rects:
    """Boxes as an (N, 4) array of x0, y0, x1, y1 in pixels, with optional scores and labels."""

    boxes: np.ndarray
    scores: np.ndarray | None = None
    labels: list[str] | None = None


@dataclass
class Quads:
    """Quadrilaterals (rotated boxes, text lines) as an (N, 4, 2) array of (x, y) pixels, corners
    clockwise from the top-left, with optional scores and labels (a text line's text)."""

    points: np.ndarray
    scores: np.ndarray | None = None
    labels: list[str] | None = None

    def __len__(self) -> int:
        return len(self.points)


@dataclass
class Landmarks:
    """Points as an (N, 2|3) array in pixels; `edges` (M, 2) index pairs make it a mesh."""

    points: np.ndarray
    edges: np.ndarray | None = None


@dataclass
class Text:
    """Text, optionally placed at (x, y) pixels."""

    text: str
    position: tuple[int, int] | None = None


class Batch:
    """Several packets travelling as one; each keeps its own ids. `Batch[Frame]` is a port type."""

    item_type: Any = Any
    _params: dict[Any, type] = {}

    def __init__(self, items: list[Packet]):
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def payloads(self) -> list[Any]:
        return [p.payload for p in self.items]

    def map(self, fn) -> Batch:
        """A batch of fn(payload) for each item, each keeping its ids."""
        return Batch([p.derive(fn(p.payload)) for p in self.items])

    def __reduce__(self):
        return (Batch, (self.items,))

    def __repr__(self) -> str:
        return f"Batch({len(self.items)} items)"

    def __class_getitem__(cls, item_type):
        if item_type not in Batch._params:
            name = f"Batch[{type_name(item_type)}]"
            Batch._params[item_type] = type(name, (Batch,), {"item_type": item_type})
        return Batch._params[item_type]


# -- port types ----------------------------------------------------------------------------------


def type_name(t: Any) -> str:
    if t is Any:
        return "Any"
    if isinstance(t, TypeVar):
        return type_name(t.__constraints__) if t.__constraints__ else t.__name__
    if isinstance(t, tuple):
        return " | ".join(type_name(x) for x in t)
    return getattr(t, "__name__", repr(t))


def _members(t: Any) -> tuple:
    return t if isinstance(t, tuple) else (t,)


def accepts(dst: Any, src: Any) -> bool:
    """True when every payload a port of type `src` may send fits a port of type `dst`."""
    if dst is Any or src is Any:
        return True
    return all(any(_accepts_one(d, s) for d in _members(dst)) for s in _members(src))


def _accepts_one(dst: Any, src: Any) -> bool:
    if dst is Any or src is Any:
        return True
    if (
        isinstance(src, type)
        and issubclass(src, Batch)
        and isinstance(dst, type)
        and issubclass(dst, Batch)
    ):
        return accepts(dst.item_type, src.item_type)
    if isinstance(dst, type) and isinstance(src, type):
        return issubclass(src, dst)
    return dst == src


def substitute(t: Any, bindings: dict[TypeVar, Any]) -> Any:
    """Replace type variables (also inside Batch[...] and unions) by their bound types."""
    if isinstance(t, TypeVar):
        return bindings.get(t, Any)
    if isinstance(t, tuple):
        return union(*(substitute(x, bindings) for x in t))
    if isinstance(t, type) and issubclass(t, Batch) and t is not Batch:
        return Batch[substitute(t.item_type, bindings)]
    return t


def limits(t: Any) -> Any:
    """A declared port type with its type variables replaced by what they may stand for."""
    if isinstance(t, TypeVar):
        return union(*t.__constraints__) if t.__constraints__ else (t.__bound__ or Any)
    if isinstance(t, tuple):
        return union(*(limits(x) for x in t))
    if isinstance(t, type) and issubclass(t, Batch) and t is not Batch:
        return Batch[limits(t.item_type)]
    return t


def bind(declared: Any, actual: Any, bindings: dict[TypeVar, Any]) -> None:
    """Bind the type variables of a declared input type from the type connected to it."""
    if isinstance(declared, TypeVar):
        bindings[declared] = union(bindings[declared], actual) if declared in bindings else actual
    elif (
        isinstance(declared, type)
        and issubclass(declared, Batch)
        and isinstance(actual, type)
        and issubclass(actual, Batch)
    ):
        bind(declared.item_type, actual.item_type, bindings)


def union(*types: Any) -> Any:
    members: list = []
    for t in types:
        for m in _members(t):
            if m is Any:
                return Any
            if m not in members:
                members.append(m)
    return members[0] if len(members) == 1 else tuple(members)


# A port that takes a Frame or a batch of them and answers in kind (the image components).
FrameOrBatch = TypeVar("FrameOrBatch", Frame, Batch[Frame])


def map_frames(payload: Any, fn) -> Any:
    """fn applied to a Frame, or to each Frame of a Batch."""
    return payload.map(fn) if isinstance(payload, Batch) else fn(payload)

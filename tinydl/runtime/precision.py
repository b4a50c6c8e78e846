"""precision="auto": fp16 storage for the values that can take it, float32 for those that
cannot, decided when a session compiles.

A GPU backend at fp16 stores each intermediate float32 value in fp16 and computes in float32
(weights, inputs and outputs stay float32). What breaks is storage: a value past fp16's range
(65,504) becomes inf, and rounding to 11 significant bits, compounded through the layers,
can move an output a long way. So the decision is made by emulating exactly that storage on
the NumPy reference: the model runs on calibration inputs with every intermediate float32
value rounded to fp16 except the ones kept, and its outputs are compared with plain float32.

1. Overflow: a value whose float32 range on any calibration input exceeds fp16's is kept in
   float32, always.
2. If every other value in fp16 keeps the outputs within `tolerance` (max |fp16 - fp32| /
   max |fp32| of every float output, the mismatch fraction of other outputs), that is the
   decision: one emulated run. Else the values, in 16 chunks in graph order, are each tried
   alone in fp16; then, the chunks that moved the outputs least first, each is released to
   fp16 while the outputs stay within the tolerance; a chunk that breaks it is split in two
   and each half tried again, down to single values, which stay in float32. At most
   MAX_RUNS emulated runs: values not yet released then stay in float32.

The emulation rounds every intermediate of the optimized graph, where a backend also keeps
values inside its fused kernels in registers: it rounds at least as often as the GPU does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.errors import InvalidInputError
from tinydl.ir.graph import Graph
from tinydl.ops import infer_graph

FP16_MAX = 65504.0
DEFAULT_TOLERANCE = 1e-2
MAX_RUNS = 200  # emulated runs at most; past them undecided values stay in float32
CHUNKS = 16  # the values are first judged in this many chunks, in graph order


@dataclass
class PrecisionDecision:
    """Which values a precision="auto" session keeps in float32 (`fp32`) and stores in fp16
    (`fp16`), why (`overflow`: their range exceeds fp16's; the rest of `fp32`: releasing them
    moved the outputs past the tolerance), and the outputs' error on the calibration inputs
    with the decision (`error`) and with every value in fp16 (`fp16_error`, what
    precision="fp16" gives)."""

    fp32: list[str]
    fp16: list[str]
    overflow: list[str]
    error: float
    fp16_error: float
    tolerance: float
    runs: int
    seconds: float
    producers: dict[str, str] = field(default_factory=dict, repr=False)

    def nodes(self) -> dict[str, str]:
        """Node name -> "fp32" when an output of it is kept in float32, else "fp16"."""
        out: dict[str, str] = {}
        kept = set(self.fp32)
        for value, node in self.producers.items():
            if value in kept or out.get(node) == "fp32":
                out[node] = "fp32"
            else:
                out.setdefault(node, "fp16")
        return out

    def summary(self) -> str:
        n = len(self.fp32) + len(self.fp16)
        return (
            f"precision auto: {len(self.fp16)} of {n} values in fp16, {len(self.fp32)} in fp32 "
            f"({len(self.overflow)} past fp16's range); output error {self.error:.2e} "
            f"(all fp16: {self.fp16_error:.2e}, tolerance {self.tolerance:.0e}; "
            f"{self.runs} emulated runs, {self.seconds:.1f} s)"
        )


def calibration_feeds(graph: Graph, given: Any, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The calibration inputs: the user's (a dict of arrays, or a list of them), else one made
    from the input spec (floats uniform in [0, 1), integers 0, booleans False)."""
    if given is not None:
        feeds = [given] if isinstance(given, Mapping) else list(given)
        if not feeds or not all(isinstance(f, Mapping) for f in feeds):
            raise InvalidInputError(
                "calibration must be a dict of input name -> array, or a list of such dicts"
            )
        names = {v.name for v in graph.inputs}
        for f in feeds:
            if set(f) != names:
                raise InvalidInputError(
                    f"calibration feeds {sorted(f)}, the model's inputs are {sorted(names)}"
                )
        return [{k: np.asarray(v) for k, v in f.items()} for f in feeds]
    rng = np.random.default_rng(seed)
    feed = {}
    for v in graph.inputs:
        if v.shape is None or not all(isinstance(d, int) for d in v.shape):
            raise InvalidInputError(
                f"precision='auto' needs calibration inputs: input {v.name!r} has shape "
                f"{v.shape}; pass calibration={{{v.name!r}: array, ...}}"
            )
        dtype = np.dtype(v.dtype)
        if dtype.kind == "f":
            feed[v.name] = rng.random(v.shape).astype(dtype)
        else:
            feed[v.name] = np.zeros(v.shape, dtype)
    return [feed]


class _Emulator:
    """The graph with a switch per candidate value: Where(flags[i], fp16(v), v), and each
    value's max |v| as an extra output; compiled once for the fast CPU path (onnxruntime,
    the NumPy reference for what it lacks), so each trial is one run with other flags."""

    def __init__(self, graph: Graph, feeds: list[dict[str, np.ndarray]], candidates: list[str]):
        from tinydl.ir.graph import Node, Value
        from tinydl.ops import validate
        from tinydl.runtime.session import Session

        self.feeds = feeds
        self.candidates = candidates
        self.outputs = [v.name for v in graph.outputs]
        index = {name: i for i, name in enumerate(candidates)}
        nodes, extra, consts = [], [], {}
        for node in graph.nodes:
            outs = [f"{o}/f32" if o in index else o for o in node.outputs]
            nodes.append(Node(node.op, list(node.inputs), outs, dict(node.attrs), name=node.name))
            for o in node.outputs:
                if o not in index:
                    continue
                i, raw = index[o], f"{o}/f32"
                consts[f"{o}/i"] = np.array(i, np.int64)
                nodes += [
                    Node("Cast", [raw], [f"{o}/h"], {"to": 10}, name=f"{o}/to16"),
                    Node("Cast", [f"{o}/h"], [f"{o}/r"], {"to": 1}, name=f"{o}/to32"),
                    Node("Gather", ["precision/flags", f"{o}/i"], [f"{o}/on"], name=f"{o}/on"),
                    Node("Where", [f"{o}/on", f"{o}/r", raw], [o], name=f"{o}/pick"),
                    Node("Abs", [raw], [f"{o}/abs"], name=f"{o}/abs"),
                    Node("ReduceMax", [f"{o}/abs"], [f"{o}/max"], {"keepdims": 0}, name=f"{o}/max"),
                ]
                extra.append(Value(f"{o}/max", "float32", ()))
        flags = Value("precision/flags", "bool", (max(len(candidates), 1),))
        emulated = validate(
            Graph(
                [*graph.inputs, flags],
                [*graph.outputs, *extra],
                nodes,
                {**graph.initializers, **consts},
                name=f"{graph.name}+fp16",
            )
        )
        self.session = Session(emulated, backends=("cpu",), optimize="none")
        self.size = flags.shape[0]
        self.runs = 0

    def run(self, feed: dict[str, np.ndarray], rounded: set[str], ranges=None) -> list:
        flags = np.array([name in rounded for name in self.candidates] or [False])
        with np.errstate(all="ignore"):  # infs and NaNs of fp16 overflow are expected
            out = self.session.run({**feed, "precision/flags": flags})
        if ranges is not None:
            for name in self.candidates:
                ranges[name] = max(ranges.get(name, 0.0), float(out[f"{name}/max"]))
        return [out[n] for n in self.outputs]

    def error(self, rounded: set[str], reference: list[list]) -> float:
        self.runs += 1
        worst = 0.0
        for feed, want in zip(self.feeds, reference, strict=True):
            got = self.run(feed, rounded)
            worst = max(worst, *(_error(g, w) for g, w in zip(got, want, strict=True)))
        return worst


def _error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got), np.asarray(want)
    if want.size == 0:
        return 0.0
    if want.dtype.kind != "f":
        return float(np.mean(got != want))
    finite = np.isfinite(want)
    if not np.array_equal(np.isfinite(got), finite):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = float(np.max(np.abs(want[finite])))
    diff = float(np.max(np.abs(got[finite].astype(np.float64) - want[finite])))
    return diff / scale if scale > 0 else diff


def decide(
    graph: Graph,
    calibration: Any = None,
    tolerance: float | None = None,
    max_runs: int = MAX_RUNS,
) -> PrecisionDecision:
    """The float32 / fp16 storage of each intermediate value of `graph` (see the module)."""
    tolerance = DEFAULT_TOLERANCE if tolerance is None else float(tolerance)
    if not tolerance > 0:
        raise InvalidInputError(f"fp16_tolerance must be positive, got {tolerance}")
    t0 = time.perf_counter()
    feeds = calibration_feeds(graph, calibration)
    outputs = {v.name for v in graph.outputs}
    producers = {o: n.name for n in graph.nodes for o in n.outputs if o}
    types = infer_graph(graph)
    candidates = [
        o
        for n in graph.nodes
        for o in n.outputs
        if o and o not in outputs and o in types and types[o].dtype == "float32"
    ]
    emu = _Emulator(graph, feeds, candidates)
    ranges: dict[str, float] = {}
    reference = [emu.run(feed, set(), ranges) for feed in feeds]
    overflow = [v for v in candidates if ranges[v] > FP16_MAX]
    free = [v for v in candidates if ranges[v] <= FP16_MAX]
    fp16_error = emu.error(set(candidates), reference)
    released: set[str] = set()
    if emu.error(set(free), reference) <= tolerance:
        released = set(free)
    else:
        # Each chunk's error alone in fp16; the cheapest are released first, so the values
        # that cost least take the tolerance and the sensitive ones are left in float32.
        size = max(1, -(-len(free) // CHUNKS))
        chunks = [free[i : i + size] for i in range(0, len(free), size)]
        solo = [emu.error(set(c), reference) for c in chunks]
        queue = [c for _, c in sorted(zip(solo, chunks, strict=True), key=lambda sc: sc[0])]
        while queue and emu.runs < max_runs:
            chunk = queue.pop(0)
            if emu.error(released | set(chunk), reference) <= tolerance:
                released |= set(chunk)
            elif len(chunk) > 1:
                half = len(chunk) // 2
                queue[:0] = [chunk[:half], chunk[half:]]
    error = emu.error(released, reference)
    return PrecisionDecision(
        fp32=[v for v in candidates if v not in released],
        fp16=[v for v in candidates if v in released],
        overflow=overflow,
        error=error,
        fp16_error=fp16_error,
        tolerance=tolerance,
        runs=emu.runs,
        seconds=time.perf_counter() - t0,
        producers={v: producers[v] for v in candidates},
    )

"""The harness: one model, one input, every target (tinydl backends and peers) measured alike.

For each target, in order:

1. init phases, each with wall time, host peak RSS over the phase and device memory where the
   target can tell: `device_init` (library import and device or context creation), `model_load`,
   `compile_cold`, `first_run`, then a second instance: `compile_warm`, `first_run_warm` (what
   the process's caches save; lazy compilers such as torch.compile do their work in a first run);
2. the output check against tinydl's NumPy reference (the numpy backend): a mismatch is reported and
   the target gets no times;
3. latency with inputs and outputs on the host (wall), and for GPU targets the GPU-resident time
   of the same model from device timestamps;
4. host↔device transfers of 720p/1080p RGBA32F frames and the model's own input and output sizes.

A target that cannot run here (library missing, no device, an op its converter does not cover)
is reported as skipped with the reason; an unexpected failure as an error with the message.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.bench.inputs import default_dims
from tinydl.errors import InvalidInputError

SCHEMA = "tinydl-bench/1"
PHASES = (
    "device_init",
    "model_load",
    "compile_cold",
    "first_run",
    "compile_warm",
    "first_run_warm",
)
FRAMES = {"720p": (720, 1280), "1080p": (1080, 1920), "4k": (2160, 3840)}


@dataclass
class Config:
    warmup: int = 10
    runs: int = 50
    transfer_runs: int = 20
    transfer_sizes: tuple[str, ...] = ("720p", "1080p")
    precision: str = "fp32"
    threads: int | None = None  # CPU threads for peers; None: every core
    torch_compile: bool = False
    tolerance: float | None = None  # None: 1e-3 for fp32, 5e-3 for tf32, 2e-2 for fp16
    seed: int = 0
    # tinydl's model and session caches (tinydl/snapshot.py) during the init phases: off, so
    # that load and compile measure the work (as every peer does it), unless asked.
    session_cache: bool = False

    @property
    def rel_tolerance(self) -> float:
        if self.tolerance is not None:
            return self.tolerance
        return {"fp16": 2e-2, "tf32": 5e-3}.get(self.precision, 1e-3)

    @property
    def cpu_threads(self) -> int:
        return self.threads or os.cpu_count() or 1


class Skip(Exception):
    """This target cannot be measured here; the message says why."""


@dataclass
class Model:
    """The model under test, its input, and tinydl's output for that input (the reference)."""

    path: Path
    graph: Any  # ir.Graph
    feeds: dict[str, np.ndarray]
    reference: list[np.ndarray]
    workdir: Path
    _types: dict | None = None

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.graph.outputs]

    def types(self) -> dict:
        """Every value's TensorType (dtype, concrete shape) at this input's shapes."""
        if self._types is None:
            from tinydl.ir.graph import Value
            from tinydl.ops.base import infer_graph

            inputs = [
                Value(v.name, v.dtype, tuple(self.feeds[v.name].shape)) for v in self.graph.inputs
            ]
            self._types = infer_graph(replace(self.graph, inputs=inputs, values={}))
        return self._types

    def shape(self, name: str) -> tuple[int, ...]:
        shape = self.types()[name].shape
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise Skip(f"the shape of '{name}' is not known at this input size")
        return tuple(shape)


class Target:
    """One engine on one device. Subclasses implement compile and run; the rest is optional."""

    engine = ""

    def __init__(self, name: str, model: Model, config: Config):
        self.name, self.model, self.config = name, model, config
        self.device = ""
        self.info: dict[str, Any] = {}
        # Why there is no GPU-resident time (set by targets that have none).
        self.gpu_note = "n/a: runs on the host"
        # Why there are no transfer figures.
        self.transfer_note = "not applicable: the target computes in host memory"

    def device_init(self) -> None:
        """Import the library and create the device or context."""

    def load(self) -> None:
        """Read the model (into the form the engine takes)."""

    def compile(self) -> Any:
        """A ready-to-run instance of the model (a session, a net...)."""
        raise NotImplementedError

    def run(self, inst: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run with host inputs; return the outputs on the host, in the graph's output order."""
        raise NotImplementedError

    def gpu_timer(self, inst: Any) -> Callable[[], float] | None:
        """A function that runs once with device-resident data and returns GPU seconds."""
        return None

    def transfer_modes(self) -> dict[str, TransferMode]:
        return {}

    def device_memory(self) -> int | None:
        """Bytes of device memory in use, when the target can tell."""
        return None

    def close(self) -> None:
        """Free what the target holds."""


@dataclass
class TransferMode:
    """How a target moves arrays: `host` makes the host buffer of this mode (pinned, ...),
    `h2d` returns a device copy (complete when it returns), `d2h(dev, host)` copies back."""

    host: Callable[[np.ndarray], Any]
    h2d: Callable[[Any], Any]
    d2h: Callable[[Any, Any], Any]


@dataclass
class Skipped:
    """A target known before it starts to be impossible here."""

    name: str
    reason: str
    engine: str = ""


# -- measuring ---------------------------------------------------------------------------------


class Memory:
    """Host memory of this process: current RSS and the peak since the last reset.

    Linux resets the peak (VmHWM) when "5" is written to /proc/self/clear_refs, which gives a
    peak per phase; elsewhere the peak is the process's lifetime peak (ru_maxrss).
    """

    def __init__(self):
        self.resettable = self._reset()

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def reset_peak(self) -> None:
        if self.resettable:
            self._reset()

    @staticmethod
    def _status(key: str) -> int | None:
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def rss(self) -> int:
        value = self._status("VmRSS")
        return value if value is not None else self.lifetime_peak()

    def peak(self) -> int:
        value = self._status("VmHWM") if self.resettable else None
        return value if value is not None else self.lifetime_peak()

    @staticmethod
    def lifetime_peak() -> int:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / 2**20, 2)


def stats(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {
        "n": int(ms.size),
        "mean_ms": float(ms.mean()),
        "median_ms": float(np.median(ms)),
        "p90_ms": float(np.percentile(ms, 90)),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        "std_ms": float(ms.std()),
    }


def _timed(fn: Callable[[], Any], warmup: int, runs: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


# Below this absolute error (a hundredth of the relative tolerance, in the outputs' own units)
# an output matches whatever its magnitude: a map that is ~1e-9 everywhere (PP-OCRv4 det on a
# random input) cannot be judged relative to itself.
ABS_FLOOR = 1e-2


def compare(got: Sequence[np.ndarray], ref: Sequence[np.ndarray], tolerance: float) -> dict:
    """Largest absolute error, relative to the reference's largest magnitude, over all outputs;
    matched when that is within `tolerance`, or the absolute error within tolerance*ABS_FLOOR."""
    if len(got) != len(ref):
        return {"matched": False, "reason": f"{len(got)} outputs, expected {len(ref)}"}
    worst_abs, worst_rel = 0.0, 0.0
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        g = np.asarray(g)
        if g.shape != r.shape:
            return {"matched": False, "reason": f"output {i}: shape {g.shape}, expected {r.shape}"}
        if not np.all(np.isfinite(g)):
            return {"matched": False, "reason": f"output {i}: non-finite values"}
        diff = float(np.abs(g.astype(np.float64) - r.astype(np.float64)).max()) if r.size else 0.0
        scale = float(np.abs(r).max()) if r.size else 1.0
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(scale, 1e-30))
    floor = tolerance * ABS_FLOOR
    check = {
        "matched": worst_rel <= tolerance or worst_abs <= floor,
        "max_abs_err": worst_abs,
        "rel_err": worst_rel,
        "tolerance": tolerance,
        "abs_floor": floor,
    }
    if not check["matched"]:
        check["reason"] = (
            f"relative error {worst_rel:.2e} > tolerance {tolerance:.0e} "
            f"(absolute {worst_abs:.2e} > {floor:.0e})"
        )
    return check


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Send what native libraries print on fd 2 to a buffer; its text ends up in the list."""
    sys.stderr.flush()
    saved = os.dup(2)
    lines: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as buf:
        os.dup2(buf.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            buf.seek(0)
            lines.extend(buf.read().decode(errors="replace").splitlines())


class Phases:
    """Runs a target's init steps, recording time, peak RSS growth and device memory."""

    def __init__(self, target: Target, memory: Memory):
        self.target, self.memory = target, memory
        self.records: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        dev0 = self.target.device_memory()
        rss0 = self.memory.rss()
        self.memory.reset_peak()
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
        peak = self.memory.peak()
        dev1 = self.target.device_memory()
        self.records[name] = {
            "seconds": seconds,
            "rss_mb": _mb(self.memory.rss()),
            "rss_peak_delta_mb": _mb(max(0, peak - rss0)) if self.memory.resettable else None,
            "device_delta_mb": _mb(dev1 - dev0) if dev0 is not None and dev1 is not None else None,
        }
        return result


def measure(target: Target, cfg: Config, memory: Memory, log: Callable[[str], None]) -> dict:
    """Every figure for one target; never raises (failures become the record's status)."""
    record = _record(target.name, target.engine)
    phases = Phases(target, memory)
    try:
        _measure(target, cfg, phases, record, log)
    except Skip as exc:
        record["status"], record["reason"] = "skipped", _one_line(str(exc))
    except Exception as exc:  # noqa: BLE001 - one broken target must not end the benchmark
        record["status"] = "error"
        record["reason"] = _one_line(f"{type(exc).__name__}: {exc}")
        log(f"  {target.name}: error\n" + traceback.format_exc(limit=4))
    finally:
        record["init"] = phases.records
        record["device"] = record["device"] or target.device
        record["info"] = target.info
        with contextlib.suppress(Exception):
            target.close()
    return record


def _measure(target: Target, cfg: Config, phases: Phases, record: dict, log) -> None:
    model = target.model
    feeds = model.feeds
    phases("device_init", target.device_init)
    phases("model_load", target.load)
    inst = phases("compile_cold", target.compile)
    got = phases("first_run", lambda: target.run(inst, feeds))
    second = phases("compile_warm", target.compile)
    phases("first_run_warm", lambda: target.run(second, feeds))
    second = None
    record["check"] = check = compare(got, model.reference, cfg.rel_tolerance)
    record["device"] = target.device
    if not check["matched"]:
        record["status"], record["reason"] = "mismatch", check["reason"]
        return
    log(
        f"  {target.name}: output matches (rel err {check['rel_err']:.1e}); timing "
        f"{cfg.runs} runs after {cfg.warmup} warm-up"
    )
    record["latency"]["host"] = stats(_timed(lambda: target.run(inst, feeds), cfg.warmup, cfg.runs))
    timer = target.gpu_timer(inst)
    gpu = None
    if timer is not None:
        for _ in range(cfg.warmup):
            timer()
        gpu = [timer() for _ in range(cfg.runs)]
    if gpu and all(t is not None for t in gpu):
        record["latency"]["gpu"] = stats(gpu)
    else:
        record["latency"]["gpu_note"] = target.gpu_note
    inst = None
    modes = target.transfer_modes() if cfg.transfer_runs else {}
    if not cfg.transfer_runs:
        record["transfer_note"] = "not measured (transfer runs: 0)"
    elif modes:
        record["transfers"] = _transfers(modes, model, cfg)
    else:
        record["transfer_note"] = target.transfer_note


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _transfers(modes: dict[str, TransferMode], model: Model, cfg: Config) -> list[dict]:
    arrays: list[tuple[str, np.ndarray]] = []
    rng = np.random.default_rng(cfg.seed)
    for label in cfg.transfer_sizes:
        h, w = FRAMES[label]
        arrays.append((f"{label} RGBA32F", rng.random((h, w, 4), dtype=np.float32)))
    for name, x in model.feeds.items():
        arrays.append((f"input '{name}'", np.ascontiguousarray(x)))
    for name, y in zip(model.output_names, model.reference, strict=True):
        arrays.append((f"output '{name}'", np.ascontiguousarray(y)))
    rows = []
    warm = min(3, cfg.transfer_runs)
    for label, array in arrays:
        for mode, t in modes.items():
            host = t.host(array)
            dev = t.h2d(host)
            timings = {
                "h2d": _timed(partial(t.h2d, host), warm, cfg.transfer_runs),
                "d2h": _timed(partial(t.d2h, dev, host), warm, cfg.transfer_runs),
            }
            for direction, seconds in timings.items():
                s = stats(seconds)
                rows.append(
                    {
                        "size": label,
                        "shape": list(array.shape),
                        "bytes": int(array.nbytes),
                        "direction": direction,
                        "mode": mode,
                        **s,
                        "gb_per_s": array.nbytes / (s["median_ms"] * 1e-3) / 1e9,
                    }
                )
    return rows


# -- the run -----------------------------------------------------------------------------------


def make_feeds(graph, shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [0, 1) (image-like), integers in [0, 10)."""
    rng = np.random.default_rng(seed)
    layout = graph.metadata.get("input_layout", "NCHW")
    feeds = {}
    for v in graph.inputs:
        dims = shapes.get(v.name)
        if dims is None:
            dims = default_dims(v, layout)
        dtype = np.dtype(v.dtype or "float32")
        if dtype.kind == "f":
            feeds[v.name] = rng.random(dims, dtype=np.float32).astype(dtype)
        elif dtype.kind == "b":
            feeds[v.name] = rng.random(dims) < 0.5
        else:
            feeds[v.name] = rng.integers(0, 10, size=dims).astype(dtype)
    return feeds


def prepare_model(
    path: str | os.PathLike, shapes: dict[str, tuple[int, ...]], seed: int, workdir: Path
) -> Model:
    import tinydl as td

    path = Path(path)
    graph = td.load(path)
    if "" in shapes:  # a shape given without a name: the model's only input
        if len(graph.inputs) != 1:
            raise InvalidInputError(
                f"the model has inputs {[v.name for v in graph.inputs]}: "
                "name the one each --input-shape is for (NAME=DIMS)"
            )
        shapes = {graph.inputs[0].name: shapes[""], **{k: v for k, v in shapes.items() if k}}
    unknown = [n for n in shapes if n not in {v.name for v in graph.inputs}]
    if unknown:
        raise InvalidInputError(
            f"--input-shape names {unknown}, but the model's inputs are "
            f"{[v.name for v in graph.inputs]}"
        )
    feeds = make_feeds(graph, shapes, seed)
    session = td.compile(graph, backends=("numpy",))  # the reference every backend is held to
    out = session.run(feeds)
    reference = [np.asarray(out[v.name]) for v in graph.outputs]
    return Model(path, graph, feeds, reference, workdir)


def resolve_model(spec: str) -> Path:
    """A model file, or the name of a model tinydl ships (tinydl:espcn_x3, or espcn_x3)."""
    if spec.startswith("tinydl:"):
        from tinydl.runtime.loader import shipped_path

        return shipped_path(spec)
    path = Path(spec)
    if path.exists() or path.suffix:
        return path
    try:
        from tinydl.models import ESPCN_SCALES, espcn_path
    except ImportError:
        return path
    for scale in ESPCN_SCALES:
        if spec == f"espcn_x{scale}":
            return espcn_path(scale)
    return path


def run_bench(
    model: str | os.PathLike,
    backends: Sequence[str] | None = None,
    peers: Sequence[str] | None = None,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    config: Config | None = None,
    log: Callable[[str], None] | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Benchmark `model` on tinydl's backends and peer runtimes; the report as a dict.

    backends: tinydl backend names (default: every known backend; unavailable ones are
    reported as skipped). peers: from tinydl.bench.peers.PEERS (default: all of them).
    """
    from tinydl.backends import CPU, KNOWN
    from tinydl.bench import machine
    from tinydl.bench.engine import tinydl_targets
    from tinydl.bench.peers import PEERS, peer_targets

    cfg = config or Config()
    log = log or (lambda _msg: None)
    backends = list(KNOWN) if backends is None else list(backends)
    peers = list(PEERS) if peers is None else list(peers)
    unknown = [b for b in backends if b not in KNOWN and b != CPU]
    if unknown:
        raise InvalidInputError(f"unknown backend(s) {unknown}: expected some of {[CPU, *KNOWN]}")
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise InvalidInputError(f"unknown peer(s) {unknown}: expected some of {list(PEERS)}")
    memory = Memory()
    with tempfile.TemporaryDirectory(prefix="tinydl-bench-") as tmp:
        mdl = prepare_model(resolve_model(str(model)), input_shapes or {}, cfg.seed, Path(tmp))
        shapes = {n: list(a.shape) for n, a in mdl.feeds.items()}
        log(f"model {mdl.path.name}: inputs {shapes}; reference: tinydl's numpy backend")
        targets = tinydl_targets(backends, mdl, cfg) + peer_targets(peers, mdl, cfg)
        records = []
        for target in targets:
            if isinstance(target, Skipped):
                log(f"  {target.name}: skipped: {target.reason}")
                records.append(_record(target.name, target.engine, "skipped", target.reason))
                continue
            log(f"  {target.name}: measuring")
            if target.engine == "tinydl":
                record = measure(target, cfg, memory, log)
            else:
                # Peers' native libraries log to fd 2 at length; keep it for failures only.
                with captured_stderr() as lines:
                    record = measure(target, cfg, memory, log)
                if record["status"] == "error" and lines:
                    record["info"]["stderr_tail"] = lines[-10:]
            if record["status"] != "ok":
                log(f"  {target.name}: {record['status']}: {record['reason']}")
            records.append(record)
    graph = mdl.graph
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "model": {
            "path": str(mdl.path),
            "name": graph.name,
            "inputs": [
                {"name": n, "shape": list(a.shape), "dtype": a.dtype.name}
                for n, a in mdl.feeds.items()
            ],
            "outputs": [
                {"name": n, "shape": list(a.shape), "dtype": a.dtype.name}
                for n, a in zip(mdl.output_names, mdl.reference, strict=True)
            ],
            "parameters": graph.parameter_count(),
            "ops": graph.op_counts(),
        },
        "config": {
            **asdict(cfg),
            "threads": cfg.cpu_threads,
            "tolerance": cfg.rel_tolerance,
            "backends": backends,
            "peers": peers,
            "peak_rss_per_phase": memory.resettable,
        },
        "machine": machine.machine_info(),
        "versions": machine.versions(),
        "targets": records,
    }


def _record(name: str, engine: str, status: str = "ok", reason: str | None = None) -> dict:
    """A target's entry in the report, before any figure is in."""
    return {
        "name": name,
        "engine": engine,
        "device": "",
        "status": status,
        "reason": reason,
        "check": None,
        "latency": {"host": None, "gpu": None, "gpu_note": None},
        "init": {},
        "transfers": [],
        "transfer_note": None,
        "info": {},
    }


__all__ = [
    "Config",
    "Model",
    "PHASES",
    "SCHEMA",
    "Skip",
    "Skipped",
    "Target",
    "TransferMode",
    "captured_stderr",
    "compare",
    "measure",
    "run_bench",
    "stats",
]

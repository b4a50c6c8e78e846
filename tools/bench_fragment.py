"""The webgpu render path (fragment shaders into textures) against the compute path, per layer
and per model, in one run.

    python tools/bench_fragment.py [--models espcn360,espcn720,superres360,pose_landmark]
                                   [--runs 50] [--out DIR]
    python tools/bench_fragment.py --models resize_linear,resize_cubic --precisions fp16

Models: the shipped ESPCN x3 on a luma plane, 640x360 -> 1920x1080 ("espcn360") and
1280x720 -> 3840x2160 ("espcn720"); the whole super-resolution frame graph (u8 RGB in and out,
tinydl.apps.superres) at 640x360 ("superres360"); MediaPipe 0.10.14's BlazePose landmark model
(pose_landmark_full.tflite, from $TINYDL_TEST_MODELS or the mediapipe package); one Resize x2
of 16 channels at 640x360, linear or cubic, between two Relus ("resize_linear", "resize_cubic":
at fp16 the render path samples through the bilinear filter, "fragment/taps" reads the taps as
at fp32).

Paths: compute (WGSL compute shaders, the default); fragment with each weight mode (uniform,
storage, texture, const); auto (each node both ways, the faster kept). For each model x
precision x path:
- err: largest difference to the compute path's output, relative to its largest magnitude;
- gpu: median GPU time of a run (timestamps before the first pass and after the last);
- wall: median time per run of a loop with input and output on the GPU and one wait at the end;
- init: compile + first run in this process (pipelines compiled here for each path);
- drawn: how many steps are draws or texture transitions.
Per layer (compute, fragment with uniform weights, with const weights): median GPU time of each
step.
Prints tables; writes results.json and table.md to --out (or $OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

import tinydl as td
from tinydl.backends import get_backend

PATHS = [
    ("compute", {"shaders": "compute"}),
    ("fragment/uniform", {"shaders": "fragment", "weights": "uniform"}),
    ("fragment/storage", {"shaders": "fragment", "weights": "storage"}),
    ("fragment/texture", {"shaders": "fragment", "weights": "texture"}),
    ("fragment/const", {"shaders": "fragment", "weights": "const"}),
    ("auto", {"shaders": "auto"}),
]
# Resize's tap tables at fp16 too: the texture declared unfilterable while the plan is built.
TAPS = ("fragment/taps", {"shaders": "fragment", "weights": "uniform"})


def pose_landmark_path() -> Path:
    import importlib.util

    root = os.environ.get("TINYDL_TEST_MODELS")
    rel = Path("mediapipe/modules/pose_landmark/pose_landmark_full.tflite")
    if root:
        for p in Path(root).glob(f"*/{rel}"):
            return p
    spec = importlib.util.find_spec("mediapipe")
    if spec is not None:
        return Path(list(spec.submodule_search_locations)[0]).parent / rel
    raise SystemExit("pose_landmark_full.tflite not found: set TINYDL_TEST_MODELS")


def model(name: str, rng):
    """(graph, feeds) of a named model."""
    from tinydl.apps.superres import frame_graph
    from tinydl.models import load_espcn

    if name.startswith("espcn"):
        h, w = (360, 640) if name == "espcn360" else (720, 1280)
        graph = load_espcn(3)
        x = rng.random((1, 1, h, w), dtype=np.float32)
        return graph, {graph.inputs[0].name: x}
    if name == "superres360":
        graph = frame_graph(load_espcn(3), 3)
        return graph, {"frame": rng.integers(0, 256, (1, 360, 640, 3), dtype=np.uint8)}
    if name == "pose_landmark":
        graph = td.load(pose_landmark_path())
        v = graph.inputs[0]
        return graph, {v.name: rng.random(v.shape, dtype=np.float32)}
    if name.startswith("resize_"):
        from tinydl.ir.graph import Graph, Node, Value
        from tinydl.ops import validate

        x = rng.standard_normal((1, 16, 360, 640)).astype(np.float32)
        mode = name.removeprefix("resize_")
        attrs = {"mode": mode, "coordinate_transformation_mode": "half_pixel"}
        nodes = [
            Node("Relu", ["x"], ["r"]),
            Node("Resize", ["r", "", "scales"], ["z"], attrs),
            Node("Relu", ["z"], ["y"]),
        ]
        scales = {"scales": np.array([1, 1, 2, 2], np.float32)}
        io = [Value("x", "float32", x.shape)], [Value("y", "float32", None)]
        return validate(Graph(*io, nodes, scales)), {"x": x}
    raise SystemExit(f"unknown model {name}")


def kernel_of(sess):
    (k,) = [c.kernel for c in sess.partitions if c.backend == "webgpu"]
    return k


def session(graph, feeds, precision, options, timing):
    """The graph compiled for webgpu with `options` and GPU timestamps ("total" or "ops"), and
    its feeds uploaded."""
    backend = get_backend("webgpu")
    sess = td.compile(
        graph,
        backends=("webgpu",),
        precision=precision,
        strict=True,
        backend_options={"webgpu": {**options, "timing": timing}},
    )
    return sess, {k: backend.to_device(v) for k, v in feeds.items()}


def measure(graph, feeds, precision, options, runs, taps=False):
    backend = get_backend("webgpu")
    t0 = time.perf_counter()
    if taps:
        from unittest import mock

        from tinydl.backends.webgpu.program import Build

        with mock.patch.object(Build, "filterable", lambda self, info: False):
            sess, dev = session(graph, feeds, precision, options, "total")
    else:
        sess, dev = session(graph, feeds, precision, options, "total")
    out = sess.run(dev, outputs="device")
    backend.sync()
    init = time.perf_counter() - t0
    kernel = kernel_of(sess)
    kernel.timing_history.clear()
    t = time.perf_counter()
    for _ in range(5):
        sess.run(dev, outputs="device")
    backend.sync()
    # as many runs as take about a second (at least 3): the slow paths take 0.5 s a run
    runs = max(3, min(runs, int(1.0 / ((time.perf_counter() - t) / 5))))
    walls = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(runs):
            out = sess.run(dev, outputs="device")
        backend.sync()
        walls.append((time.perf_counter() - t) / runs)
    kernel.timings  # noqa: B018 - reads the pending timestamps
    gpu = [sum(s for _, s in t) for t in list(kernel.timing_history)[5:]]
    host = {k: backend.to_host(v) for k, v in out.items()}
    plan = next(iter(kernel.plans.values()))
    drawn = sum(1 for s in plan.steps if "fragment" in s.label or "texture" in s.label)
    return {
        "gpu_ms": 1e3 * statistics.median(gpu) if gpu else None,
        "wall_ms": 1e3 * min(walls),
        "init_s": init,
        "drawn_steps": drawn,
        "steps": len(plan.steps),
        "auto": plan.auto,
    }, host


def per_layer(graph, feeds, precision, options, runs):
    backend = get_backend("webgpu")
    sess, dev = session(graph, feeds, precision, options, "ops")
    t = time.perf_counter()
    sess.run(dev, outputs="device")
    backend.sync()
    runs = max(4, min(runs, int(1.0 / (time.perf_counter() - t))))
    for _ in range(runs):
        sess.run(dev, outputs="device")
    backend.sync()
    kernel = kernel_of(sess)
    kernel.timings  # noqa: B018
    hist = list(kernel.timing_history)[2:]
    labels = [label for label, _ in hist[0]]
    return [
        (label, 1e3 * statistics.median(h[i][1] for h in hist)) for i, label in enumerate(labels)
    ]


def err(got, ref) -> float:
    g = next(iter(got.values())).astype(np.float64)
    r = next(iter(ref.values())).astype(np.float64)
    return float(np.abs(g - r).max() / max(np.abs(r).max(), 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="espcn360,espcn720,superres360,pose_landmark")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    backend = get_backend("webgpu")
    if not backend.available():
        raise SystemExit(backend.unavailable_reason())
    device = backend.devices()[0]
    print(f"device: {device}", flush=True)
    rng = np.random.default_rng(0)
    results: dict = {"device": device, "models": {}}
    lines = [f"device: {device}", ""]
    for name in args.models.split(","):
        graph, feeds = model(name, rng)
        for precision in args.precisions.split(","):
            key = f"{name} {precision}"
            rows, ref = {}, None
            paths = [*PATHS, TAPS] if name.startswith("resize_") else PATHS
            for path, options in paths:
                try:
                    row, out = measure(
                        graph, feeds, precision, options, args.runs, taps=path == TAPS[0]
                    )
                except Exception as exc:  # noqa: BLE001 - a path that fails is reported, not fatal
                    rows[path] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"{key} {path}: {rows[path]['error']}", flush=True)
                    continue
                ref = out if ref is None else ref
                row["err"] = err(out, ref)
                rows[path] = row
                print(
                    f"{key} {path}: {json.dumps({k: v for k, v in row.items() if k != 'auto'})}",
                    flush=True,
                )
            layers = {}
            for path in ("compute", "fragment/uniform", "fragment/const"):
                try:
                    layers[path] = per_layer(graph, feeds, precision, dict(PATHS)[path], 20)
                except Exception as exc:  # noqa: BLE001
                    layers[path] = [("error", str(exc))]
            results["models"][key] = {"paths": rows, "layers": layers}
            lines.append(f"## {key}")
            lines.append("| path | gpu ms | wall ms | init s | draws/steps | err |")
            lines.append("|---|---|---|---|---|---|")
            for path, row in rows.items():
                if "error" in row:
                    lines.append(f"| {path} | {row['error']} | | | | |")
                    continue
                gpu = f"{row['gpu_ms']:.3f}" if row["gpu_ms"] is not None else "-"
                lines.append(
                    f"| {path} | {gpu} | {row['wall_ms']:.3f} | {row['init_s']:.2f} | "
                    f"{row['drawn_steps']}/{row['steps']} | {row['err']:.1e} |"
                )
            auto = rows.get("auto", {}).get("auto")
            if auto:
                picked = sum(1 for c in auto["choice"].values() if c == "fragment")
                predicted = ", ".join(f"{k} {1e3 * v:.3f}" for k, v in auto["predicted_s"].items())
                lines.append(
                    f"\nauto: {auto['mode']}, {picked} of {len(auto['choice'])} nodes drawn; "
                    f"predicted ms {predicted}"
                )
            lines.append("\nper layer (GPU ms):")
            for path, ls in layers.items():
                lines.append(
                    f"- {path}: "
                    + "; ".join(
                        f"{lab} {t:.3f}" if isinstance(t, float) else f"{lab} {t}" for lab, t in ls
                    )
                )
            lines.append("")
            save(Path(args.out), results, lines)  # after each model: a cut-short run keeps these
    print("\n".join(lines))


def save(out: Path, results: dict, lines: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "table.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()

"""ESPCN x3 (1->64 5x5 tanh -> 32 3x3 tanh -> 9 3x3 -> pixel shuffle), 640x360 -> 1920x1080,
batch 1: tinydl webgpu against PyTorch eager (cuDNN), ncnn Vulkan and LiteRT GPU, in one run.

    python tools/bench_webgpu_espcn.py [--peers DIR] [--sweep] [--out DIR]

Every engine runs the same random weights (models/common.py of the peer scripts, seed 0; the
ncnn .param/.bin and the .tflite there were written from them) and is checked against a
float64 NumPy reference before it is timed. Reported, as medians:
- tinydl webgpu fp32/fp16, GPU-resident: input and output stay on the GPU. "gpu" is the time
  between the compute pass's two GPU timestamps; "wall" is a loop of runs with outputs="device"
  and one sync at the end, divided by the runs (what a video pipeline sustains per frame).
- tinydl webgpu fp32/fp16, host in/out: sess.run(NumPy) -> NumPy, upload and read-back included.
- PyTorch eager fp32 and fp16 (channels_last), CUDA events around the forward. fp32 is
  PyTorch's default, which lets cuDNN use TF32 tensor cores; "fp32 strict" turns TF32 off.
- ncnn Vulkan and LiteRT GPU: host in/out, as their Python APIs require, wall clock.
- Init cost of tinydl (load + compile + first run): cold (a new process: device, shader compile,
  weight upload) and with a warm pipeline cache (a second session in that process).
--sweep first times conv_direct blockings per layer (GPU timestamps) and uses the best.
Prints a table last; writes results.json and table.md to --out (or $OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tinydl.ops import validate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

H, W, R = 360, 640, 3
RESULTS: dict = {}


def log(key, value):
    RESULTS[key] = value
    print(f"{key}: {value}", flush=True)


def peers_dir(arg: str | None) -> Path:
    for p in [arg, ROOT / ".peers"]:
        if p and (Path(p) / "models" / "common.py").exists():
            return Path(p)
    raise SystemExit("peer models not found: pass --peers DIR (the folder holding models/)")


def espcn_graph(weights, h=H, w=W):
    from tinydl.ir.graph import Graph, Node, Value

    inits, nodes, x = {}, [], "x"
    for i, (wt, b) in enumerate(weights):
        k = wt.shape[2]
        inits[f"w{i}"], inits[f"b{i}"] = wt, b
        attrs = {"pads": [k // 2] * 4}
        nodes.append(Node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], attrs, name=f"conv{i}"))
        x = f"c{i}"
        if i < 2:
            nodes.append(Node("Tanh", [x], [f"t{i}"], name=f"tanh{i}"))
            x = f"t{i}"
    nodes.append(Node("DepthToSpace", [x], ["y"], {"blocksize": R, "mode": "CRD"}, name="ps"))
    inputs = [Value("x", "float32", (1, 1, h, w))]
    return validate(Graph(inputs, [Value("y", "float32", None)], nodes, inits, name="espcn_x3"))


def max_err(got, ref) -> float:
    return float(np.abs(np.asarray(got, np.float64).reshape(ref.shape) - ref).max())


def wall_median(fn, warm=10, runs=50) -> float:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


# -- tinydl --------------------------------------------------------------------------------------


def webgpu_kernel(sess):
    ((*_, kernel),) = sess.partitions
    return kernel


def tinydl_runs(weights, x, ref, conv_configs):
    from tinydl.backends import get_backend

    backend = get_backend("webgpu")
    log("webgpu_device", backend.devices())
    graph = espcn_graph(weights, H, W)
    for precision, tag in (("fp32", "fp32"), ("fp16", "fp16"), ("fp16", "fp16acc")):
        tinydl_one(backend, graph, precision, tag, x, ref, conv_configs.get(tag))


def tinydl_one(backend, graph, precision, tag, x, ref, conv_configs):
    """tag fp16acc: fp16 with fp16 accumulation in the convolutions (opt-in)."""
    import tinydl as td

    tag = f"tinydl_webgpu_{tag}"
    opts = {}
    if conv_configs or tag.endswith("acc"):
        opts = {
            "conv_configs": conv_configs or {},
            "accumulate": "f16" if tag.endswith("acc") else "f32",
        }
    sess = td.compile(
        graph,
        backends=("webgpu",),
        precision=precision,
        strict=True,
        backend_options={"webgpu": opts},
    )
    kernel = webgpu_kernel(sess)
    y = sess.run({"x": x})["y"]
    log(f"{tag}_maxerr", max_err(y[0], ref))
    log(f"{tag}_nodes", [f"{n.name}:{n.op}" for n in sess.graph.nodes])
    plan = next(iter(kernel.plans.values()))
    log(f"{tag}_dispatches", [s.label for s in plan.steps])
    # GPU-resident: the same device input every run, outputs left on the GPU. GPU timestamps
    # of back-to-back runs (the GPU busy, as in PyTorch's timing loop), read afterwards.
    xd = backend.to_device(x)
    feeds = {"x": xd}
    kernel.timing = "total"
    runs = gpu_times(kernel, feeds, 200, 1.0)
    log(f"{tag}_resident_gpu_ms", round(statistics.median(r[0][1] for r in runs) * 1e3, 4))
    kernel.timing = "ops"
    runs = gpu_times(kernel, feeds, 100, 0.3)
    per_op = {
        f"{i}:{name}": statistics.median(r[i][1] for r in runs) * 1e3
        for i, (name, _) in enumerate(runs[0])
    }
    log(f"{tag}_ops_gpu_ms", {k: round(v, 4) for k, v in per_op.items()})
    kernel.timing = None

    def loop(n):
        for _ in range(n):
            sess.run({"x": xd}, outputs="device")
        backend.sync()

    loop(20)
    t = time.perf_counter()
    loop(200)
    log(f"{tag}_resident_wall_ms", round((time.perf_counter() - t) * 1e3 / 200, 4))

    def one():
        sess.run({"x": xd}, outputs="device")
        backend.sync()

    log(f"{tag}_resident_single_wall_ms", round(wall_median(one), 4))
    log(f"{tag}_host_io_ms", round(wall_median(lambda: sess.run({"x": x})), 4))

    # Where host in/out time goes: upload, compute (device in and out), read-back.
    def upload():
        backend.to_device(x)
        backend.sync()

    out = sess.run({"x": xd}, outputs="device")["y"]
    log(f"{tag}_upload_ms", round(wall_median(upload), 4))
    log(f"{tag}_readback_ms", round(wall_median(out.numpy), 4))
    host, other = np.empty(out.nbytes, np.uint8), np.ones(out.nbytes, np.uint8)
    log(f"{tag}_host_memcpy_ms", round(wall_median(lambda: np.copyto(host, other)), 4))


def candidates(layer: str, tag: str) -> list[str]:
    """conv_direct blockings to try per ESPCN layer: tx,ty,py,ocv,cc4[,f16]."""
    if layer == "conv0":  # 1 input channel: scalar input path, 64 output channels
        shapes = [(16, 4), (32, 2), (64, 1), (16, 8), (32, 4)]
        blocks = [(1, 4, 1), (1, 8, 1), (1, 16, 1), (2, 4, 1), (2, 8, 1), (2, 16, 1), (4, 4, 1)]
    elif layer == "conv1":  # 64 -> 32
        shapes = [(16, 4), (32, 2), (64, 1), (16, 8), (32, 4)]
        blocks = [
            (2, 4, 1),
            (2, 8, 1),
            (4, 4, 1),
            (4, 2, 1),
            (2, 4, 2),
            (4, 4, 2),
            (8, 4, 1),
            (8, 2, 1),
        ]
    else:  # 32 -> 9: 3 vec4 of output channels
        shapes = [(16, 4), (32, 2), (64, 1), (16, 8), (32, 4)]
        blocks = [(py, 3, cc) for py in (2, 4, 8) for cc in (1, 2)]
    suffix = ",f16" if tag == "fp16acc" else ""
    return [f"{tx},{ty},{py},{ocv},{cc}{suffix}" for tx, ty in shapes for py, ocv, cc in blocks]


def gpu_times(kernel, feeds, runs=60, warm_s=0.3):
    """GPU timestamps of `runs` back-to-back runs, after `warm_s` of the same load (clocks up)."""
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        for _ in range(10):
            kernel.run(feeds)
        _ = kernel.timings  # drain: the read-back waits for those runs
    kernel.timing_history.clear()
    for _ in range(runs):
        kernel.run(feeds)
    _ = kernel.timings
    return list(kernel.timing_history)


def sweep(weights, x):
    """Time conv_direct blockings per layer with GPU timestamps; the best per layer."""
    from tinydl.backends import CompileOptions, get_backend
    from tinydl.errors import DeviceLostError

    backend = get_backend("webgpu")
    graph = espcn_graph(weights, H, W)
    feeds = {"x": backend.to_device(x)}
    best = {}
    for precision, tag in (("fp32", "fp32"), ("fp16", "fp16acc")):
        times: dict[str, dict[str, float | str]] = {}
        for layer in ("conv0", "conv1", "conv2"):
            for c in candidates(layer, tag):
                extra = {"timing": "ops", "conv_configs": {layer: c}}
                try:
                    kernel = backend.compile(graph, CompileOptions(precision, extra=extra))
                    runs = gpu_times(kernel, feeds, 40, 0.25)
                    ms = statistics.median(r[int(layer[-1])][1] for r in runs) * 1e3
                    times.setdefault(layer, {})[c] = round(ms, 4)
                except DeviceLostError as exc:  # a blocking that hangs the GPU: go on
                    times.setdefault(layer, {})[c] = repr(exc)[:120]
                    feeds = {"x": backend.to_device(x)}
                except Exception as exc:  # noqa: BLE001 - a blocking that does not fit
                    times.setdefault(layer, {})[c] = repr(exc)[:120]
        log(f"sweep_{tag}_ms", times)
        chosen = {}
        for layer, t in times.items():
            ok = {c: v for c, v in t.items() if isinstance(v, float)}
            if ok:
                chosen[layer] = min(ok, key=ok.get)
        log(f"sweep_{tag}_best", {k: (v, times[k][v]) for k, v in chosen.items()})
        best[tag] = chosen
    return best


INIT_CODE = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r}); sys.path.insert(0, {models!r})
import numpy as np, tinydl as td
from common import weights
sys.path.insert(0, {tools!r})
from bench_webgpu_espcn import espcn_graph
x = np.random.default_rng(1).random((1, 1, 360, 640), dtype=np.float32)
out = {{}}
for label in ("cold", "warm_pipeline_cache"):
    t = time.perf_counter()
    g = espcn_graph(weights())
    t_load = time.perf_counter()
    sess = td.compile(g, backends=("webgpu",), precision={precision!r}, strict=True)
    t_compile = time.perf_counter()
    sess.run({{"x": x}})
    t_run = time.perf_counter()
    ((*_, k),) = sess.partitions
    from tinydl.backends.webgpu.context import get_context
    out[label] = dict(
        total_s=t_run - t, load_s=t_load - t, compile_s=t_compile - t_load,
        first_run_s=t_run - t_compile,
        **{{"kernel_" + a: b for a, b in k.profile()["init"].items()}},
        device_s=get_context().stats["device_s"] if label == "cold" else 0.0,
    )
out["import_s"] = t - t0
print("INIT" + json.dumps(out))
"""


def init_costs(peers: Path):
    for precision in ("fp32", "fp16"):
        for proc in ("process1", "process2"):
            code = INIT_CODE.format(
                root=str(ROOT),
                models=str(peers / "models"),
                tools=str(ROOT / "tools"),
                precision=precision,
            )
            r = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
            )
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("INIT")]
            if not line:
                log(f"init_{precision}_{proc}_error", r.stderr[-500:])
                continue
            data = json.loads(line[0][4:])
            rounded = {
                k: ({a: round(b, 4) for a, b in v.items()} if isinstance(v, dict) else round(v, 4))
                for k, v in data.items()
            }
            log(f"init_{precision}_{proc}", rounded)


# -- peers ---------------------------------------------------------------------------------------


def torch_runs(weights, x, ref):
    import torch
    import torch.nn as nn

    class ESPCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 64, 5, padding=2)
            self.c2 = nn.Conv2d(64, 32, 3, padding=1)
            self.c3 = nn.Conv2d(32, R * R, 3, padding=1)
            self.ps = nn.PixelShuffle(R)

        def forward(self, x):
            x = torch.tanh(self.c1(x))
            x = torch.tanh(self.c2(x))
            return self.ps(self.c3(x))

    def cuda_time(fn, warm=10, runs=50):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(runs):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    log("torch", f"{torch.__version__} on {torch.cuda.get_device_name()}")
    torch.backends.cudnn.benchmark = True
    m = ESPCN().cuda().eval()
    with torch.no_grad():
        for conv, (w, b) in zip((m.c1, m.c2, m.c3), weights, strict=True):
            conv.weight.copy_(torch.from_numpy(w))
            conv.bias.copy_(torch.from_numpy(b))
    xt = torch.from_numpy(x).cuda()
    with torch.inference_mode():
        log("torch_allow_tf32_default", torch.backends.cudnn.allow_tf32)
        log("torch_eager_fp32_maxerr", max_err(m(xt).cpu().numpy()[0], ref))
        log("torch_eager_fp32_ms", round(cuda_time(lambda: m(xt)), 4))
        torch.backends.cudnn.allow_tf32 = False
        log("torch_eager_fp32_strict_ms", round(cuda_time(lambda: m(xt)), 4))
        torch.backends.cudnn.allow_tf32 = True
        mh = m.half().to(memory_format=torch.channels_last)
        xh = xt.half().to(memory_format=torch.channels_last)
        log("torch_eager_fp16_maxerr", max_err(mh(xh).float().cpu().numpy()[0], ref))
        log("torch_eager_fp16_ms", round(cuda_time(lambda: mh(xh)), 4))


def ncnn_runs(peers: Path, x, ref):
    import ncnn

    log("ncnn_gpu_count", ncnn.get_gpu_count())
    for fp16 in (False, True):
        net = ncnn.Net()
        net.opt.use_vulkan_compute = True
        net.opt.use_fp16_packed = fp16
        net.opt.use_fp16_storage = fp16
        net.opt.use_fp16_arithmetic = fp16
        net.load_param(str(peers / "models" / "espcn_x3.param"))
        net.load_model(str(peers / "models" / "espcn_x3.bin"))
        ncnn_one(ncnn, net, "ncnn_vulkan_" + ("fp16" if fp16 else "fp32"), x, ref)


def ncnn_one(ncnn, net, tag, x, ref):
    def run():
        ex = net.create_extractor()
        ex.input("data", ncnn.Mat(np.ascontiguousarray(x[0])))
        _, out = ex.extract("out")
        return np.array(out)

    log(f"{tag}_maxerr", max_err(run(), ref))
    log(f"{tag}_host_io_ms", round(wall_median(run, 10, 30), 4))


def litert_runs(peers: Path, x, ref):
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    cm = CompiledModel.from_file(
        str(peers / "models" / "espcn_x3_360p.tflite"), hardware_accel=HardwareAccelerator.GPU
    )
    log("litert_gpu_fully_accelerated", cm.is_fully_accelerated())
    ib, ob = cm.create_input_buffers(0), cm.create_output_buffers(0)
    xin = x.transpose(0, 2, 3, 1).copy()

    def run():
        ib[0].write(xin)
        cm.run_by_index(0, ib, ob)
        return ob[0].read(xin.size * R * R, np.float32)

    log("litert_gpu_maxerr", max_err(run().reshape(H * R, W * R), ref[0]))
    log("litert_gpu_host_io_ms", round(wall_median(run, 10, 30), 4))


def guarded(name, fn, *args):
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - one missing peer must not stop the others
        import traceback

        traceback.print_exc()
        log(f"{name}_error", repr(exc)[:300])


def table() -> str:
    g = RESULTS.get

    def ms(key):
        v = g(key)
        return f"{v:.3f}" if isinstance(v, float) else "—"

    def ratio(a, b):
        va, vb = g(a), g(b)
        return f"{va / vb:.2f}×" if isinstance(va, float) and isinstance(vb, float) else "—"

    t = "tinydl webgpu"
    rows = []
    for tag, what in (
        ("fp32", "fp32"),
        ("fp16", "fp16 (fp32 accumulation)"),
        ("fp16acc", "fp16 (fp16 accumulation)"),
    ):
        key = f"tinydl_webgpu_{tag}"
        rows += [
            (f"{t} {what}, GPU-resident (GPU timestamps)", f"{key}_resident_gpu_ms"),
            (f"{t} {what}, GPU-resident (wall, pipelined)", f"{key}_resident_wall_ms"),
            (f"{t} {what}, GPU-resident (wall, run + sync)", f"{key}_resident_single_wall_ms"),
            (f"{t} {what}, host in/out", f"{key}_host_io_ms"),
        ]
    rows += [
        ("PyTorch eager fp32 (cuDNN, TF32 allowed: the default)", "torch_eager_fp32_ms"),
        ("PyTorch eager fp32 (cuDNN, TF32 off)", "torch_eager_fp32_strict_ms"),
        ("PyTorch eager fp16 (cuDNN, channels_last)", "torch_eager_fp16_ms"),
        ("ncnn Vulkan fp32, host in/out", "ncnn_vulkan_fp32_host_io_ms"),
        ("ncnn Vulkan fp16, host in/out", "ncnn_vulkan_fp16_host_io_ms"),
        ("LiteRT GPU (CompiledModel), host in/out", "litert_gpu_host_io_ms"),
    ]
    lines = ["| engine and mode | ms per frame (median) |", "|---|---:|"]
    lines += [f"| {label} | {ms(key)} |" for label, key in rows]
    lines += [
        "",
        "| target (same run) | ratio | goal |",
        "|---|---:|---:|",
        f"| tinydl fp32 GPU-resident (GPU timestamps) / PyTorch eager fp32 | "
        f"{ratio('tinydl_webgpu_fp32_resident_gpu_ms', 'torch_eager_fp32_ms')} | ≤ 1.0× |",
        f"| tinydl fp32 GPU-resident (wall, pipelined) / PyTorch eager fp32 | "
        f"{ratio('tinydl_webgpu_fp32_resident_wall_ms', 'torch_eager_fp32_ms')} | ≤ 1.0× |",
        f"| tinydl fp16 GPU-resident (GPU timestamps) / PyTorch eager fp32 | "
        f"{ratio('tinydl_webgpu_fp16_resident_gpu_ms', 'torch_eager_fp32_ms')} | ≤ 1.0× |",
        f"| tinydl fp16 (fp16 acc.) GPU-resident (GPU timestamps) / PyTorch eager fp32 | "
        f"{ratio('tinydl_webgpu_fp16acc_resident_gpu_ms', 'torch_eager_fp32_ms')} | ≤ 1.0× |",
    ]
    for tag, what in (("fp32", "fp32"), ("fp16", "fp16"), ("fp16acc", "fp16 (fp16 acc.)")):
        key = f"tinydl_webgpu_{tag}_host_io_ms"
        lines += [
            f"| tinydl {what} host in/out / LiteRT GPU | "
            f"{ratio(key, 'litert_gpu_host_io_ms')} | ≤ 0.5× |",
            f"| tinydl {what} host in/out / ncnn Vulkan fp32 | "
            f"{ratio(key, 'ncnn_vulkan_fp32_host_io_ms')} | ≤ 0.25× |",
        ]
    return "\n".join(lines)


def main():
    global H, W
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", help="folder holding models/ of the peer scripts")
    ap.add_argument("--sweep", action="store_true", help="tune conv blockings first")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="where to write results")
    ap.add_argument("--skip", default="", help="comma list of: torch,ncnn,litert,init")
    ap.add_argument("--size", default=f"{H}x{W}", help="input HxW (peers need 360x640)")
    args = ap.parse_args()
    peers = peers_dir(args.peers)
    sys.path.insert(0, str(peers / "models"))
    from common import espcn_ref, weights

    H, W = (int(v) for v in args.size.split("x"))
    ws = weights()
    x = np.random.default_rng(1).random((1, 1, H, W), dtype=np.float32)
    ref = espcn_ref(x[0], ws).astype(np.float64)
    skip = set(args.skip.split(","))
    best: dict = {}
    if args.sweep:
        guarded("sweep", lambda: best.update(sweep(ws, x)))
    guarded("tinydl", tinydl_runs, ws, x, ref, best)
    if "init" not in skip:
        guarded("init", init_costs, peers)
    if "torch" not in skip:
        guarded("torch", torch_runs, ws, x, ref)
    if "ncnn" not in skip:
        guarded("ncnn", ncnn_runs, peers, x, ref)
    if "litert" not in skip:
        guarded("litert", litert_runs, peers, x, ref)
    text = table()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "results.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        (Path(args.out) / "table.md").write_text(text + "\n")
    print("\n=== TABLE\n" + text)


if __name__ == "__main__":
    main()

"""The cuda backend against PyTorch on the same GPU, in one run.

ESPCN x3 (tinydl/models/espcn_x3.tdl: 1->64 5x5 tanh, 64->32 3x3 tanh, 32->9 3x3, pixel
shuffle) at 640x360 -> 1920x1080 and 1280x720 -> 3840x2160, batch 1 and 8, fp16 and fp32:
tinydl cuda vs PyTorch eager (cuDNN), PyTorch CUDA graph and
torch.compile(mode="max-autotune-no-cudagraphs"). Then PP-OCRv4 det at 960x960 (from the
rapidocr-onnxruntime package) and BlazePose landmark (MediaPipe's TFLite model, exported to
ONNX by tinydl) vs PyTorch eager fp16 through onnx2torch.

Every run is GPU-resident (input and output in device memory). Two figures per peer:
- latency: one run, then wait for it (CUDA events around the call; host overhead included);
- pipelined: the time per run of back-to-back runs (the host issues ahead, the GPU is busy).
Each output is checked against PyTorch fp32 with TF32 off before timing. Ratios are tinydl's
time over the peer's, measured in the same run. The roofline line gives the network's FLOPs,
the bytes a fully fused run must move (input and output once), and the floor they imply on the
GPU (datasheet peaks for H100 SXM / H200; other GPUs print no floor).

    python tools/bench_cuda.py                      # everything (several minutes: autotuning)
    python tools/bench_cuda.py --no-compile --sizes 360p --batches 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"360p": (360, 640), "720p": (720, 1280)}
# name fragment -> (dense fp16 tensor TFLOP/s, fp32 TFLOP/s, memory TB/s), datasheet figures
PEAKS = {"H200": (989.0, 67.0, 4.8), "H100": (989.0, 67.0, 3.35)}


def peaks(name: str):
    return next((v for k, v in PEAKS.items() if k in name), None)


def timed(torch, fn, iters: int, warmup: int = 10) -> tuple[float, float]:
    """(median latency ms, pipelined ms per run)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    lat = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        lat.append(start.elapsed_time(end))
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return statistics.median(lat), start.elapsed_time(end) / iters


def espcn_torch(torch, graph):
    nn = torch.nn
    init = graph.initializers
    model = nn.Sequential(
        nn.Conv2d(1, 64, 5, padding=2),
        nn.Tanh(),
        nn.Conv2d(64, 32, 3, padding=1),
        nn.Tanh(),
        nn.Conv2d(32, 9, 3, padding=1),
        nn.PixelShuffle(3),
    )
    with torch.no_grad():
        for i, conv in ((0, model[0]), (2, model[2]), (4, model[4])):
            k = i // 2 + 1
            conv.weight.copy_(torch.from_numpy(np.array(init[f"conv{k}.weight"])))
            conv.bias.copy_(torch.from_numpy(np.array(init[f"conv{k}.bias"])))
    return model.cuda().eval()


def cuda_graph(torch, fn, x):
    static_in = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = fn(static_in)
    return lambda: (g.replay(), static_out)[1]


def rel(got, ref) -> float:
    got, ref = got.float(), ref.float()
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def runner(sess, name, x):
    """A GPU-resident run: the input is a CuPy view of the torch tensor (made once, no copy)."""
    import cupy

    view = cupy.from_dlpack(x)
    return lambda: sess.run({name: view}, outputs="device")


def espcn_roofline(h, w, batch, name):
    macs = (1 * 64 * 25 + 64 * 32 * 9 + 32 * 9 * 9) * h * w * batch
    flops = 2 * macs
    nbytes = (4 + 9 * 4) * h * w * batch  # fp32 in, fp32 out, once
    p = peaks(name)
    if p is None:
        return f"{flops / 1e9:.2f} GFLOP, {nbytes / 1e6:.1f} MB moved (fused); no peak table"
    tc, f32, bw = p
    floor16 = max(flops / (tc * 1e12), nbytes / (bw * 1e12)) * 1e3
    floor32 = max(flops / (f32 * 1e12), nbytes / (bw * 1e12)) * 1e3
    return (
        f"{flops / 1e9:.2f} GFLOP, {nbytes / 1e6:.1f} MB moved (fused); floor "
        f"{floor16 * 1e3:.1f} us fp16 tensor cores, {floor32 * 1e3:.1f} us fp32 "
        f"({tc:.0f}/{f32:.0f} TFLOP/s, {bw} TB/s)"
    )


def bench_espcn(torch, args, results, name):
    import tinydl as td

    graph = td.load(ROOT / "tinydl/models/espcn_x3.tdl")
    ref_model = espcn_torch(torch, graph)
    for size in args.sizes:
        h, w = SIZES[size]
        for batch in args.batches:
            x32 = torch.rand(batch, 1, h, w, device="cuda")
            torch.backends.cudnn.allow_tf32 = False
            with torch.no_grad():
                ref = ref_model(x32)
            torch.backends.cudnn.allow_tf32 = True  # PyTorch's default, as users run it
            print(f"\nESPCN x3 {w}x{h} -> {3 * w}x{3 * h}, batch {batch}: "
                  f"{espcn_roofline(h, w, batch, name)}", flush=True)  # fmt: skip
            for precision in args.precisions:
                rows = espcn_rows(torch, args, graph, precision, x32, ref)
                report(rows, "tinydl cuda", f"  {precision}")
                for peer, (lat, pipe, err) in rows.items():
                    results.append(
                        {"model": "espcn_x3", "size": size, "batch": batch,
                         "precision": precision, "peer": peer, "latency_ms": lat,
                         "pipelined_ms": pipe, "rel_err": err}
                    )  # fmt: skip


def espcn_rows(torch, args, graph, precision, x32, ref) -> dict:
    import tinydl as td

    dtype = torch.float16 if precision == "fp16" else torch.float32
    tol = 1e-2 if precision == "fp16" else 1e-4
    rows = {}
    t0 = time.perf_counter()
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    out = sess.run({"y": x32}, outputs="device")["hr"]
    print(f"  {precision}: tinydl compile + first run {(time.perf_counter() - t0) * 1e3:.0f} ms")
    err = rel(torch.from_dlpack(out), ref)
    assert err <= tol, f"tinydl {precision}: error {err:.2e} > {tol}"

    rows["tinydl cuda"] = (*timed(torch, runner(sess, "y", x32), args.iters), err)
    model = espcn_torch(torch, graph).to(dtype)
    x = x32.to(dtype)
    with torch.no_grad():
        rows["torch eager"] = (*timed(torch, lambda: model(x), args.iters), rel(model(x), ref))
        graphed = cuda_graph(torch, model, x)
        rows["torch CUDA graph"] = (*timed(torch, graphed, args.iters), rel(graphed(), ref))
        if args.compile:
            t1 = time.perf_counter()
            compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
            err = rel(compiled(x), ref)
            print(f"  (torch.compile took {time.perf_counter() - t1:.0f} s)", flush=True)
            rows["torch.compile"] = (*timed(torch, lambda: compiled(x), args.iters), err)
    return rows


def report(rows: dict, ours: str, title: str) -> None:
    """One line per peer; ratios are ours over the peer's time."""
    print(title)
    mine = rows[ours]
    for peer, (lat, pipe, err) in rows.items():
        ratio = ""
        if peer != ours:
            ratio = f"   ours/peer {mine[0] / lat:.2f}x latency, {mine[1] / pipe:.2f}x pipelined"
        print(
            f"    {peer:20s} {lat * 1e3:8.1f} us latency {pipe * 1e3:8.1f} us pipelined"
            f"  err {err:.1e}{ratio}",
            flush=True,
        )


def constants_as_initializers(model):
    """PP-OCR's weights are Constant nodes; onnx2torch reads weights from initializers."""
    from onnx import helper

    keep = []
    for node in model.graph.node:
        value = next((a for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and value is not None:
            tensor = helper.get_attribute_value(value)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model


def bench_det(torch, args, results):
    import onnx

    import tinydl as td

    try:
        import rapidocr_onnxruntime
        from onnx2torch import convert
    except ImportError as exc:
        print(f"\nPP-OCRv4 det skipped: {exc}")
        return
    path = Path(rapidocr_onnxruntime.__file__).parent / "models/ch_PP-OCRv4_det_infer.onnx"
    x32 = torch.rand(1, 3, 960, 960, device="cuda")
    model = convert(constants_as_initializers(onnx.load(str(path)))).cuda().eval()
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        ref = model(x32)
    torch.backends.cudnn.allow_tf32 = True
    print("\nPP-OCRv4 det 960x960, batch 1", flush=True)
    rows = {}
    for precision in ("fp32", "fp16"):
        sess = td.compile(td.load(path), backends=("cuda",), precision=precision, strict=True)
        out = sess.run({"x": x32}, outputs="device")
        (y,) = out.values()
        err = rel(torch.from_dlpack(y), ref)
        rows[f"tinydl cuda {precision}"] = (*timed(torch, runner(sess, "x", x32), args.iters), err)
    half = model.half()
    xh = x32.half()
    with torch.no_grad():
        err = rel(half(xh), ref)
        rows["torch eager fp16"] = (*timed(torch, lambda: half(xh), args.iters), err)
    report(rows, "tinydl cuda fp16", "  (ratios: tinydl fp16 over each)")
    for name, (lat, pipe, err) in rows.items():
        results.append({"model": "ppocrv4_det", "size": "960x960", "batch": 1, "peer": name,
                        "latency_ms": lat, "pipelined_ms": pipe, "rel_err": err})  # fmt: skip


def chain_sweep(torch, args) -> None:
    """Pipelined time of ESPCN x3 at 360p fp16 per chain configuration (the cuda backend's
    "chain_tile" option; "off" turns the chain fusion off; a tile followed by "@mma" keeps
    mma.sync where Hopper's wgmma would run: chain_wgmma False; by "@KEY=VALUE", that cuda
    backend option too), the configurations alternated over --rounds rounds in one process."""
    import tinydl as td

    graph = td.load(ROOT / "tinydl/models/espcn_x3.tdl")
    x = torch.rand(1, 1, 360, 640, device="cuda")
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        ref = espcn_torch(torch, graph)(x)
    sessions = {}
    for cfg in args.chain_sweep.split(";"):
        tile, *kinds = cfg.split("@")
        opts = {"chain_fusion": False} if tile == "off" else {"chain_tile": tile}
        for kind in kinds:
            key, _, value = kind.partition("=")
            if key == "mma":
                opts["chain_wgmma"] = False
            else:  # another cuda backend option, KEY=VALUE
                opts[key] = {"true": True, "false": False}.get(value.lower(), value)
        sess = td.compile(
            graph,
            backends=("cuda",),
            precision="fp16",
            strict=True,
            backend_options={"cuda": opts},
        )
        err = rel(torch.from_dlpack(sess.run({"y": x}, outputs="device")["hr"]), ref)
        if err > 1e-2:
            print(f"  chain {cfg:18s} WRONG: error {err:.1e} against PyTorch fp32", flush=True)
            continue
        sessions[cfg] = (sess, err)
    for r in range(args.rounds):
        for cfg, (sess, err) in sessions.items():
            _, pipe = timed(torch, runner(sess, "y", x), args.iters)
            print(f"  round {r + 1} chain {cfg:18s} {pipe * 1e3:7.1f} us pipelined  err {err:.1e}",
                  flush=True)  # fmt: skip


def bench_pose(torch, args, results):
    """BlazePose landmark (MediaPipe's TFLite model) vs PyTorch eager fp16: the model goes to
    PyTorch as tinydl's own ONNX export of it (tinydl.exporters.onnx) through onnx2torch."""
    from fetch_test_models import mediapipe_root

    import tinydl as td
    from tinydl.exporters.onnx import to_onnx

    try:
        from onnx2torch import convert

        graph = td.load(
            mediapipe_root() / "mediapipe/modules/pose_landmark/pose_landmark_full.tflite"
        )
    except Exception as exc:  # noqa: BLE001 - any missing piece: say which and go on
        print(f"\nBlazePose landmark skipped: {exc}")
        return
    model = convert(to_onnx(graph)).cuda().eval()
    x32 = torch.rand(1, 256, 256, 3, device="cuda")
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        ref = model(x32)
    torch.backends.cudnn.allow_tf32 = True
    first = ref[0] if isinstance(ref, list | tuple) else ref
    print("\nBlazePose landmark (full) 256x256, batch 1 (error of the landmarks)", flush=True)
    rows = {}
    name = graph.inputs[0].name
    for precision in ("fp32", "fp16"):
        sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
        out = sess.run({name: x32}, outputs="device")
        err = rel(torch.from_dlpack(next(iter(out.values()))), first)
        rows[f"tinydl cuda {precision}"] = (*timed(torch, runner(sess, name, x32), args.iters), err)
    half = model.half()
    xh = x32.half()
    with torch.no_grad():
        got = half(xh)
        err = rel(got[0] if isinstance(got, list | tuple) else got, first)
        rows["torch eager fp16"] = (*timed(torch, lambda: half(xh), args.iters), err)
    report(rows, "tinydl cuda fp16", "  (ratios: tinydl fp16 over each)")
    for peer, (lat, pipe, err) in rows.items():
        results.append(
            {"model": "blazepose_landmark_full", "size": "256x256", "batch": 1, "peer": peer,
             "latency_ms": lat, "pipelined_ms": pipe, "rel_err": err}
        )  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="360p,720p", help="ESPCN inputs: 360p, 720p (default both)")
    ap.add_argument("--batches", default="1,8", help="batch sizes (default 1,8)")
    ap.add_argument("--precisions", default="fp16,fp32")
    ap.add_argument("--iters", type=int, default=100, help="timed runs per figure (default 100)")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="skip torch.compile (its autotuning takes minutes)")  # fmt: skip
    ap.add_argument(
        "--no-det",
        dest="det",
        action="store_false",
        help="skip PP-OCRv4 det and BlazePose landmark",
    )
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--rounds", type=int, default=1, help="--chain-sweep rounds (default 1)")
    ap.add_argument(
        "--chain-sweep",
        nargs="?",
        const="16,32,384,1;16,32,384,9;18,34,384,9;18,34,512,9",
        metavar="TH,TW,THREADS,UNROLL;...",
        help="only check and time the fused ESPCN kernel at 360p fp16 for each tile "
        "configuration (chain_tile values, TILE@mma for mma.sync instead of wgmma, "
        "TILE@KEY=VALUE for another backend option, or off)",
    )
    args = ap.parse_args(argv)
    args.sizes = args.sizes.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.precisions = args.precisions.split(",")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    from tinydl.backends import get_backend

    backend = get_backend("cuda")
    if not backend.available():
        print(f"cuda backend unavailable: {backend.unavailable_reason()}", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    print(f"GPU: {backend.devices()[0]}; PyTorch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}", flush=True)  # fmt: skip
    if args.chain_sweep:
        chain_sweep(torch, args)
        return 0
    results: list[dict] = []
    bench_espcn(torch, args, results, name)
    if args.det:
        bench_det(torch, args, results)
        bench_pose(torch, args, results)
    if args.json:
        args.json.write_text(json.dumps({"gpu": name, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

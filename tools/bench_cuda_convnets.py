"""Convnets on the cuda backend against PyTorch on the same GPU, GPU-resident, batch 1 and 8: tinydl
fp32, fp16 with convolutions on CUDA cores (conv_tensor_cores off) and on tensor cores (the
default), PyTorch fp16 eager and CUDA graph (channels_last, cuDNN). With `--precision tf32`:
tinydl fp32 and tf32 against PyTorch fp32 with TF32 allowed (its default for convolutions);
with `--precision fp32`: tinydl fp32 with convolutions on CUDA cores and on tensor cores
(3xTF32, the default) against PyTorch in true fp32 (TF32 off).
Models from tools/zoo.py (seeded random weights, conditioned), built here with
torchvision/timm and exported to ONNX once; every tinydl output is checked against
onnxruntime (CPU, fp32) before timing.

    python tools/bench_cuda_convnets.py [--models resnet18,tv:densenet121,timm:ghostnet_100]
                                        [--batches 1,8] [--precision fp16|tf32|fp32]

A model is a tools/zoo.py name, `tv:NAME` (a torchvision classifier) or `timm:NAME` (a timm
model), at 224x224. A model tinydl cannot run, or whose fp32 output is off, gets a row saying
so and the run goes on; the last line is the geometric mean of tensor cores / torch graph.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import zoo  # noqa: E402
from bench_cuda import cuda_graph  # noqa: E402

import tinydl as td  # noqa: E402


def median_ms(fn, sync, runs: int = 50) -> float:
    for _ in range(5):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


# The 13 architectures of the first survey (torchvision and timm, 224x224).
THIRTEEN = (
    "resnet18,timm:resnet50,tv:densenet121,timm:hrnet_w18_small,timm:mobilenetv3_large_100,"
    "efficientnet_b0,timm:ghostnet_100,timm:regnety_004,mobilenet_v2,mobilenet_v3_small,"
    "tv:shufflenet_v2_x1_0,tv:resnext50_32x4d,timm:convnext_atto"
)


def set_tf32(on: bool) -> None:
    """Whether PyTorch's convolutions and matmuls may use TF32."""
    import torch

    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on


def build(name: str):
    if name in zoo.MODELS:
        return zoo.MODELS[name]()
    kind, _, arch = name.partition(":")
    if kind == "tv":
        return zoo._torchvision(arch, 224)()
    if kind == "timm":
        return zoo._timm(arch, 224)()
    raise SystemExit(f"unknown model {name!r}: a tools/zoo.py name, tv:NAME or timm:NAME")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=THIRTEEN, help="comma-separated (default: 13 nets)")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--onnx-dir", default=".zoo", type=Path)
    ap.add_argument(
        "--precision",
        choices=("fp16", "tf32", "fp32"),
        default="fp16",
        help="fp16 (default): against PyTorch fp16; tf32: against PyTorch fp32, TF32 allowed; "
        "fp32: against PyTorch fp32, TF32 off",
    )
    args = ap.parse_args()
    # PyTorch at tf32 as by default (cuDNN convolutions on TF32); fp16 needs neither.
    set_tf32(args.precision == "tf32")
    p = args.precision
    peer = {"fp16": "torch fp16", "tf32": "torch fp32 (TF32)", "fp32": "torch fp32"}[p]
    first = "fp32, CUDA cores" if p == "fp32" else "tinydl fp32"
    cores = f" {p}, CUDA cores |" if p == "fp16" else ""
    print(
        f"| model | batch | {first} |{cores} {p}, tensor cores "
        f"| {peer} eager | {peer} graph | tensor cores / torch graph | error {p} | error torch |"
    )
    print("| --- | ---: | ---: |" + " ---: |" * (7 if p == "fp16" else 6))
    ratios: dict[int, list[float]] = {}
    for name in args.models.split(","):
        try:
            one(name, args, ratios)
        except Exception as exc:  # noqa: BLE001 - a row says why; the others still run
            print(f"| {name} | | {type(exc).__name__}: {str(exc)[:120]} |" + " |" * 7)
            sys.stdout.flush()
    for batch, r in ratios.items():
        geo = float(np.exp(np.mean(np.log(r))))
        print(f"\ngeomean tensor cores / torch graph, batch {batch}: {geo:.2f}x over {len(r)}")
    return 0


def prepare(name: str, onnx_dir: Path):
    """The model in fp32 on the GPU (eval, conditioned), its example input and input names, and
    its ONNX file with a dynamic batch (exported once into `onnx_dir`)."""
    import torch

    torch.manual_seed(zoo.SEED)
    model, example, names = build(name)
    zoo._condition(model, tuple(torch.from_numpy(np.asarray(a)) for a in example))
    model = model.eval()
    path = onnx_dir / f"{name.replace(':', '_')}_dyn.onnx"
    if not path.exists():
        onnx_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, tuple(torch.from_numpy(np.asarray(a)) for a in example),
                str(path), input_names=names, opset_version=17, dynamo=False,
                dynamic_axes={names[0]: {0: "n"}},
            )  # fmt: skip
    return model.cuda(), example, names, path


def torch_ms(peer, x) -> tuple[float, float]:
    """PyTorch's median ms for `peer(x)`: eager, and replaying a CUDA graph of it."""
    import torch

    sync = torch.cuda.synchronize
    with torch.no_grad():
        eager = median_ms(lambda: peer(x), sync)
        return eager, median_ms(cuda_graph(torch, peer, x), sync)


def one(name: str, args, ratios: dict[int, list[float]]) -> None:
    import cupy as cp
    import torch

    model, example, names, path = prepare(name, args.onnx_dir)
    graph = td.load(path)
    for batch in [int(b) for b in args.batches.split(",")]:
        x = np.repeat(np.asarray(example[0]), batch, axis=0)
        xt = torch.from_numpy(x).cuda()
        import onnxruntime as ort

        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {names[0]: x}
        )[0]
        row = [name, str(batch)]
        err = None
        p = args.precision
        first = ("fp32", p != "fp32")  # at fp32: its convolutions on CUDA cores, then 3xTF32
        runs = [first, *([(p, False)] if p == "fp16" else []), (p, True)]
        for precision, tc in runs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sess = td.compile(
                    graph, backends=("cuda",), precision=precision,
                    backend_options={"cuda": {"conv_tensor_cores": tc}},
                )  # fmt: skip
            xd = cp.asarray(x)
            out = sess.run({names[0]: xd}, outputs="device")
            got = cp.asnumpy(next(iter(out.values())))
            e = float(np.abs(got - ref).max() / np.abs(ref).max())
            if precision == p and tc:
                err = e
            if precision == "fp32" and e > 1e-3:
                raise ValueError(f"tinydl fp32 off by {e:.2e} from onnxruntime")
            feed = {names[0]: xd}
            ms = median_ms(
                lambda s=sess, f=feed: s.run(f, outputs="device"),
                cp.cuda.Device().synchronize,
            )
            row.append(f"{ms:.3f}")
        peer = (model.half() if p == "fp16" else model).to(memory_format=torch.channels_last)
        xh = (xt.half() if p == "fp16" else xt).to(memory_format=torch.channels_last)
        with torch.no_grad():
            theirs = peer(xh).float().cpu().numpy()
        torch_err = float(np.abs(theirs - ref).max() / np.abs(ref).max())
        eager, replay = torch_ms(peer, xh)
        model = peer.float().to(memory_format=torch.contiguous_format)
        tc_ms = float(row[-1])
        row += [f"{eager:.3f}", f"{replay:.3f}", f"{tc_ms / replay:.2f}x", f"{err:.1e}"]
        row.append(f"{torch_err:.1e}")
        ratios.setdefault(batch, []).append(tc_ms / replay)
        print("| " + " | ".join(row) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())

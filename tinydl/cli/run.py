"""`tinydl run`: run a model on .npy / image inputs (or random data), print and save its
outputs, and time it."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from tinydl.cli.common import (
    MODEL_HELP,
    _compile,
    _count,
    _Formatter,
    _parse_dims,
    _positive,
    add_backend_options,
)
from tinydl.errors import InvalidInputError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a model on .npy / image inputs, print and save outputs",
        formatter_class=_Formatter,
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

"""`tinydl run`: run a model on .npy / image inputs (or random data), print and save its
outputs, and time it."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
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
    add_deprecated,
    output_file,
)
from tinydl.errors import InvalidInputError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
OUTPUT_SUFFIXES = (".npy", ".json")


def _size(text: str) -> tuple[int, int]:
    """WxH as (width, height)."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 1 or int(h) < 1:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 224x224, got {text!r}")
    return int(w), int(h)


def _floats(text: str) -> tuple[float, ...]:
    """Comma-separated finite numbers."""
    import math

    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers such as 0.5,0.5,0.5, got {text!r}")
    return values


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a model on .npy / image inputs, print and save outputs",
        formatter_class=_Formatter,
        description="Run a model once and print each output's dtype, shape and min/max/mean. "
        "Inputs come from .npy files or images (PNG/JPEG/...: RGB, or gray or RGBA by the "
        "input's channels; resized to --resize, else to the input's fixed H,W; scaled to "
        "[0,1], then (x - mean) / std per channel with --mean/--std; channels first for an "
        "NCHW input; batch dim added). Without --input, fully-known inputs are filled with "
        "seeded random data. -o FILE saves the outputs: FILE.npy holds the one output of a "
        "single-output model, FILE.json every output as {name: {dtype, shape, data}}; "
        "--out-dir DIR saves each output as DIR/NAME.npy.",
        epilog="examples:\n  tinydl run model.onnx\n"
        "  tinydl run model.onnx --input image=cat.png --out-dir out/\n"
        "  tinydl run resnet.onnx -i cat.png --resize 224x224 --mean 0.485,0.456,0.406 \\\n"
        "      --std 0.229,0.224,0.225 -o logits.npy\n"
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
    p.add_argument(
        "--resize",
        metavar="WxH",
        type=_size,
        help="resize image inputs to W x H pixels (default: the input's fixed size)",
    )
    p.add_argument(
        "--mean",
        metavar="A,B,C",
        type=_floats,
        help="subtract from image inputs (in [0,1]) per channel, in the order fed (default: 0)",
    )
    p.add_argument(
        "--std",
        metavar="A,B,C",
        type=_floats,
        help="divide image inputs by, per channel, after --mean (default: 1)",
    )
    p.add_argument(
        "--bgr", action="store_true", help="feed image inputs as BGR (default: RGB), e.g. OpenCV's"
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="save the outputs to FILE.npy (a single-output model) or FILE.json (every output)",
    )
    p.add_argument("--out-dir", metavar="DIR", help="save each output as DIR/NAME.npy")
    add_deprecated(p, "--output-dir", "out_dir", "--out-dir")
    add_backend_options(p)
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16", "tf32", "auto"),
        default="fp32",
        help="fp32 (default); fp16: GPU backends store intermediate values in fp16; tf32: "
        "float32 values, cuda convolutions on tf32 tensor cores (PyTorch's default); auto: fp16 "
        "except the values that need float32, decided on this run's inputs (tinydl.compile's "
        "precision='auto')",
    )
    p.add_argument(
        "--partition",
        choices=("greedy", "cost"),
        default="greedy",
        help="greedy (default): each node to the first backend that runs it; cost: to the "
        "first backend or its fallback, whichever the measured cost model predicts faster, "
        "copies included",
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

    output, out_dir = output_file(args.output, OUTPUT_SUFFIXES, args.out_dir)
    graph = tinydl.load(args.model)
    specs = {v.name: v for v in graph.inputs}
    files = dict(_assign(args.input, specs, "--input", "FILE"))
    shape_args = _assign(args.shape, specs, "--shape", "DIMS")
    shapes = {name: _parse_dims(name, text) for name, text in shape_args}
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise InvalidInputError(f"--out-dir {out_dir}: is a file, expected a folder")
    if output is not None:
        if not Path(output).parent.is_dir():
            raise InvalidInputError(f"-o {output}: folder {Path(output).parent} does not exist")
        if Path(output).suffix.lower() == ".npy" and len(graph.outputs) != 1:
            raise InvalidInputError(
                f"-o {output}: a .npy file holds one array, but the model has "
                f"{len(graph.outputs)} outputs: use -o FILE.json or --out-dir DIR"
            )
    if args.std and 0 in args.std:
        raise InvalidInputError(f"--std {','.join(map(str, args.std))}: a zero would divide by 0")
    images = [n for n in files if Path(files[n]).suffix.lower() in IMAGE_SUFFIXES]
    prep = Preprocess(args.resize, args.mean, args.std, args.bgr)
    if prep.given() and not images:
        raise InvalidInputError(
            f"{prep.given()}: for image inputs only, and no --input is an image"
        )

    def compile_for(calibration=None):
        return _compile(
            graph,
            args.backends,
            strict=args.strict,
            precision=args.precision,
            optimize=args.optimize,
            calibration=calibration,
            partition=args.partition,
        )

    # precision auto and partition cost are decided on this run's inputs: compiled once they
    # are made; otherwise first, so that a bad backend or model is reported before anything else.
    calibrated = args.precision == "auto" or args.partition == "cost"
    session = None if calibrated else compile_for()
    feeds: dict[str, Any] = {}
    generated = []
    rng = np.random.default_rng(args.seed)
    for name, spec in specs.items():
        if name in files:
            layout = graph.metadata.get("input_layout", "NCHW")
            feeds[name] = _read_input(name, Path(files[name]), spec, shapes.get(name), layout, prep)
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
    if session is None:
        session = compile_for(feeds)

    outputs = session.run(feeds)
    _print_outputs(outputs)
    if output is not None:
        _write_outputs(outputs, Path(output))
        print(f"saved {len(outputs)} output(s) to {output}")
    if out_dir is not None:
        saved = _save_outputs(outputs, Path(out_dir))
        print(f"saved {len(saved)} output(s) to {out_dir}: {', '.join(saved)}")
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


@dataclass(frozen=True)
class Preprocess:
    """What --resize, --mean, --std and --bgr ask of image inputs."""

    size: tuple[int, int] | None = None  # (width, height)
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    bgr: bool = False

    def given(self) -> str:
        """The options given, as the user spelled them ("" when none)."""
        flags = zip(("--resize", "--mean", "--std", "--bgr"), vars(self).values(), strict=True)
        return ", ".join(flag for flag, value in flags if value)


def _read_input(
    name: str,
    path: Path,
    spec,
    shape: tuple[int, ...] | None,
    layout: str = "NCHW",
    prep: Preprocess | None = None,
):
    import numpy as np

    if not path.is_file():
        raise InvalidInputError(f"input '{name}': {path}: no such file")
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return _read_image(name, path, spec, shape, layout, prep or Preprocess())
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


def _read_image(
    name: str,
    path: Path,
    spec,
    shape: tuple[int, ...] | None,
    layout: str = "NCHW",
    prep: Preprocess | None = None,
):
    """An image as a 4-D float input in [0, 1] (or uint8), NCHW or NHWC as the model takes it,
    after `prep` (resize, BGR order, (x - mean) / std)."""
    prep = prep or Preprocess()
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
    if prep.size is not None:
        if size is not None and size != prep.size:
            raise InvalidInputError(
                f"input '{name}' is {spec.describe()}: it takes {size[0]}x{size[1]} images, "
                f"not --resize {prep.size[0]}x{prep.size[1]}"
            )
        size = prep.size
    if prep.bgr and channels == 1:
        raise InvalidInputError(f"input '{name}' takes gray images: --bgr needs 3 or 4 channels")
    if dtype == "uint8" and (prep.mean or prep.std):
        raise InvalidInputError(
            f"input '{name}' is {spec.describe()}: uint8 pixels are fed as they are, "
            "without --mean/--std"
        )
    pixels = read_image(path, channels, size)
    if prep.bgr:
        pixels = pixels[..., [2, 1, 0, 3][:channels]]
    return image_to_tensor(pixels[None], layout=layout, mean=prep.mean, std=prep.std, dtype=dtype)


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


def _write_outputs(outputs: dict, path: Path) -> None:
    """-o FILE: .npy for the one output of a model, .json for every output."""
    import json

    import numpy as np

    if path.suffix.lower() == ".npy":
        (value,) = outputs.values()
        np.save(path, np.asarray(value))
        return
    doc = {}
    for name, value in outputs.items():
        array = np.asarray(value)
        doc[name] = {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.tolist()}
    # NaN and Infinity are written as JavaScript spells them (Python's json and JS read them).
    path.write_text(json.dumps(doc) + "\n", encoding="utf-8")


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

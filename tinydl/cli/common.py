"""Helpers several `tinydl` commands share: option types and groups, the help formatter, and
compiling with fallback warnings printed."""

from __future__ import annotations

import argparse
import math
import sys

from tinydl.errors import InvalidInputError

MODEL_HELP = "model file (.onnx, .tflite, Keras .h5 or .tdl)"


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """--backends and --optimize, as inspect and run take them."""
    p.add_argument(
        "--backends",
        "--backend",
        dest="backends",
        default="cpu",
        metavar="LIST",
        help="backends in priority order, comma-separated: cpu (onnxruntime, then numpy), "
        "numpy, onnxruntime, webgpu, cuda (default: cpu)",
    )
    p.add_argument(
        "--optimize",
        choices=("none", "basic", "all"),
        default="all",
        help="graph optimizer level (default: all)",
    )


class _Deprecated(argparse.Action):
    """An option's old spelling, kept for one release: stores into the new option's dest and
    prints a warning naming the new spelling."""

    def __init__(self, option_strings, dest, instead: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.instead = instead

    def __call__(self, parser, namespace, values, option_string=None):
        deprecated(f"{option_string} is deprecated", f"{self.instead} {values}")
        setattr(namespace, self.dest, values)


def add_deprecated(p: argparse.ArgumentParser, old: str, dest: str, instead: str) -> None:
    """Accept `old` (hidden from --help) as a deprecated spelling of the option `instead`
    (e.g. "--out-dir")."""
    p.add_argument(old, dest=dest, action=_Deprecated, instead=instead, help=argparse.SUPPRESS)


def deprecated(what: str, instead: str) -> None:
    print(f"warning: {what} and goes away in the next release: use {instead}", file=sys.stderr)


def output_file(path: str | None, suffixes: tuple[str, ...], out_dir: str | None):
    """-o as a file and --out-dir as a folder. A -o path without one of the file `suffixes`
    is the old spelling of a folder (a deprecation warning, kept for one release).
    Returns (file or None, folder or None)."""
    from pathlib import Path

    if path is None or Path(path).suffix.lower() in suffixes:
        return path, out_dir
    if out_dir is not None:
        raise InvalidInputError(
            f"-o {path}: expected a {' or '.join(suffixes)} file (--out-dir names the folder)"
        )
    deprecated(f"-o {path} for a folder is deprecated", f"--out-dir {path}")
    return None, path


def _compile(
    graph,
    backends: str,
    strict: bool,
    precision: str = "fp32",
    quiet: bool = False,
    optimize: str = "all",
    calibration=None,
    partition: str = "greedy",
):
    """tinydl.compile, with fallback warnings printed as one `warning:` line each (and, for
    precision auto, its decision on one `note:` line)."""
    import warnings

    import tinydl

    names = tuple(b.strip() for b in backends.split(",") if b.strip())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = tinydl.compile(
            graph,
            backends=names,
            precision=precision,
            strict=strict,
            optimize=optimize,
            calibration=calibration,
            partition=partition,
        )
    if not quiet:
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
        if session.precision_decision is not None:
            print(f"note: {session.precision_decision.summary()}", file=sys.stderr)
    return session


def console():
    """A rich console for the commands' tables and long lines: sized to the terminal ($COLUMNS,
    else 80 when not a terminal), wrapping between words; text is printed as given (no markup,
    so "float32[N,3]" stays as it is)."""
    from rich.console import Console

    return Console(highlight=False, markup=False, emoji=False)


def table(*columns: str, title: str | None = None):
    """A rich table with `columns` (header cells); rows are added with `row(table, ...)`."""
    from rich import box
    from rich.table import Column, Table

    # fold: a word longer than its column is broken rather than cut short with an ellipsis
    return Table(
        *(Column(c, overflow="fold") for c in columns),
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
        title_style="",
    )


def row(t, *cells) -> None:
    """Add a row of plain-text cells (never read as markup)."""
    from rich.text import Text

    t.add_row(*(Text(str(c)) for c in cells))


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


def _seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _tolerance(text: str) -> float:
    """A finite relative error >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def _crf(text: str) -> int:
    value = _count(text)
    if value > 51:
        raise argparse.ArgumentTypeError(f"H.264 quality goes from 0 to 51, got {value}")
    return value


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


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _parse_dims(name: str, text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 0 for d in dims):
        raise InvalidInputError(f"--shape {name}={text}: expected sizes such as 1,3,224,224")
    return dims

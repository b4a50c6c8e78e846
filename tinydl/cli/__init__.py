"""The `tinydl` command: info, convert, inspect and run models from a shell.

    tinydl info
    tinydl convert model.onnx -o model.tdl
    tinydl inspect model.onnx --backends webgpu,cpu
    tinydl bench model.onnx --peers onnxruntime,ncnn -o bench.json
    tinydl run model.onnx --input image.png --out-dir out/ --time
    tinydl superres clip.mp4 -o clip_x3.mp4 --scale 3
    tinydl pose photo.jpg --json pose.json -o drawn.png
    tinydl ocr scan.png --json lines.json -o scan_ocr.png
    tinydl pipeline run examples/apps/superres4.yaml --trace trace.json

Every subcommand imports what it needs when it runs, so `tinydl --help` loads neither NumPy nor
onnx. A user error (a bad file, an unknown backend, a wrong input shape) prints `error: ...` and
exits with status 2 (`tinydl --debug ...` shows its traceback too); a traceback without
--debug means a bug in tinydl.

In every command `-o` names a file and `--out-dir` a folder.

One module per command (`info.py`, `convert.py`, ...) holds its `cmd_NAME` function and
`add_parser(subparsers)`, which adds its subparser; `common.py` holds what several share.
A new command is a new module plus its name in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tinydl.cli.common import _Formatter
from tinydl.errors import TinyDLError

EXIT_USAGE = 2
# The command modules (tinydl.cli.NAME), in the order `tinydl --help` lists them.
COMMANDS = ("info", "convert", "inspect", "bench", "run", "superres", "pose", "ocr", "pipeline")


def build_parser() -> argparse.ArgumentParser:
    from tinydl import __version__

    parser = argparse.ArgumentParser(
        prog="tinydl",
        description="Run neural networks on any GPU (or the CPU) with tinydl.",
        epilog="examples:\n  tinydl info\n  tinydl run model.onnx --input cat.png --time\n\n"
        "Run 'tinydl COMMAND --help' for a command's options.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"tinydl {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not only its message"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tinydl.cli.{name}").add_parser(sub)
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
        if args.debug:
            raise
        message = str(exc)
    except OSError as exc:
        if args.debug:
            raise
        message = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    except KeyboardInterrupt:
        return 130
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE

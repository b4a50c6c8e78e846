"""`tinydl convert`: a model to .tdl or .onnx, or its graph to JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tinydl.cli.common import MODEL_HELP, _Formatter
from tinydl.errors import InvalidInputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "convert",
        help="convert a model to .tdl or .onnx (or its graph to JSON)",
        formatter_class=_Formatter,
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


def cmd_convert(args: argparse.Namespace) -> int:
    import tinydl
    from tinydl.ir.tdl import graph_json_text

    graph = tinydl.load(args.model)
    source = Path(args.model)
    if args.model.startswith("tinydl:"):
        from tinydl.runtime.loader import shipped_path

        source = shipped_path(args.model)
        if args.output is None:
            raise InvalidInputError(f"{args.model} is a shipped model: name the output with -o")
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

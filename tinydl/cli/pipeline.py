"""`tinydl pipeline`: run a pipeline app (YAML or Markdown) or print its graph."""

from __future__ import annotations

import argparse
from typing import Any

from tinydl.cli.common import _Formatter, _seconds
from tinydl.errors import InvalidInputError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "pipeline",
        help="run a pipeline app (YAML or Markdown) or print its graph",
        formatter_class=_Formatter,
        description="Run an app of components joined by bounded queues, described in a YAML "
        "file or a Markdown document (see docs/pipeline.md), and print its frame accounting "
        "(frames in = out + dropped + errored) and a per-component profile. 'help' checks the "
        "app and prints its graph without running it. Exits 1 when anything failed (frames "
        "errored, in any branch; a component's close failed, a sink's file with it) or the run "
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
    p.add_argument("--timeout", type=_seconds, metavar="S", help="stop the app after S seconds")
    p.set_defaults(func=cmd_pipeline)


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
    return 1 if report.errored or report.errors or report.stopped else 0


def _yaml_value(text: str) -> Any:
    """A --set value typed as YAML reads it (8 is an int, true a bool), else the text."""
    try:
        import yaml

        return yaml.safe_load(text)
    except Exception:
        return text

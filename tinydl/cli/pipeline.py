"""`tinydl pipeline`: run a pipeline app (YAML or Markdown) or print its graph."""

from __future__ import annotations

import argparse
from pathlib import Path
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
        "was stopped by --timeout. 'profile' measures each component (cached by app and "
        "machine); 'deploy' plans instances, batch sizes and placement for --fps x --streams "
        "frames/s at --scale (0: latency first, 1: throughput first) and prints the plan with its "
        "simulated predictions; 'run --deploy' applies a plan and prints measured beside "
        "predicted.",
        epilog="examples:\n  tinydl pipeline help examples/apps/superres4.yaml\n"
        "  tinydl pipeline run examples/apps/superres4.md --set frames=8 --trace trace.json\n"
        "  tinydl pipeline deploy APP.yaml --fps 30 --streams 8 --scale 0.5 --json plan.json\n"
        "  tinydl pipeline run APP.yaml --deploy plan.json",
    )
    p.add_argument(
        "action",
        choices=("run", "help", "profile", "deploy"),
        help="run the app, print its graph, profile it, or plan its deployment",
    )
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
    d = p.add_argument_group("deployer (profile, deploy, run --deploy)")
    d.add_argument("--fps", type=float, help="frames/s per stream (sets ${fps} if the app has it)")
    d.add_argument(
        "--streams", type=int, default=1, help="streams (sets ${streams} if the app has it)"
    )
    d.add_argument("--scale", type=float, default=0.5, help="0: latency first .. 1: throughput")
    d.add_argument("--cores", help="CPU cores to place on, e.g. 0-15 (default: this process's)")
    d.add_argument("--gpus", help="GPUs to place on, e.g. cuda:0,cuda:1 (default: detected)")
    d.add_argument("--slo-ms", type=float, help="search for a plan with p99 latency under this")
    d.add_argument(
        "--shards",
        type=int,
        default=None,
        metavar="K",
        help="run the app as K processes, each with its share of every component's instances "
        "(one per GPU scales past one process's frame rate; docs/pipeline.md, Shards)",
    )
    d.add_argument("--mode", choices=("auto", "semi", "manual"), default="auto")
    d.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="NAME=N[xB]",
        help="semi mode: keep N instances (and batch B) for component NAME (repeatable)",
    )
    d.add_argument("--json", metavar="PLAN.json", help="deploy: write the plan there")
    d.add_argument("--profile", metavar="PROFILE.json", help="a profile to use (or to write)")
    d.add_argument("--duration", type=float, default=5.0, help="profile: seconds to run")
    d.add_argument(
        "--deploy", metavar="PLAN.json|auto", help="run: apply a plan, or plan one (auto)"
    )
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from tinydl.pipeline.config import load_app

    variables = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInputError(f"--set {item!r}: expected NAME=VALUE")
        variables[name] = _yaml_value(value)
    if args.fps is not None:
        text = Path(args.app).read_text(encoding="utf-8", errors="replace")
        for name, value in (("fps", args.fps), ("streams", args.streams)):
            if "${" + name + "}" in text:
                variables.setdefault(name, value)
    app = load_app(args.app, variables)
    if args.action == "help":
        app.help()
        return 0
    if args.action == "profile":
        return _profile(app, args)
    if args.action == "deploy":
        plan = _plan(app, args)
        print(plan)
        if args.json:
            plan.to_json(args.json)
            print(f"plan written to {args.json}")
        return 1 if plan.slo_met is False else 0
    plan = None
    if args.deploy:
        from tinydl.pipeline.deploy import Deployment

        plan = _plan(app, args) if args.deploy == "auto" else Deployment.load(args.deploy)
    report = app.run(timeout=args.timeout, trace=args.trace, deployment=plan, shards=args.shards)
    print(report)
    if plan is not None:
        print(_measured_vs_predicted(app, report, plan))
    if args.trace:
        print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    return 1 if report.errored or report.errors or report.stopped else 0


def _profile(app, args: argparse.Namespace) -> int:
    from tinydl.pipeline.profile import cache_path, profile

    prof = profile(app, duration=args.duration, progress=True)
    where = args.profile or cache_path(app)
    if args.profile:
        prof.to_json(args.profile)
    print(f"{'component':<16} {'resource':>8} {'ms/item':>9} {'cpu ms/item':>11}  batch curve (ms)")
    for name, c in prof.components.items():
        curve = " ".join(f"{b}:{v['ms']:.2f}" for b, v in (c["curve"] or {}).items())
        print(
            f"{name:<16} {c['resource']:>8} {c['ms_per_item']:>9.3f} "
            f"{c['cpu_ms_per_item']:>11.3f}  {curve}"
        )
    print(f"profile: {where}")
    return 0


def _plan(app, args: argparse.Namespace):
    from tinydl.pipeline.deploy import deploy

    if args.fps is None:
        raise InvalidInputError("deploy needs --fps (frames/s per stream) and --streams")
    pin = {}
    for item in args.pin:
        name, sep, value = item.partition("=")
        n, _, b = value.lower().partition("x")
        if not sep or not n.isdigit() or (b and not b.isdigit()):
            raise InvalidInputError(f"--pin {item!r}: expected NAME=N or NAME=NxB")
        pin[name] = {"instances": int(n), **({"batch": int(b)} if b else {})}
    profile = args.profile if args.profile and Path(args.profile).exists() else None
    return deploy(
        app,
        rate=args.fps * args.streams,
        scale=args.scale,
        cores=args.cores,
        gpus=args.gpus,
        mode="semi" if pin and args.mode == "auto" else args.mode,
        profile=profile,
        slo_ms=args.slo_ms,
        pin=pin,
        shards=args.shards or 1,
    )


def _measured_vs_predicted(app, report, plan) -> str:
    """Throughput (and latency where the app has a Metrics component) beside the plan's."""
    from tinydl.pipeline.components import Metrics

    p = plan.predicted
    lat = sorted(
        v
        for name, spec in app.components.items()
        if isinstance(spec.component, Metrics)
        for metrics in report.parts.get(name, [spec.component])  # each shard's, when sharded
        for f in metrics.summary().values()
        for v in [f["latency_p50_ms"]]
    )
    measured_p50 = f"{lat[len(lat) // 2]:.1f}" if lat else "-"
    fps = report.frames_out / report.wall_s if report.wall_s else 0.0
    return (
        f"{'':<16}{'measured':>10}{'predicted':>11}\n"
        f"{'frames/s out':<16}{fps:>10.1f}{p.get('throughput_fps', 0):>11.1f}\n"
        f"{'latency p50 ms':<16}{measured_p50:>10}{p.get('latency_ms', {}).get('p50', 0):>11.1f}"
    )


def _yaml_value(text: str) -> Any:
    """A --set value typed as YAML reads it (8 is an int, true a bool), else the text."""
    try:
        import yaml

        return yaml.safe_load(text)
    except Exception:
        return text

"""`tinydl inspect`: a model's inputs, outputs, ops, weights and placement."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tinydl.cli.common import (
    MODEL_HELP,
    _compile,
    _Formatter,
    add_backend_options,
    console,
    row,
    table,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="show a model's inputs, outputs, ops, weights and placement",
        formatter_class=_Formatter,
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
    p.add_argument(
        "--precision",
        choices=("fp32", "fp16", "tf32", "auto"),
        default="fp32",
        help="compile at this precision; auto also reports which values stay in float32 "
        "(decided on random inputs in [0, 1); models with symbolic input shapes need "
        "tinydl.compile(..., calibration=...))",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    import tinydl

    graph = tinydl.load(args.model)
    session = _compile(
        graph,
        args.backends,
        strict=False,
        quiet=True,
        optimize=args.optimize,
        precision=args.precision,
    )
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
    decision = session.precision_decision
    if decision is not None:
        report["precision"] = {
            "summary": decision.summary(),
            "fp32": decision.fp32,
            "overflow": decision.overflow,
            "fp16": decision.fp16,
            "error": decision.error,
            "fp16_error": decision.fp16_error,
            "tolerance": decision.tolerance,
        }
        if args.verbose:
            report["precision"]["nodes"] = decision.nodes()
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

    out = console()
    say = out.print
    say(f"model:    {report['model']} (graph '{graph.name}')")
    source = [report["source_format"]]
    if report["opset"] is not None:
        source.append(f"opset {report['opset']}")
    if report["producer"]:
        source.append(f"producer {report['producer']}")
    say(f"source:   {', '.join(source)}")
    values = table("", "name", "type")
    for title, found in (("input", graph.inputs), ("output", graph.outputs)):
        for v in found:
            row(values, title, v.name, v.describe())
    say(values)
    ops = table("op", "count", title=f"ops ({len(graph.nodes)} nodes)")
    for op_name, count in report["op_counts"].items():
        row(ops, op_name, count)
    say(ops)
    say(f"parameters: {report['parameters']:,} ({_human_bytes(report['weight_bytes'])})")
    rewrites = ", ".join(f"{name} {n}" for name, n in optimized.rewrites.items()) or "none"
    say(
        f"optimized ({optimized.level}): {optimized.nodes_before} -> {optimized.nodes_after} "
        f"nodes (rewrites: {rewrites})"
    )
    counts = ", ".join(f"{b} {n}" for b, n in placement.counts().items())
    say(
        f"placement ({','.join(placement.backends)}): {counts} nodes "
        f"in {len(placement.partitions)} partition(s)"
    )
    if fallbacks:
        ops_list = sorted({placement.ops[n] for n in fallbacks})
        hint = "" if args.verbose else "; --verbose for the reasons"
        say(
            f"{len(fallbacks)} node(s) fall back from {placement.backends[0]} "
            f"(ops: {', '.join(ops_list)}){hint}"
        )
    say(_plan_table(placement))
    if args.verbose:
        say(_nodes_table(placement))
    if decision is not None:
        say(decision.summary())
        kept = ", ".join(decision.fp32) or "none"
        say(f"kept in float32: {kept}")
    return 0


def _plan_table(placement):
    """The partitions and transfers in run order; each partition's ops, most frequent first."""
    from tinydl.backends.partition import Transfer

    t = table("#", "backend", "nodes", "ops", title="partitions and transfers, in run order")
    k = 0
    for step in placement.plan:
        if isinstance(step, Transfer):
            row(t, "", "transfer", "", str(step))
            continue
        ops: dict[str, int] = {}
        for n in step.nodes:
            ops[n.op] = ops.get(n.op, 0) + 1
        top = ", ".join(f"{op} {c}" for op, c in sorted(ops.items(), key=lambda kv: -kv[1]))
        row(t, k, step.backend, len(step.nodes), top)
        k += 1
    total = placement.bytes_per_run()
    moved = "unknown until run (symbolic dims)" if total is None else f"{total:,} bytes"
    t.caption = f"moved per run: {moved} in {len(placement.transfers)} transfer(s)"
    t.caption_justify = "left"
    return t


def _nodes_table(placement):
    """Every node: its partition, backend and the refusals of preferred backends."""
    part_of = {n.name: k for k, p in enumerate(placement.partitions) for n in p.nodes}
    t = table("node", "op", "part", "backend", "refused by")
    for name, backend in placement.nodes.items():
        why = "; ".join(f"{b}: {r}" for b, r in placement.refusals.get(name, {}).items())
        row(t, name, placement.ops[name], part_of[name], backend, why)
    return t


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

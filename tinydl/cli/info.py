"""`tinydl info`: versions, backends and devices."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tinydl.cli.common import _Formatter, console, row, table


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "info",
        help="show versions, backends and devices",
        formatter_class=_Formatter,
        description="Show the tinydl, Python and NumPy versions, the optional packages, and for "
        "each backend whether it is available (and if not, why) and which devices it would use.",
        epilog="example:\n  tinydl info --json",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_info)


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
                entry["device_names"] = list(backend.device_names())
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
        "cache": _cache_report(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    out = console()
    out.print(f"tinydl {report['tinydl']}")
    out.print(f"Python {report['python']} on {report['platform']}")
    out.print(f"NumPy  {report['numpy']}")
    optional = ", ".join(f"{p} {v or '(not installed)'}" for p, v in report["packages"].items())
    out.print(f"optional packages: {optional}")
    t = table("backend", "status", "devices (NAME:INDEX for device=), or why not")
    for name, entry in backends.items():
        if entry["available"]:
            lines = ["; ".join(entry["devices"]) or "(no device listed)"]
            if len(entry.get("device_names", ())) > 1:
                lines += [f"{name}:{i} {d}" for i, d in enumerate(entry["device_names"])]
            row(t, name, "available", "\n".join(lines))
        else:
            row(t, name, "unavailable", entry["reason"])
    out.print(t)
    cache = report["cache"]
    parts = ", ".join(
        f"{name} {f['files']} files {f['bytes'] / 2**20:.1f} MB"
        for name, f in cache["folders"].items()
    )
    out.print(f"cache {cache['folder']}: {parts or 'empty'} (delete it to start over)")
    out.print(
        f"  imported models kept: {cache['models']}, compiled sessions kept: {cache['sessions']}, "
        f"at most {cache['limit_mb']:g} MB each"
    )
    return 0


def _cache_report() -> dict[str, Any]:
    """The cache folder (tinydl/cache.py): what each of its folders holds, and the switches of
    the model and session caches (tinydl/snapshot.py)."""
    import os

    from tinydl import snapshot
    from tinydl.cache import cache_dir

    root = cache_dir()
    folders = {}
    if root.is_dir():
        for sub in sorted(p for p in root.iterdir() if p.is_dir()):
            files = total = 0
            for folder, _, names in os.walk(sub):
                for name in names:
                    try:
                        total += os.stat(os.path.join(folder, name)).st_size
                        files += 1
                    except OSError:
                        continue
            folders[sub.name] = {"files": files, "bytes": total}
    on = {True: "on", False: "off"}
    return {
        "folder": str(root),
        "folders": folders,
        "models": on[snapshot.enabled(snapshot.MODEL_ENV)],
        "sessions": on[snapshot.enabled(snapshot.SESSION_ENV)],
        "limit_mb": snapshot.size_limit() / 2**20,
    }

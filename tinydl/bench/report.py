"""A benchmark report (the dict `run_bench` returns) as terminal tables, Markdown, JSON and PNG
charts. matplotlib is imported only to draw the charts, with its Agg (file-only) backend."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinydl.bench.harness import PHASES

PHASE_TITLES = {
    "device_init": "device init",
    "model_load": "model load",
    "compile_cold": "compile (cold)",
    "first_run": "first run",
    "compile_warm": "compile (warm)",
    "first_run_warm": "first run (warm)",
}


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def _s_as_ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else _ms(seconds * 1e3)


def _mb(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def latency_rows(report: dict) -> list[list[str]]:
    rows = []
    for t in report["targets"]:
        host, gpu = t["latency"]["host"], t["latency"]["gpu"]
        if t["status"] != "ok":
            rows.append([t["name"], t["status"], "", "", "", "", "", t["reason"] or ""])
            continue
        check = t["check"]
        rows.append(
            [
                t["name"],
                "ok",
                _ms(host["median_ms"]),
                _ms(host["mean_ms"]),
                _ms(host["p90_ms"]),
                _ms(host["min_ms"]),
                _ms(gpu["median_ms"]) if gpu else (t["latency"]["gpu_note"] or "n/a"),
                f"matched, rel err {check['rel_err']:.1e}",
            ]
        )
    return rows


LATENCY_HEADER = [
    "target",
    "status",
    "host median ms",
    "mean",
    "p90",
    "min",
    "GPU median ms",
    "output check / reason",
]


def init_rows(report: dict) -> list[list[str]]:
    rows = []
    for t in report["targets"]:
        if t["status"] not in ("ok", "mismatch"):
            continue
        phases = [t["init"].get(p) for p in PHASES]
        peaks = [p["rss_peak_delta_mb"] for p in phases if p and p["rss_peak_delta_mb"] is not None]
        devs = [p["device_delta_mb"] for p in phases if p and p["device_delta_mb"] is not None]
        rows.append(
            [t["name"]]
            + [_s_as_ms(p["seconds"]) if p else "" for p in phases]
            + [_mb(max(peaks)) if peaks else "n/a", _mb(max(devs)) if devs else "n/a"]
        )
    return rows


INIT_HEADER = ["target", *(f"{PHASE_TITLES[p]} ms" for p in PHASES), "peak RSS +MB", "device +MB"]


def transfer_rows(report: dict) -> list[list[str]]:
    rows = []
    for t in report["targets"]:
        pairs: dict[tuple, dict[str, dict]] = {}
        for r in t["transfers"]:
            pairs.setdefault((r["size"], r["mode"]), {})[r["direction"]] = r
        for (size, mode), d in pairs.items():
            h2d, d2h = d.get("h2d"), d.get("d2h")
            nbytes = (h2d or d2h)["bytes"]
            rows.append(
                [
                    t["name"],
                    size,
                    f"{nbytes / 2**20:.2f}",
                    mode,
                    _ms(h2d["median_ms"]) if h2d else "",
                    f"{h2d['gb_per_s']:.2f}" if h2d else "",
                    _ms(d2h["median_ms"]) if d2h else "",
                    f"{d2h['gb_per_s']:.2f}" if d2h else "",
                ]
            )
    # Targets without transfer figures: one row per reason, naming the targets.
    notes: dict[str, list[str]] = {}
    for t in report["targets"]:
        if t["status"] == "ok" and not t["transfers"] and t["transfer_note"]:
            notes.setdefault(t["transfer_note"], []).append(t["name"])
    for note, names in notes.items():
        rows.append([", ".join(names), note, "", "", "", "", "", ""])
    return rows


TRANSFER_HEADER = [
    "target",
    "size",
    "MiB",
    "host memory",
    "h2d median ms",
    "h2d GB/s",
    "d2h median ms",
    "d2h GB/s",
]


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    # A long reason in the last column should not widen every row.
    widths[-1] = min(widths[-1], 80)
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def cell(c: str) -> str:
        return c.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _summary(report: dict) -> list[str]:
    m, cfg, mach, v = report["model"], report["config"], report["machine"], report["versions"]
    shapes = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))}" for i in m["inputs"])
    outs = ", ".join(f"{o['name']} {'x'.join(map(str, o['shape']))}" for o in m["outputs"])
    gpus = "; ".join(f"{g['name']} (driver {g['driver']}, {g['memory']})" for g in mach["gpus"])
    packages = ", ".join(f"{k} {val}" for k, val in v.items() if val)
    load = mach.get("load_average_1_5_15")
    devices = "; ".join(
        f"{t['name']}: {t['device']}"
        for t in report["targets"]
        if t["status"] == "ok" and t["device"]
    )
    return [
        f"model: {m['path']} ({m['parameters']:,} parameters); input {shapes} -> {outs}",
        f"runs: {cfg['warmup']} warm-up + {cfg['runs']} timed; precision {cfg['precision']}; "
        f"CPU threads {cfg['threads']}; output check: relative error <= {cfg['tolerance']:.0e} "
        "against tinydl's NumPy reference (the numpy backend)",
        f"machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gb']} GB; "
        f"GPU: {gpus or 'none (nvidia-smi not found)'}; {mach['platform']}"
        + (f"; load average at the end {load[0]}" if load else ""),
        f"devices: {devices}",
        f"versions: {packages}",
    ]


def text(report: dict) -> str:
    parts = [
        *_summary(report),
        "",
        "latency (host: inputs and outputs in host memory, wall "
        "time; GPU: device timestamps, data on the device)",
        _text_table(LATENCY_HEADER, latency_rows(report)),
    ]
    rows = transfer_rows(report)
    if rows:
        parts += ["", "transfers (median of timed copies)", _text_table(TRANSFER_HEADER, rows)]
    rows = init_rows(report)
    if rows:
        parts += [
            "",
            "init cost (wall time per phase; peak RSS growth over the worst phase)",
            _text_table(INIT_HEADER, rows),
        ]
    return "\n".join(parts)


def markdown(report: dict, charts: list[str] | None = None) -> str:
    lines = [f"### {Path(report['model']['path']).name}", ""]
    if report.get("command"):
        lines += ["```bash", report["command"], "```", ""]
    lines += [f"- {s}" for s in _summary(report)]
    lines += [
        "",
        "Latency (host: inputs and outputs in host memory, wall time; GPU: device "
        "timestamps with the data on the device)",
        "",
        _md_table(LATENCY_HEADER, latency_rows(report)),
    ]
    rows = transfer_rows(report)
    if rows:
        lines += ["", "Transfers (median)", "", _md_table(TRANSFER_HEADER, rows)]
    rows = init_rows(report)
    if rows:
        lines += ["", "Init cost", "", _md_table(INIT_HEADER, rows)]
    for chart in charts or []:
        lines += ["", f"![{Path(chart).stem}]({chart})"]
    return "\n".join(lines) + "\n"


# -- charts --------------------------------------------------------------------------------------


def charts(report: dict, folder: Path) -> list[Path]:
    """latency.png, transfer.png (when there are transfers) and init.png in `folder`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    title = Path(report["model"]["path"]).name
    made = []
    for name, draw in (
        ("latency", _latency_chart),
        ("transfer", _transfer_chart),
        ("init", _init_chart),
    ):
        fig = draw(plt, report, title)
        if fig is None:
            continue
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        made.append(path)
    return made


def _hbars(
    plt,
    labels: list[str],
    series: dict[str, list[float | None]],
    xlabel: str,
    title: str,
    errors: dict[str, list] | None = None,
    log: bool = True,
    values: bool = False,
):
    import numpy as np

    n, k = len(labels), max(len(series), 1)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.24 * n * k))
    height = 0.8 / k
    y = np.arange(n)
    for i, (name, vals) in enumerate(series.items()):
        vals = [v if v else np.nan for v in vals]
        err = (errors or {}).get(name)
        pos = y + (i - (k - 1) / 2) * height
        ax.barh(pos, vals, height, label=name, xerr=err, capsize=2)
        if values:
            ends = [v + (err[1][j] if err else 0) for j, v in enumerate(vals)]
            for p, v, end in zip(pos, vals, ends, strict=True):
                if not np.isnan(v):
                    ax.annotate(f" {v:.3g}", (end, p), va="center", fontsize="x-small")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
        # Phases that do nothing (an eager "compile") would stretch the axis down to nanoseconds.
        ax.set_xlim(left=max(ax.get_xlim()[0], 1e-2))
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", which="both", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _latency_chart(plt, report: dict, title: str):
    ok = [t for t in report["targets"] if t["status"] == "ok"]
    if not ok:
        return None
    host = [t["latency"]["host"] for t in ok]
    gpu = [t["latency"]["gpu"] for t in ok]
    series = {"host (wall, median)": [h["median_ms"] for h in host]}
    errors = {
        "host (wall, median)": [
            [h["median_ms"] - h["min_ms"] for h in host],
            [h["p90_ms"] - h["median_ms"] for h in host],
        ]
    }
    if any(gpu):
        series["GPU (timestamps, median)"] = [g["median_ms"] if g else None for g in gpu]
    return _hbars(
        plt,
        [t["name"] for t in ok],
        series,
        "ms per run (bar: median; whisker: min to p90; log scale)",
        f"latency: {title}",
        errors,
        values=True,
    )


def _transfer_chart(plt, report: dict, title: str):
    rows = [(t["name"], r) for t in report["targets"] for r in t["transfers"]]
    if not rows:
        return None
    sizes = list(dict.fromkeys(r["size"] for _, r in rows))
    series: dict[str, list[float | None]] = {}
    for name, r in rows:
        key = f"{name} {r['direction']} {r['mode']}"
        series.setdefault(key, [None] * len(sizes))[sizes.index(r["size"])] = r["gb_per_s"]
    return _hbars(
        plt, sizes, series, "GB/s (median)", f"transfers: {title}", log=False, values=True
    )


def _init_chart(plt, report: dict, title: str):
    done = [t for t in report["targets"] if t["status"] in ("ok", "mismatch")]
    if not done:
        return None
    series = {
        PHASE_TITLES[p]: [t["init"][p]["seconds"] * 1e3 if p in t["init"] else None for t in done]
        for p in PHASES
    }
    return _hbars(plt, [t["name"] for t in done], series, "ms (log scale)", f"init cost: {title}")


# -- files ---------------------------------------------------------------------------------------


def write(
    report: dict,
    out: Path | None,
    json_path: Path | None,
    draw: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Write bench.json, bench.md and the charts into `out`, and the JSON to `json_path`."""
    written: dict[str, Any] = {}
    made: list[Path] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if draw:
            try:
                made = charts(report, out)
            except ImportError:
                log("note: no charts: matplotlib is not installed (pip install 'tinydl[bench]')")
        md = out / "bench.md"
        md.write_text(markdown(report, [p.name for p in made]), encoding="utf-8")
        written["markdown"] = [md]
        written["charts"] = made
        path = out / "bench.json"
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        written["json"] = [path]
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        written.setdefault("json", []).append(json_path)
    return written

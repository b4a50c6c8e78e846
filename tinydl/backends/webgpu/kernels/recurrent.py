"""LSTM, GRU and RNN: a dispatch for the initial states, one per time step (two for a GRU
without linear_before_reset), one for the final states (backends/recurrent.py)."""

from __future__ import annotations

import numpy as np

from tinydl.backends import recurrent
from tinydl.backends.webgpu.kernels import grid, kernel, wgsl_float

WG = 64


def _acts(geo) -> list:
    return [
        [(recurrent.ACTIVATIONS[name][0], wgsl_float(a), wgsl_float(b)) for name, a, b in acts]
        for acts in geo.acts
    ]


@kernel("LSTM", "GRU", "RNN", supports=recurrent.supports)
def build(b):
    geo = recurrent.geometry(b)
    nd, bh = len(geo.directions), geo.batch * geo.hidden
    if geo.threads == 0:
        return
    hs = b.scratch("h", (2, nd * bh), precise=True)
    cs = b.scratch("c", (nd * bh,), precise=True) if geo.op == "LSTM" else None
    lbr = geo.linear_before_reset
    rh = b.scratch("rh", (nd * bh,), precise=True) if geo.op == "GRU" and not lbr else None
    table = b.upload("weights", geo.table, "f32")
    outs = [b.outputs[k] if k < len(b.outputs) and b.outputs[k] else None for k in range(3)]
    g = grid(geo.threads, WG)
    common = {
        "op": geo.op,
        "threads": geo.threads,
        "T": geo.seq,
        "B": geo.batch,
        "I": geo.inputs,
        "H": geo.hidden,
        "G": geo.gates,
        "ND": nd,
        "layout": geo.layout,
        "directions": geo.directions,
        "acts": _acts(geo),
        "clip": None if geo.clip is None else wgsl_float(geo.clip),
        "has_init": geo.has_init,
        "has_lens": geo.has_lens,
        "input_forget": geo.input_forget,
        "lbr": lbr,
        "peep": "p" in geo.offsets,
        **{f"off_{k}": v for k, v in geo.offsets.items()},
        "wg": WG,
        "gx": g[0],
    }

    def run(phase: str, binds: list, **params) -> None:
        decls = [(name, t, access) for name, _, t, access in binds]
        b.dispatch(
            "recurrent.wgsl",
            [v for _, v, _, _ in binds],
            g,
            label=f"{b.label} {phase}",
            phase=phase,
            decls=decls,
            **common,
            **params,
        )

    f32 = "f32"
    init = [("hs", hs, f32, "read_write")]
    if geo.has_init[0]:
        init.insert(0, ("init_h", b.inputs[5], b.info(5).stype, "read"))
    if cs:
        init.append(("cs", cs, f32, "read_write"))
        if geo.has_init[1]:
            init.insert(-2, ("init_c", b.inputs[6], b.info(6).stype, "read"))
    run("init", init)
    if geo.seq:
        xin = [("x", b.inputs[0], b.info(0).stype, "read"), ("wt", table, f32, "read")]
        if geo.has_lens:
            xin.append(("lens", b.inputs[4], "i32", "read"))
        for s in range(geo.seq):
            step = ("step", b.upload(("step", s), np.array([s], np.int32), "i32"), "i32", "read")
            if rh:
                run("reset", [*xin, ("hs", hs, f32, "read"), ("rh", rh, f32, "read_write"), step])
            binds = [*xin, ("hs", hs, f32, "read_write")]
            if cs:
                binds.append(("cs", cs, f32, "read_write"))
            if rh:
                binds.append(("rh", rh, f32, "read"))
            if outs[0]:
                binds.append(("y", outs[0], b.out(0).stype, "read_write"))
            run("step", [*binds, step], y=bool(outs[0]), y_t=b.out(0).stype if outs[0] else "")
    final = [("hs", hs, f32, "read")]
    if cs:
        final.append(("cs", cs, f32, "read"))
    if outs[1]:
        final.append(("y_h", outs[1], b.out(1).stype, "read_write"))
    if len(outs) > 2 and outs[2]:
        final.append(("y_c", outs[2], b.out(2).stype, "read_write"))
    if outs[1] or outs[2]:
        run(
            "final",
            final,
            yh=bool(outs[1]),
            yc=bool(outs[2]),
            yh_t=b.out(1).stype if outs[1] else "",
            yc_t=b.out(2).stype if outs[2] else "",
        )

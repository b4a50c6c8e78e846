"""LSTM, GRU and RNN: a launch for the initial states, one per time step (two for a GRU without
linear_before_reset), one for the final states (backends/recurrent.py)."""

from __future__ import annotations

import numpy as np

from tinydl.backends import recurrent
from tinydl.backends.cuda.kernels import blocks, cfloat, kernel, load, store

BLOCK = 64


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
    table = b.upload("weights", geo.table, "float32")
    outs = [b.outputs[k] if k < len(b.outputs) and b.outputs[k] else None for k in range(3)]
    common = {
        "op": geo.op,
        "total_threads": geo.threads,
        "T": geo.seq,
        "B": geo.batch,
        "I": geo.inputs,
        "H": geo.hidden,
        "G": geo.gates,
        "ND": nd,
        "layout": geo.layout,
        "directions": geo.directions,
        "acts": [
            [(recurrent.ACTIVATIONS[name][1], cfloat(a), cfloat(b_)) for name, a, b_ in acts]
            for acts in geo.acts
        ],
        "clip": None if geo.clip is None else cfloat(geo.clip),
        "has_init": geo.has_init,
        "has_lens": geo.has_lens,
        "input_forget": geo.input_forget,
        "lbr": lbr,
        "peep": "p" in geo.offsets,
        **{f"off_{k}": v for k, v in geo.offsets.items()},
        "block": BLOCK,
    }

    def run(phase: str, binds: list, step: int = 0, **params) -> None:
        ctypes = {name: t for name, _, t, _ in binds}
        b.launch(
            "recurrent.cu",
            [*(v for _, v, _, _ in binds), np.int32(step)],
            blocks(geo.threads, BLOCK),
            BLOCK,
            label=f"{b.label} {phase}",
            phase=phase,
            decls=[(name, t, access) for name, _, t, access in binds],
            load=lambda name, expr: load(ctypes[name], expr),
            store=lambda name, expr: store(ctypes[name], expr),
            **common,
            **params,
        )

    f32 = "float"
    init = [("hs", hs, f32, "write")]
    if geo.has_init[0]:
        init.append(("init_h", b.inputs[5], b.info(5).ctype, "read"))
    if cs:
        init.append(("cs", cs, f32, "write"))
        if geo.has_init[1]:
            init.append(("init_c", b.inputs[6], b.info(6).ctype, "read"))
    run("init", init)
    xin = [("x", b.inputs[0], b.info(0).ctype, "read"), ("wt", table, f32, "read")]
    if geo.has_lens:
        xin.append(("lens", b.inputs[4], b.info(4).ctype, "read"))
    for s in range(geo.seq):
        if rh:
            run("reset", [*xin, ("hs", hs, f32, "read"), ("rh", rh, f32, "write")], s)
        binds = [*xin, ("hs", hs, f32, "write")]
        if cs:
            binds.append(("cs", cs, f32, "write"))
        if rh:
            binds.append(("rh", rh, f32, "read"))
        if outs[0]:
            binds.append(("y", outs[0], b.out(0).ctype, "write"))
        run("step", binds, s, y=bool(outs[0]))
    final = [("hs", hs, f32, "read")]
    if cs:
        final.append(("cs", cs, f32, "read"))
    if outs[1]:
        final.append(("y_h", outs[1], b.out(1).ctype, "write"))
    if outs[2]:
        final.append(("y_c", outs[2], b.out(2).ctype, "write"))
    if outs[1] or outs[2]:
        run("final", final, yh=bool(outs[1]), yc=bool(outs[2]))

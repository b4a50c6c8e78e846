"""Reshape-like ops are zero-copy views: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout
(inference). A view that must change storage type (an fp16 intermediate that leaves the
partition as float32) is a converting copy instead. Constant uploads its value; Shape is
always known once the plan's input shapes are, so the plan computes it (see backends/planned.py)."""

from __future__ import annotations

import numpy as np

from tinydl.backends.cuda.kernels import constant_inputs, kernel
from tinydl.backends.cuda.kernels.gather import emit_gather
from tinydl.backends.gathers import Gather
from tinydl.backends.indexing import strides_of
from tinydl.backends.planned import dropout_supports


def copy(b, src: str, dst: str) -> None:
    shape = b.plan.infos[dst].shape
    st = strides_of(shape)
    tables = [np.arange(d) * s for d, s in zip(shape, st, strict=True)]
    emit_gather(b, Gather(src, shape, tables), dst)


@kernel("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", supports=constant_inputs)
def view(b):
    src, dst = b.info(0), b.out()
    if src.stype == dst.stype:
        b.alias(b.outputs[0], b.inputs[0])
        return
    copy(b, b.inputs[0], b.outputs[0])


@kernel("Dropout", supports=dropout_supports)
def dropout(b):
    view(b)


@kernel("Shape", "Constant")
def known(b):
    # The plan folds these (their outputs are constants once input shapes are known), so a
    # builder only runs if folding did not happen: that is a bug, not a user error.
    raise RuntimeError(f"{b.label}: {b.node.op} should have been computed when planning")

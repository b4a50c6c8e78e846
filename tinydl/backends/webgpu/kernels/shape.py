"""Reshape-like ops are zero-copy views: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout
(inference).
A view that must change storage type (an fp16 intermediate that leaves the partition as
float32) is a converting copy instead. Constant uploads its value; Shape is computed by the plan."""

from __future__ import annotations

from tinydl.backends.planned import dropout_supports
from tinydl.backends.webgpu.kernels import constant_inputs, ctype, kernel
from tinydl.backends.webgpu.kernels.elementwise import Operand, emit


@kernel("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", supports=constant_inputs)
def view(b):
    src, dst = b.info(0), b.out()
    if src.stype == dst.stype and src.layout == dst.layout == "nchw":
        b.alias(b.outputs[0], b.inputs[0])
        return
    ct = ctype(dst.dtype)
    emit(b, "a0", [Operand(dst.shape, name=b.inputs[0])], b.outputs[0], ct, label="copy")


@kernel("Dropout", supports=dropout_supports)
def dropout(b):
    view(b)


@kernel("Shape")
def known(b):
    # The plan computes Shape (its output is a constant once input shapes are known; see
    # backends/planned.py), so this builder only runs if that did not happen: a bug.
    raise RuntimeError(f"{b.label}: {b.node.op} should have been computed when planning")


@kernel("Constant")
def constant(b):
    from tinydl.ops import schema_of

    value = schema_of("Constant").run(b.node, [])[0]
    ct = ctype(value.dtype.name)
    emit(b, "a0", [Operand(tuple(value.shape), array=value)], b.outputs[0], ct)

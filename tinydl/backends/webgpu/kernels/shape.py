"""Reshape-like ops are zero-copy views: Reshape, Flatten, Squeeze, Unsqueeze, Identity.
A view that must change storage type (an fp16 intermediate that leaves the partition as
float32) is a converting copy instead. Constant uploads its value."""

from __future__ import annotations

from tinydl.backends.webgpu.kernels import constant_inputs, kernel
from tinydl.backends.webgpu.kernels.elementwise import Operand, emit


@kernel("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", supports=constant_inputs)
def view(b):
    src, dst = b.info(0), b.out()
    if src.stype == dst.stype and src.layout == dst.layout == "nchw":
        b.alias(b.outputs[0], b.inputs[0])
        return
    ct = "i32" if dst.dtype == "int32" else "f32"
    emit(b, "a0", [Operand(dst.shape, name=b.inputs[0])], b.outputs[0], ct, label="copy")


@kernel("Constant")
def constant(b):
    from tinydl.ops import schema_of

    value = schema_of("Constant").run(b.node, [])[0]
    ct = "i32" if value.dtype.name == "int32" else "f32"
    emit(b, "a0", [Operand(tuple(value.shape), array=value)], b.outputs[0], ct)

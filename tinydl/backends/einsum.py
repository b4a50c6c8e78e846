"""Einsum on the GPU backends: the equation turned into strides, once per plan.

Each output element sums, over the index space of the labels the output does not keep, the
product of one element of each operand. An operand's offset is a sum over labels of the label's
coordinate times the operand's stride for it: the sum of the strides of the axes bearing the
label (a label repeated in one operand walks its diagonal), 0 where the operand broadcasts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinydl.backends.base import Support
from tinydl.backends.indexing import strides_of
from tinydl.ops.matmul import _einsum_labels

# Operands bound at once (WebGPU guarantees 8 storage buffers per shader stage; one is the output).
MAX_OPERANDS = 4


@dataclass
class EinsumGeometry:
    out_dims: list[int]
    out_strides: list[list[int]]  # per operand, per output label
    sum_dims: list[int]
    sum_strides: list[list[int]]  # per operand, per summed label

    @property
    def total(self) -> int:
        return math.prod(self.out_dims)

    @property
    def count(self) -> int:
        return math.prod(self.sum_dims)


def geometry(equation: str, shapes: list[tuple[int, ...]]) -> EinsumGeometry:
    inputs, output = _einsum_labels(equation, [len(s) for s in shapes])
    size: dict[str, int] = {}
    for labels, shape in zip(inputs, shapes, strict=True):
        for label, d in zip(labels, shape, strict=True):
            size[label] = max(size.get(label, 1), d) if d != 1 else size.get(label, 1)
    summed = [label for label in size if label not in output]

    def strides(labels, shape, wanted):
        st = strides_of(shape)
        per = {}
        for label, d, s in zip(labels, shape, st, strict=True):
            per[label] = per.get(label, 0) + (0 if d == 1 and size[label] != 1 else s)
        return [per.get(label, 0) for label in wanted]

    return EinsumGeometry(
        [size[label] for label in output],
        [strides(lab, sh, output) for lab, sh in zip(inputs, shapes, strict=True)],
        [size[label] for label in summed],
        [strides(lab, sh, summed) for lab, sh in zip(inputs, shapes, strict=True)],
    )


def supports(node, graph) -> Support:
    if len(node.inputs) > MAX_OPERANDS:
        return Support(
            False, f"Einsum of {len(node.inputs)} operands (the GPU kernels take {MAX_OPERANDS})"
        )
    return Support(True)

"""Comparisons, logic, Where, IsNaN and IsInf: one expression each over `emit` (elementwise.py).
Float comparisons follow IEEE (NVRTC compiles without fast math): with a NaN they are false."""

from __future__ import annotations

from tinydl.backends.cuda.kernels import cfloat, kernel
from tinydl.backends.cuda.kernels.elementwise import compute_type, emit, operand

COMPARE = {
    "Equal": "==",
    "Greater": ">",
    "GreaterOrEqual": ">=",
    "Less": "<",
    "LessOrEqual": "<=",
}
LOGIC = {"And": "a0 && a1", "Or": "a0 || a1", "Xor": "a0 != a1"}


@kernel(*COMPARE)
def compare(b):
    ct = compute_type(b.info(0).dtype)
    expr = f"a0 {COMPARE[b.node.op]} a1"
    emit(b, expr, [operand(b, 0, ct), operand(b, 1, ct)], b.outputs[0], ct)


@kernel(*LOGIC)
def logic(b):
    ops = [operand(b, 0, "bool"), operand(b, 1, "bool")]
    emit(b, LOGIC[b.node.op], ops, b.outputs[0], "bool")


@kernel("Not")
def not_(b):
    emit(b, "!a0", [operand(b, 0, "bool")], b.outputs[0], "bool")


@kernel("Where")
def where(b):
    # The condition is read in the values' type: nonzero is true.
    ct = compute_type(b.out().dtype)
    ops = [operand(b, i, ct) for i in range(3)]
    emit(b, "(a0 != 0 ? a1 : a2)", ops, b.outputs[0], ct)


@kernel("IsNaN")
def is_nan(b):
    emit(b, "a0 != a0", [operand(b, 0, "float")], b.outputs[0], "float")


@kernel("IsInf")
def is_inf(b):
    tests = []
    if b.attrs["detect_positive"]:
        tests.append(f"a0 == {cfloat(float('inf'))}")
    if b.attrs["detect_negative"]:
        tests.append(f"a0 == {cfloat(float('-inf'))}")
    emit(b, " || ".join(tests) or "false", [operand(b, 0, "float")], b.outputs[0], "float")

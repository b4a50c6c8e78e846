"""Comparisons, logic, Where, IsNaN and IsInf: one expression each over `emit` (elementwise.py).

A bool is held as i32 0 or 1; a kernel's boolean result is written as one. Ordered comparisons
with a NaN are false whatever the driver's float mode: NaNs are tested by their bits.
"""

from __future__ import annotations

from tinydl.backends.webgpu.kernels import ctype, kernel
from tinydl.backends.webgpu.kernels.elementwise import emit, literal, operand

COMPARE = {
    "Equal": "==",
    "Greater": ">",
    "GreaterOrEqual": ">=",
    "Less": "<",
    "LessOrEqual": "<=",
}
# On bools held as 0/1.
LOGIC = {"And": "a0 & a1", "Or": "a0 | a1", "Xor": "a0 ^ a1"}


@kernel(*COMPARE)
def compare(b):
    ct = ctype(b.info(0).dtype)
    ops = [operand(b, 0, ct), operand(b, 1, ct)]
    sign = COMPARE[b.node.op]

    def code(vec: int) -> str:
        if ct == "i32":
            return f"a0 {sign} a1"
        return f"(a0 {sign} a1) & !(isnan_{vec}(a0) | isnan_{vec}(a1))"

    emit(b, code, ops, b.outputs[0], ct)


@kernel(*LOGIC)
def logic(b):
    emit(b, LOGIC[b.node.op], [operand(b, 0, "i32"), operand(b, 1, "i32")], b.outputs[0], "i32")


@kernel("Not")
def not_(b):
    emit(
        b, lambda vec: f"{literal(vec, 'i32')(1)} - a0", [operand(b, 0, "i32")], b.outputs[0], "i32"
    )


@kernel("Where")
def where(b):
    # The condition (0 or 1) is read in the values' type.
    ct = ctype(b.out().dtype)
    ops = [operand(b, i, ct) for i in range(3)]
    emit(b, lambda vec: f"select(a2, a1, a0 != {literal(vec, ct)(0)})", ops, b.outputs[0], ct)


@kernel("IsNaN")
def is_nan(b):
    emit(b, lambda vec: f"isnan_{vec}(a0)", [operand(b, 0, "f32")], b.outputs[0], "f32")


@kernel("IsInf")
def is_inf(b):
    """By the bits: +inf is 0x7f800000, -inf 0xff800000."""
    pos, neg = b.attrs["detect_positive"], b.attrs["detect_negative"]

    def code(vec: int) -> str:
        u = f"vec{vec}<u32>" if vec > 1 else "u32"
        bits = f"bitcast<{u}>(a0)"
        if pos and neg:
            return f"({bits} & {u}(0x7fffffffu)) == {u}(0x7f800000u)"
        if pos or neg:
            return f"{bits} == {u}({'0x7f800000u' if pos else '0xff800000u'})"
        return f"vec{vec}<bool>(false)" if vec > 1 else "false"

    emit(b, code, [operand(b, 0, "f32")], b.outputs[0], "f32")

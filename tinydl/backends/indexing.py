"""Index arithmetic shared by the GPU backends' kernel builders: row-major strides, NumPy
broadcasting, and merging axes that every operand walks contiguously."""

from __future__ import annotations

from collections.abc import Sequence


def strides_of(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of a row-major `shape` broadcast (NumPy rules) to `out_shape`."""
    pad = len(out_shape) - len(shape)
    full = [1] * pad + list(shape)
    st = [0] * pad + strides_of(shape)
    return [0 if d == 1 and o != 1 else s for d, s, o in zip(full, st, out_shape, strict=True)]


def collapse(shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent axes that every stride list walks contiguously; drop size-1 axes.

    Returns the shorter shape and each stride list for it (at least one axis).
    """
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    out: list[tuple[int, list[int]]] = []
    for d, st in dims:
        if out:
            pd, pst = out[-1]
            if all(p == s * d for p, s in zip(pst, st, strict=True)):
                out[-1] = (pd * d, st)
                continue
        out.append((d, st))
    if not out:
        out = [(1, [0] * len(strides))]
    return [d for d, _ in out], [[st[k] for _, st in out] for k in range(len(strides))]

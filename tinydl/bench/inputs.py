"""The input `tinydl bench` makes for a model when no --input-shape is given (imports no NumPy,
so `tinydl bench --help` can show the rule)."""

from __future__ import annotations

from tinydl.errors import InvalidInputError

# Symbolic dims get these sizes when no --input-shape names them (DEFAULT_INPUT_RULE): batch 1,
# 640x360 images (ESPCN x3 then makes 1080p, the thesis's case).
DEFAULT_HW = (360, 640)
# A text-line recognizer's width for its fixed height: PP-OCR rec takes [N,3,48,W], and
# RapidOCR feeds it 48x320 lines.
LINE_HEIGHT_MAX, LINE_HEIGHT, LINE_WIDTH = 64, 48, 320
DEFAULT_INPUT_RULE = (
    "dims the model fixes are kept; only symbolic ones are filled: the batch (dim 0) with 1; "
    "an image's height and width (NCHW dims 2,3; NHWC 1,2) with 360x640 when both are "
    "symbolic; with one fixed, a symbolic width is the fixed height "
    f"x {LINE_WIDTH}/{LINE_HEIGHT} rounded up to a multiple of 8 when that height is at most "
    f"{LINE_HEIGHT_MAX} (a text line: "
    "PP-OCR rec's 48 gives 320, RapidOCR's default), else the two are equal; any other "
    "symbolic dim needs --input-shape"
)


def default_dims(v, layout: str = "NCHW") -> tuple[int, ...]:
    """The input size bench uses for `v` when no --input-shape names it (DEFAULT_INPUT_RULE)."""
    if v.shape is None:
        raise InvalidInputError(
            f"input '{v.name}' has an unknown shape: pass --input-shape {v.name}=DIMS"
        )
    dims = list(v.shape)
    if dims and not isinstance(dims[0], int):
        dims[0] = 1
    if len(dims) == 4:
        h, w = (1, 2) if layout == "NHWC" else (2, 3)
        fixed_h, fixed_w = isinstance(dims[h], int), isinstance(dims[w], int)
        if not fixed_h and not fixed_w:
            dims[h], dims[w] = DEFAULT_HW
        elif not fixed_w:
            line = dims[h] <= LINE_HEIGHT_MAX
            dims[w] = -(-dims[h] * LINE_WIDTH // (LINE_HEIGHT * 8)) * 8 if line else dims[h]
        elif not fixed_h:
            dims[h] = dims[w]
    for axis, d in enumerate(dims):
        if not isinstance(d, int):
            raise InvalidInputError(
                f"input '{v.name}' is {v.describe()}: dim {axis} is not fixed; pass "
                f"--input-shape {v.name}=DIMS"
            )
    return tuple(dims)

"""The op cases: every op and attribute variant, as pytest params
(op, inputs, attrs, consts, rtol, atol) with the case's name as id.

test_ops.py runs each against onnxruntime (helpers/opcheck.py), test_gpu_ops.py on each GPU
backend against the op's NumPy reference, test_cuda_codegen.py through NVRTC. An input is a
`Rand` (drawn when the case runs, from an RNG seeded by the case id), a fixed array, or None
(an omitted optional input).
"""

import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from onnx import numpy_helper

I64_MAX, I64_MIN = int(np.iinfo(np.int64).max), int(np.iinfo(np.int64).min)


@dataclass
class Rand:
    """A random input, drawn when the case runs.

    kind: "normal" (times `scale`), "uniform" in [lo, hi), "signed" (|x| in [lo, hi), either sign),
    "int" in [lo, hi), "bool". `zeros` is the fraction of entries set to exactly 0, `special`
    the fraction set to NaN, inf or -inf.
    """

    shape: tuple
    kind: str = "normal"
    dtype: type = np.float32
    scale: float = 1.0
    lo: float = 0.5
    hi: float = 2.0
    zeros: float = 0.0
    special: float = 0.0

    def draw(self, rng) -> np.ndarray:
        if self.kind == "normal":
            x = rng.standard_normal(self.shape) * self.scale
        elif self.kind == "uniform":
            x = rng.uniform(self.lo, self.hi, self.shape)
        elif self.kind == "signed":
            x = rng.uniform(self.lo, self.hi, self.shape) * rng.choice([-1, 1], self.shape)
        elif self.kind == "int":
            x = rng.integers(self.lo, self.hi, self.shape)
        else:
            x = rng.random(self.shape) < 0.5
        if self.zeros:
            x = x * (rng.random(self.shape) >= self.zeros)
        if self.special:
            odd = rng.choice([np.nan, np.inf, -np.inf], self.shape)
            x = np.where(rng.random(self.shape) < self.special, odd, x)
        return np.asarray(x, self.dtype)


def N(*shape, scale=1.0, dtype=np.float32):
    return Rand(shape, scale=scale, dtype=dtype)


def U(*shape, lo=0.5, hi=2.0, dtype=np.float32):
    return Rand(shape, "uniform", dtype, lo=lo, hi=hi)


def S(*shape):
    return Rand(shape, "signed")


def I(*shape, lo=-9, hi=9, dtype=np.int64):  # noqa: E743
    return Rand(shape, "int", dtype, lo=lo, hi=hi)


def B(*shape):
    return Rand(shape, "bool", np.bool_)


def i64(*values):
    return np.array(values, np.int64)


def f32(*values):
    return np.array(values, np.float32)


CASES = []
# Cases onnxruntime cannot run (its CPU provider refuses them): the backends are judged against
# the NumPy reference, which test_ops.py checks against onnxruntime another way.
REFERENCE_CASES = []


def case(id, op, attrs=None, consts=(), rtol=1e-5, atol=1e-5, marks=(), into=CASES, **inputs):
    """Register a case: inputs in node order, each a Rand, a fixed array, or None (omitted).

    Names in `consts` become initializers (shape-like inputs, weights).
    """
    into.append(pytest.param(op, inputs, attrs or {}, set(consts), rtol, atol, id=id, marks=marks))


def draw(case_id: str, inputs: dict, attrs: dict) -> tuple[dict, dict]:
    """A case's inputs and attributes with every Rand drawn, from an RNG seeded by `case_id`:
    fresh random data per case, the same on every run."""
    rng = np.random.default_rng(zlib.crc32(case_id.encode()))
    arrays = {k: v.draw(rng) if isinstance(v, Rand) else v for k, v in inputs.items()}
    attrs = {k: v.draw(rng) if isinstance(v, Rand) else v for k, v in attrs.items()}
    return arrays, attrs


# -- elementwise ----------------------------------------------------------------------------------

BROADCASTS = {
    "same": ((2, 3, 4, 5), (2, 3, 4, 5)),
    "trailing": ((2, 3, 4, 5), (5,)),
    "both": ((2, 1, 4, 1), (3, 1, 5)),
    "scalar": ((3, 4), ()),
    "left-small": ((4, 1), (2, 3, 4, 6)),
}
for op in ("Add", "Sub", "Mul", "Div"):
    for name, (sa, sb) in BROADCASTS.items():
        case(f"{op}-{name}", op, a=N(*sa), b=S(*sb))  # b away from 0 for Div
    signed_int = Rand((4,), "signed", np.int32, lo=1, hi=7)
    case(f"{op}-int32", op, a=I(3, 4, lo=-50, hi=50, dtype=np.int32), b=signed_int)
case(
    "Div-int64-truncates",
    "Div",
    a=I(5, 6, lo=-100, hi=100),
    b=Rand((6,), "signed", np.int64, lo=2, hi=8),
)
case("Pow-float", "Pow", a=U(3, 4), b=N(3, 4))
case("Pow-broadcast", "Pow", a=U(2, 3, 4), b=N(4))
case("Pow-int-exponent", "Pow", a=N(3, 4), b=i64(2), consts={"b"})
case("Sqrt", "Sqrt", x=U(2, 3, 4, lo=0.01, hi=9))
case("Erf", "Erf", x=N(3, 4, 16, scale=2.0))  # both branches of the WGSL erf, both signs

case(
    "Mod-int64-fmod0", "Mod", a=I(3, 4, lo=-50, hi=50), b=Rand((4,), "signed", np.int64, lo=1, hi=9)
)
case(
    "Mod-int32-fmod1",
    "Mod",
    {"fmod": 1},
    a=I(2, 3, 4, lo=-50, hi=50, dtype=np.int32),
    b=Rand((3, 1), "signed", np.int32, lo=1, hi=9),
)
case(
    "Mod-int32-fmod0-scalar",
    "Mod",
    a=I(5, 6, lo=-50, hi=50, dtype=np.int32),
    b=np.array(-7, np.int32),
    consts={"b"},
)
case("Mod-int64-fmod1-same", "Mod", {"fmod": 1}, a=I(4, 5, lo=-99, hi=99), b=I(4, 5, lo=1, hi=9))
case("Mod-float-fmod1", "Mod", {"fmod": 1}, a=N(2, 3, 4, scale=5), b=S(4))
case("Mod-float-fmod1-both", "Mod", {"fmod": 1}, a=N(2, 1, 4, scale=5), b=S(3, 1))
for op in ("Ceil", "Floor", "Round"):
    case(op, op, x=N(3, 4, 5, scale=4))
case("Round-halves", "Round", x=f32(-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5))
case("Exp", "Exp", x=N(3, 4, 5, scale=3))
case("Log", "Log", x=U(3, 4, 5, lo=0.01, hi=50))
case("Sin", "Sin", x=N(3, 4, 5, scale=4))
case("Cos", "Cos", x=N(3, 4, 5, scale=4))
case("Reciprocal", "Reciprocal", x=S(3, 4, 5))
for op in ("Abs", "Neg", "Sign"):
    case(op, op, x=Rand((3, 4, 5), scale=3, zeros=0.2))
    case(f"{op}-int32", op, x=I(3, 4, 5, lo=-50, hi=50, dtype=np.int32))
    case(f"{op}-int64", op, x=I(4, 6, lo=-50, hi=50))
VARIADIC = {
    "one": ((2, 3, 4),),
    "two-same": ((2, 3, 4), (2, 3, 4)),
    "three-broadcast": ((2, 3, 4), (4,), (3, 1)),
    "four-broadcast": ((3, 1), (2, 1, 5), (), (5,)),
}
for op in ("Min", "Max", "Sum", "Mean"):
    for name, shapes in VARIADIC.items():
        case(f"{op}-{name}", op, **{f"x{k}": N(*s) for k, s in enumerate(shapes)})
for op in ("Min", "Max"):
    case(f"{op}-int32", op, a=I(3, 4, dtype=np.int32), b=I(4, dtype=np.int32))
    case(f"{op}-int64", op, a=I(2, 3, 4), b=I(3, 1), c=I(4))
    special = Rand((4, 5), special=0.3)
    case(f"{op}-nan-inf", op, a=special, b=Rand((4, 5), special=0.3))
case("IsNaN", "IsNaN", x=Rand((3, 4, 5), special=0.4))
IS_INF = {
    "default": {},
    "positive": {"detect_negative": 0},
    "negative": {"detect_positive": 0},
    "neither": {"detect_positive": 0, "detect_negative": 0},
}
for name, attrs in IS_INF.items():
    case(f"IsInf-{name}", "IsInf", attrs, x=Rand((3, 4, 5), special=0.4))

# -- comparisons and logic ------------------------------------------------------------------------

COMPARISONS = ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual")
for op in COMPARISONS:
    # Whole numbers in a small range, so that ties (where the ops differ) are common.
    for name, (sa, sb) in BROADCASTS.items():
        a, b = (I(*s, lo=-3, hi=3, dtype=np.float32) for s in (sa, sb))
        case(f"{op}-{name}", op, a=a, b=b)
    case(
        f"{op}-int32",
        op,
        a=I(3, 4, lo=-3, hi=3, dtype=np.int32),
        b=I(4, lo=-3, hi=3, dtype=np.int32),
    )
    case(f"{op}-int64", op, a=I(2, 3, 4, lo=-3, hi=3), b=I(3, 1, lo=-3, hi=3))
    case(f"{op}-const", op, a=I(3, 4, lo=-3, hi=3), b=i64(1), consts={"b"})
    case(f"{op}-nan-inf", op, a=Rand((4, 5), special=0.3), b=Rand((4, 5), special=0.3))
case("Equal-bool", "Equal", a=B(3, 4), b=B(4))
for op in ("And", "Or", "Xor"):
    case(f"{op}-same", op, a=B(2, 3, 4), b=B(2, 3, 4))
    case(f"{op}-broadcast", op, a=B(2, 1, 4), b=B(3, 1))
case("Not", "Not", x=B(3, 4, 5))
case("Where-float", "Where", c=B(2, 3, 4), x=N(2, 3, 4), y=N(2, 3, 4))
case("Where-broadcast", "Where", c=B(3, 1), x=N(2, 3, 4), y=N(4))
case("Where-int64", "Where", c=B(3, 4), x=I(3, 4), y=I(1, 4))
case("Where-int32", "Where", c=B(2, 5), x=I(5, dtype=np.int32), y=I(2, 1, dtype=np.int32))
case("Where-const-scalar", "Where", c=B(3, 4), x=N(3, 4), y=f32(-1.5), consts={"y"})

# -- activations ----------------------------------------------------------------------------------

for op in ("Relu", "HardSwish", "Sigmoid", "Tanh"):
    case(op, op, x=N(2, 3, 4, 5, scale=4))
case("Sigmoid-large", "Sigmoid", x=N(100, scale=60))
case("Clip-min-max", "Clip", x=N(3, 4, 5), min=f32(-0.5), max=f32(0.7), consts={"min", "max"})
case("Clip-min-only", "Clip", x=N(3, 4), min=f32(0.1), consts={"min"})
case("Clip-max-only", "Clip", x=N(3, 4), min=None, max=f32(0.2), consts={"max"})
case("Clip-none", "Clip", x=N(3, 4))
case("LeakyRelu-default", "LeakyRelu", x=N(2, 3, 4))
case("LeakyRelu-alpha", "LeakyRelu", {"alpha": 0.2}, x=N(2, 3, 4))
case("PRelu-channel", "PRelu", x=N(2, 3, 4, 5), slope=N(3, 1, 1), consts={"slope"})
case("PRelu-scalar", "PRelu", x=N(2, 3), slope=N(1), consts={"slope"})
case("HardSigmoid-default", "HardSigmoid", x=N(3, 4, scale=4))
case("HardSigmoid-custom", "HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, x=N(3, 4, scale=4))
for axis in (-1, 0, 1, 3):
    case(f"Softmax-axis{axis}", "Softmax", {"axis": axis}, x=N(2, 3, 4, 5, scale=3))
case("Softmax-default", "Softmax", x=N(4, 7, scale=3))
for axis in (-1, 0, 2):
    case(f"LogSoftmax-axis{axis}", "LogSoftmax", {"axis": axis}, x=N(2, 3, 4, 5, scale=3))
case("LogSoftmax-large", "LogSoftmax", x=N(3, 10, scale=100))
case("LogSoftmax-row-3000", "LogSoftmax", atol=1e-4, x=N(2, 3000, scale=3))

case("Gelu-default", "Gelu", x=N(3, 4, 16, scale=3))
case("Gelu-tanh", "Gelu", {"approximate": "tanh"}, x=N(3, 4, 16, scale=3))
case("Softplus", "Softplus", x=N(3, 4, 5, scale=4))
case("Softplus-large", "Softplus", x=N(100, scale=40))
case("Mish", "Mish", x=N(3, 4, 5, scale=4))
case("Elu-default", "Elu", x=N(3, 4, 5, scale=3))
case("Elu-alpha", "Elu", {"alpha": 0.3}, x=N(3, 4, 5, scale=3))
case("Selu-default", "Selu", x=N(3, 4, 5, scale=3))
case("Selu-custom", "Selu", {"alpha": 1.5, "gamma": 2.0}, x=N(3, 4, 5, scale=3))
case("Softsign", "Softsign", x=N(3, 4, 5, scale=4))

# -- convolutions ---------------------------------------------------------------------------------


def conv(id, x, w, bias=True, op="Conv", atol=1e-5, **attrs):
    out_channels = w[1] * attrs.get("group", 1) if op == "ConvTranspose" else w[0]
    b = N(out_channels) if bias else None
    case(f"{op}-{id}", op, attrs, {"w", "b"}, atol=atol, x=N(*x), w=N(*w), b=b)


conv("group1", (2, 4, 9, 11), (6, 4, 3, 3))
conv("group1-pads1", (1, 3, 8, 8), (5, 3, 3, 3), pads=[1, 1, 1, 1])
conv("depthwise", (1, 8, 10, 10), (8, 1, 3, 3), group=8, pads=[1, 1, 1, 1])
conv("depthwise-stride2", (2, 6, 11, 9), (6, 1, 5, 5), group=6, strides=[2, 2], pads=[2] * 4)
conv("depthwise-multiplier2", (1, 4, 7, 7), (8, 1, 3, 3), group=4)
conv("single-input-channel", (2, 1, 9, 9), (4, 1, 3, 3))
conv("group2", (1, 6, 8, 8), (4, 3, 3, 3), group=2)
conv("dilations2", (1, 3, 12, 12), (4, 3, 3, 3), dilations=[2, 2], pads=[2, 2, 2, 2])
conv("dilations-mixed", (1, 3, 12, 13), (4, 3, 3, 2), dilations=[3, 2])
# DeepLabV3's ASPP: a dilated window wider than a GPU's staged tile can hold
conv("dilations24-aspp", (1, 8, 60, 60), (8, 8, 3, 3), dilations=[24, 24], pads=[24] * 4, atol=1e-4)
conv("strides2", (1, 3, 11, 12), (4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
conv("strides-mixed", (1, 2, 11, 12), (3, 2, 3, 3), strides=[1, 3])
conv("pads-asymmetric", (1, 3, 7, 8), (4, 3, 3, 3), pads=[0, 1, 2, 1])
conv("same-upper", (1, 3, 10, 9), (4, 3, 3, 3), strides=[2, 2], auto_pad="SAME_UPPER")
conv("same-lower", (1, 3, 10, 9), (4, 3, 3, 3), strides=[2, 2], auto_pad="SAME_LOWER")
conv("same-upper-even-kernel", (1, 2, 7, 7), (3, 2, 4, 4), auto_pad="SAME_UPPER")
conv("same-lower-even-kernel", (1, 2, 7, 7), (3, 2, 4, 4), auto_pad="SAME_LOWER")
conv("valid", (1, 3, 10, 9), (4, 3, 3, 3), strides=[2, 2], auto_pad="VALID")
conv("no-bias", (2, 3, 6, 7), (4, 3, 3, 3), bias=False)
conv("kernel-shape-attr", (1, 3, 6, 7), (4, 3, 3, 2), kernel_shape=[3, 2])
conv("1x1", (2, 16, 5, 6), (8, 16, 1, 1))
conv("1d", (2, 3, 20), (4, 3, 5), strides=[2], pads=[2, 1])
conv("1d-depthwise", (1, 4, 16), (4, 1, 3), group=4, dilations=[2])
conv("3d", (1, 2, 5, 6, 7), (3, 2, 3, 3, 3), pads=[1, 0, 1, 1, 0, 1])
conv("wide", (1, 32, 20, 20), (32, 32, 3, 3), pads=[1] * 4, atol=3e-5)  # 288-term sums

CT = "ConvTranspose"
conv("basic", (1, 4, 5, 5), (4, 3, 3, 3), op=CT)
conv(
    "strides2-output-padding",
    (1, 4, 5, 6),
    (4, 3, 3, 3),
    op=CT,
    strides=[2, 2],
    pads=[1, 1, 1, 1],
    output_padding=[1, 1],
)
conv("group2", (1, 4, 5, 5), (4, 2, 3, 3), op=CT, group=2, strides=[2, 2])
conv("depthwise", (1, 3, 4, 4), (3, 1, 4, 4), op=CT, group=3, strides=[2, 2], pads=[1] * 4)
conv("output-shape", (1, 3, 5, 5), (3, 2, 3, 3), op=CT, strides=[2, 2], output_shape=[10, 10])
conv("output-shape-odd", (1, 3, 5, 4), (3, 2, 3, 3), op=CT, strides=[2, 2], output_shape=[9, 8])
conv("same-upper", (1, 3, 5, 5), (3, 2, 3, 3), op=CT, strides=[2, 2], auto_pad="SAME_UPPER")
conv("same-lower", (1, 3, 5, 5), (3, 2, 3, 3), op=CT, strides=[2, 2], auto_pad="SAME_LOWER")
conv("dilations2", (1, 2, 5, 5), (2, 3, 3, 3), op=CT, dilations=[2, 2])
conv("pads-asymmetric", (1, 2, 5, 6), (2, 3, 3, 3), op=CT, pads=[0, 1, 2, 1], bias=False)
conv("1d", (2, 3, 7), (3, 2, 4), op=CT, strides=[3], pads=[1, 0])
conv("3d", (1, 2, 3, 4, 3), (2, 2, 2, 3, 2), op=CT, strides=[2, 1, 2])


# -- normalization --------------------------------------------------------------------------------


def batch_norm(id, shape, **attrs):
    c = shape[1]
    consts = {"scale", "B", "mean", "var"}
    case(
        f"BatchNormalization-{id}",
        "BatchNormalization",
        attrs,
        consts,
        x=N(*shape),
        scale=N(c),
        B=N(c),
        mean=N(c),
        var=U(c),
    )


batch_norm("4d", (2, 3, 4, 5))
batch_norm("epsilon-momentum", (1, 4, 3, 3), epsilon=1e-2, momentum=0.5)
batch_norm("2d", (5, 6))

# -- pooling --------------------------------------------------------------------------------------

for op in ("MaxPool", "AveragePool"):
    k3s2 = {"kernel_shape": [3, 3], "strides": [2, 2]}
    case(f"{op}-2x2-stride2", op, {"kernel_shape": [2, 2], "strides": [2, 2]}, x=N(2, 3, 8, 9))
    case(f"{op}-3x3-pads1", op, {"kernel_shape": [3, 3], "pads": [1] * 4}, x=N(1, 2, 7, 7))
    case(
        f"{op}-pads-asymmetric",
        op,
        {"kernel_shape": [3, 2], "pads": [1, 0, 0, 1], "strides": [2, 1]},
        x=N(1, 2, 7, 6),
    )
    case(f"{op}-ceil-mode", op, {**k3s2, "ceil_mode": 1}, x=N(1, 2, 8, 8))
    # The last window would start in the end padding: ceil_mode drops it.
    case(
        f"{op}-ceil-mode-last-window-dropped",
        op,
        {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1] * 4, "ceil_mode": 1},
        x=N(1, 2, 5, 5),
    )
    case(f"{op}-dilations2", op, {"kernel_shape": [3, 3], "dilations": [2, 2]}, x=N(1, 2, 9, 9))
    for auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        case(f"{op}-{auto_pad}", op, {**k3s2, "auto_pad": auto_pad}, x=N(1, 2, 8, 7))
    case(f"{op}-1d", op, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, x=N(2, 3, 11))
    case(f"{op}-3d", op, {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2]}, x=N(1, 2, 5, 6, 5))
    # Windows of over 1024 taps that tile the input (MediaPipe's segmenters), rows left over.
    tiles = {"kernel_shape": [40, 30], "strides": [40, 30]}
    case(f"{op}-tiles-40x30", op, tiles, x=N(2, 3, 83, 61))
    case(f"{op}-tiles-1d-2000", op, {"kernel_shape": [2000], "strides": [2000]}, x=N(1, 2, 4100))
case(
    "MaxPool-uint8",
    "MaxPool",
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    x=I(1, 2, 6, 6, lo=0, hi=256, dtype=np.uint8),
)
case(
    "MaxPool-storage-order",
    "MaxPool",
    {"kernel_shape": [2, 2], "storage_order": 1},
    x=N(1, 2, 6, 6),
)
case(
    "AveragePool-count-include-pad",
    "AveragePool",
    {"kernel_shape": [3, 3], "pads": [1] * 4, "count_include_pad": 1},
    x=N(1, 2, 7, 7),
)
case(
    "AveragePool-count-include-pad-ceil",
    "AveragePool",
    {**k3s2, "pads": [1] * 4, "ceil_mode": 1, "count_include_pad": 1},
    x=N(1, 2, 8, 8),
)
case(
    "AveragePool-count-include-pad-asymmetric",
    "AveragePool",
    {"kernel_shape": [3, 3], "pads": [2, 0, 0, 1], "count_include_pad": 1},
    x=N(1, 2, 7, 6),
)
for shape in ((2, 3, 5, 6), (2, 3, 7), (1, 2, 3, 4, 5)):
    case(f"GlobalAveragePool-{len(shape)}d", "GlobalAveragePool", x=N(*shape))

# -- reductions -----------------------------------------------------------------------------------

RM = "ReduceMean"
case(f"{RM}-axis1", RM, x=N(2, 3, 4, 5), axes=i64(1), consts={"axes"})
case(
    f"{RM}-negative-axes-no-keepdims",
    RM,
    {"keepdims": 0},
    x=N(2, 3, 4, 5),
    axes=i64(-1, -2),
    consts={"axes"},
)
case(f"{RM}-spatial", RM, x=N(2, 8, 16, 16), axes=i64(2, 3), consts={"axes"})
case(f"{RM}-all", RM, x=N(2, 3, 4))
case(f"{RM}-all-no-keepdims", RM, {"keepdims": 0}, x=N(2, 3, 4))
case(f"{RM}-noop-empty-axes", RM, {"noop_with_empty_axes": 1}, x=N(2, 3, 4))


def fixed(seed: int, values, shape) -> np.ndarray:
    """A random draw from `values` (each exact in fp16, so fp16 runs see the same input)."""
    return np.random.default_rng(seed).choice(np.asarray(values, np.float32), shape)


# Inputs per reduction: positive where a log or a long product needs it.
REDUCE_INPUTS = {
    "ReduceMax": N,
    "ReduceMin": N,
    "ReduceSum": N,
    "ReduceProd": lambda *shape: U(*shape, lo=0.7, hi=1.4),
    "ReduceL1": N,
    "ReduceL2": N,
    "ReduceLogSum": U,
    "ReduceLogSumExp": lambda *shape: N(*shape, scale=3),
    "ReduceSumSquare": N,
}
for op, x in REDUCE_INPUTS.items():
    case(f"{op}-axis1", op, x=x(2, 3, 4, 5), axes=i64(1), consts={"axes"})
    case(
        f"{op}-negative-axes-no-keepdims",
        op,
        {"keepdims": 0},
        x=x(2, 3, 4, 5),
        axes=i64(-1, -3),
        consts={"axes"},
    )
    case(f"{op}-all", op, x=x(2, 3, 4))
    case(f"{op}-noop-empty-axes", op, {"noop_with_empty_axes": 1}, x=x(3, 4))
    # Rows longer than a workgroup (and than a cuda warp's share): positive values, so the sums
    # are far from 0 at fp16; the product's are 1 but for a few halvings and doublings.
    long = fixed(3, [0.5, 2.0] + [1.0] * 500, (2, 3000)) if op == "ReduceProd" else U(2, 3000)
    case(f"{op}-row-3000", op, x=long, axes=i64(-1), consts={"axes"})
    case(f"{op}-outer-axis-3000", op, rtol=1e-4, x=U(3000, 3), axes=i64(0), consts={"axes"})
case("ReduceMax-int32", "ReduceMax", x=I(3, 4, dtype=np.int32), axes=i64(1), consts={"axes"})
case("ReduceMin-int64", "ReduceMin", {"keepdims": 0}, x=I(3, 4), axes=i64(0), consts={"axes"})
case("ReduceSum-int64", "ReduceSum", x=I(3, 4, 5), axes=i64(0, 2), consts={"axes"})
# Integers past a workgroup and a cuda warp, each reduction that runs on them on the GPU.
INT_ROW = {"x": I(3, 1500, lo=-40, hi=40, dtype=np.int32), "axes": i64(-1), "consts": {"axes"}}
for op in ("ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceSumSquare"):
    case(f"{op}-int32-row-1500", op, **INT_ROW)
case("ReduceProd-int64", "ReduceProd", x=I(4, 3, 5, lo=-3, hi=3), axes=i64(1), consts={"axes"})
case("ReduceMax-int64-all", "ReduceMax", x=I(3, 50, lo=-(10**6), hi=10**6))
case("ReduceLogSumExp-large", "ReduceLogSumExp", x=N(4, 6, scale=200), axes=i64(1), consts={"axes"})

# ArgMax/ArgMin and TopK on integer-valued floats: ties, and exact in fp16.
TIES = {"lo": -4, "hi": 4, "dtype": np.float32}
for op in ("ArgMax", "ArgMin"):
    case(f"{op}-default", op, x=I(3, 4, 5, **TIES))
    case(f"{op}-axis-last-no-keepdims", op, {"axis": -1, "keepdims": 0}, x=I(3, 4, 5, **TIES))
    case(f"{op}-select-last-index", op, {"axis": 1, "select_last_index": 1}, x=I(3, 6, 5, **TIES))
    case(f"{op}-row-3000", op, {"axis": 1}, x=I(2, 3000, lo=-1000, hi=1000, dtype=np.float32))
    case(f"{op}-int64", op, {"axis": 1}, x=I(3, 7))
    case(f"{op}-int32-row-1500", op, {"axis": -1}, x=I(2, 1500, lo=-300, hi=300, dtype=np.int32))
case("ArgMax-float", "ArgMax", {"axis": 2}, x=N(2, 3, 9))

TK = "TopK"
case(f"{TK}-default", TK, consts={"k"}, x=I(3, 20, **TIES), k=i64(5))
case(f"{TK}-smallest-axis0", TK, {"axis": 0, "largest": 0}, {"k"}, x=I(20, 3, **TIES), k=i64(4))
case(f"{TK}-middle-axis", TK, {"axis": 1}, {"k"}, x=N(2, 9, 3), k=i64(3))
case(f"{TK}-k-all", TK, consts={"k"}, x=I(2, 8, **TIES), k=i64(8))
case(f"{TK}-unsorted-k1", TK, {"sorted": 0}, {"k"}, x=N(4, 10), k=i64(1))
case(f"{TK}-int64", TK, consts={"k"}, x=I(4, 10), k=i64(3))
case(f"{TK}-int32-row-1500", TK, {"largest": 0}, {"k"}, x=I(2, 1500, dtype=np.int32), k=i64(9))
case(
    f"{TK}-row-3000-k200",
    TK,
    consts={"k"},
    x=I(2, 3000, lo=-1000, hi=1000, dtype=np.float32),
    k=i64(200),
)
case(
    f"{TK}-row-3000-smallest",
    TK,
    {"largest": 0},
    {"k"},
    x=I(2, 3000, lo=-1000, hi=1000, dtype=np.float32),
    k=i64(37),
)

# -- normalization --------------------------------------------------------------------------------

LN = "LayerNormalization"
SB = {"s", "b"}
case(f"{LN}-last-axis", LN, consts=SB, x=N(2, 3, 8), s=N(8), b=N(8))
case(f"{LN}-axis1", LN, {"axis": 1}, SB, x=N(2, 3, 4, 5), s=N(3, 4, 5), b=N(3, 4, 5))
case(f"{LN}-no-bias-epsilon", LN, {"epsilon": 0.1}, {"s"}, x=N(3, 10), s=N(10), b=None)
case(f"{LN}-scale-fed", LN, {"axis": -2}, x=N(2, 3, 8), s=N(3, 8), b=N(3, 8))
case(f"{LN}-row-3000", LN, consts=SB, atol=1e-4, x=N(4, 3000), s=N(3000), b=N(3000))
# A large mean and a small variance: single-pass statistics (sum of squares) lose it, even in f32.
LARGE_MEAN = fixed(5, 1000 + 0.5 * np.arange(-4, 5), (4, 3000))
case(f"{LN}-large-mean", LN, consts=SB, atol=1e-4, x=LARGE_MEAN, s=N(3000), b=N(3000))
IN = "InstanceNormalization"
case(f"{IN}-2d", IN, consts=SB, x=N(2, 3, 4, 5, scale=3), s=N(3), b=N(3))
case(f"{IN}-1d", IN, consts=SB, x=N(2, 4, 7), s=N(4), b=N(4))
case(f"{IN}-3600", IN, consts=SB, atol=1e-4, x=N(1, 2, 60, 60), s=N(2), b=N(2))
case(f"{IN}-large-mean", IN, consts=SB, atol=1e-4, x=LARGE_MEAN.reshape(2, 2, 3000), s=N(2), b=N(2))
GN = "GroupNormalization"
case(f"{GN}-3-groups", GN, {"num_groups": 3}, SB, x=N(2, 6, 4, 5), s=N(6), b=N(6))
case(f"{GN}-1-group", GN, {"num_groups": 1}, SB, x=N(2, 4, 3), s=N(4), b=N(4))
case(f"{GN}-group-per-channel", GN, {"num_groups": 4}, x=N(2, 4, 6), s=N(4), b=N(4))
case(f"{GN}-3200", GN, {"num_groups": 2}, SB, atol=1e-4, x=N(1, 4, 40, 40), s=N(4), b=N(4))

# -- matrix products ------------------------------------------------------------------------------

MATMULS = {
    "2d": ((3, 4), (4, 5)),
    "batched": ((2, 3, 4, 5), (5, 6)),
    "batch-broadcast": ((2, 1, 4, 5), (3, 5, 6)),
    "1d-2d": ((4,), (4, 5)),
    "2d-1d": ((3, 4), (4,)),
    "1d-1d": ((7,), (7,)),
    "3d-1d": ((2, 3, 4), (4,)),
}
for name, (sa, sb) in MATMULS.items():
    case(f"MatMul-{name}", "MatMul", a=N(*sa), b=N(*sb))
case("MatMul-weight-initializer", "MatMul", a=N(2, 7, 16), b=N(16, 8), consts={"b"})


def gemm(id, sa, sb, sc=None, atol=1e-5, **attrs):
    c = None if sc is None else N(*sc)
    case(f"Gemm-{id}", "Gemm", attrs, {"b", "c"}, atol=atol, a=N(*sa), b=N(*sb), c=c)


gemm("default-bias-row", (3, 4), (4, 5), (5,))
gemm("transA", (4, 3), (4, 5), (3, 5), transA=1)
gemm("transB", (3, 4), (5, 4), (5,), transB=1)
gemm("transA-transB", (4, 3), (5, 4), (1, 5), transA=1, transB=1)
gemm("alpha-beta", (3, 4), (4, 5), (3, 5), alpha=0.5, beta=2.0)
gemm("no-c", (3, 4), (4, 5), alpha=1.5)
gemm("c-scalar", (3, 4), (4, 5), (), beta=0.25)
gemm("c-column", (3, 4), (4, 5), (3, 1))
# A few rows, long K (a classifier): the warp-per-column kernel, with and without transB.
gemm("few-rows-transB", (3, 300), (70, 300), (70,), transB=1, alpha=0.5)
gemm("one-row-transB", (1, 520), (33, 520), (1, 33), transB=1)
gemm("few-rows", (5, 300), (300, 40), (40,))
# A batch of 8 images: 512 products of N(0, 1) operands into outputs up to ~45, summed in
# another order on a GPU: float32's rounding moves an output by up to ~2e-5 (webgpu on an H100:
# 1.4e-5 where terms of ~40 cancel to -0.31), so the absolute tolerance is 5e-5 here.
gemm("eight-rows-transB", (8, 512), (50, 512), (50,), atol=5e-5, transB=1)

# -- shape ops ------------------------------------------------------------------------------------

for axis in (0, 1, 2, -1, 4):
    case(f"Flatten-axis{axis}", "Flatten", {"axis": axis}, x=N(2, 3, 4, 5))
case("Flatten-default", "Flatten", x=N(2, 3, 4))

RESHAPES = {
    "plain": [6, 20],
    "minus1": [-1, 10],
    "zero-minus1": [0, -1],
    "zero-zero": [0, 0, 20],
    "rank-up": [2, 3, 2, 2, 5],
    "flat": [-1],
}
for name, target in RESHAPES.items():
    case(f"Reshape-{name}", "Reshape", x=N(2, 3, 4, 5), shape=i64(*target), consts={"shape"})
case(
    "Reshape-allowzero",
    "Reshape",
    {"allowzero": 1},
    x=N(2, 3, 4),
    shape=i64(4, -1),
    consts={"shape"},
)

case("Transpose-default", "Transpose", x=N(2, 3, 4))
case("Transpose-nchw-to-nhwc", "Transpose", {"perm": [0, 2, 3, 1]}, x=N(2, 3, 4, 5))
case("Transpose-int64", "Transpose", {"perm": [1, 0, 2]}, x=I(2, 3, 4))

case("Squeeze-axes", "Squeeze", x=N(1, 3, 1, 5), axes=i64(0, 2), consts={"axes"})
case("Squeeze-negative-axis", "Squeeze", x=N(3, 4, 1), axes=i64(-1), consts={"axes"})
case("Squeeze-all", "Squeeze", x=N(1, 3, 1, 5, 1))
case("Unsqueeze-front", "Unsqueeze", x=N(3, 4), axes=i64(0), consts={"axes"})
case("Unsqueeze-several", "Unsqueeze", x=N(3, 4), axes=i64(-1, 1, 0), consts={"axes"})
case("Unsqueeze-scalar", "Unsqueeze", x=N(), axes=i64(0), consts={"axes"})

case("Concat-axis1", "Concat", {"axis": 1}, a=N(2, 3, 4), b=N(2, 5, 4), c=N(2, 1, 4))
case("Concat-negative-axis", "Concat", {"axis": -1}, a=N(2, 3), b=N(2, 4))
case("Concat-single", "Concat", {"axis": 0}, a=N(2, 3))
case("Concat-int64-const", "Concat", {"axis": 0}, a=I(3), b=i64(-1, 7), consts={"b"})
# Many inputs of several sizes along the channels, one of them used twice (DenseNet's shape).
case(
    "Concat-many-channels",
    "Concat",
    {"axis": 1},
    a=N(2, 3, 5, 6), b=N(2, 1, 5, 6), c=N(2, 8, 5, 6), d=N(2, 2, 5, 6), e=N(2, 4, 5, 6),
)  # fmt: skip
case("Concat-last-axis", "Concat", {"axis": 2}, a=N(3, 2, 5), b=N(3, 2, 1), c=N(3, 2, 7))


def slice_case(id, shape, starts, ends, axes=None, steps=None):
    axes = None if axes is None else i64(*axes)
    steps = None if steps is None else i64(*steps)
    case(
        f"Slice-{id}",
        "Slice",
        x=N(*shape),
        starts=i64(*starts),
        ends=i64(*ends),
        axes=axes,
        steps=steps,
        consts={"starts", "ends", "axes", "steps"},
    )


slice_case("basic", (5, 6, 7), [1, 2], [4, 5])
slice_case("axes", (5, 6, 7), [1], [5], axes=[2])
slice_case("negative-axes", (5, 6, 7), [-3, 0], [-1, 2], axes=[-1, -3])
slice_case("steps", (5, 6, 7), [0, 1], [5, 7], axes=[0, 2], steps=[2, 3])
slice_case("steps-without-axes", (5, 6, 7), [4, 0], [0, 6], steps=[-1, 2])
slice_case("negative-step-to-int64-min", (5, 6, 7), [-1], [I64_MIN], axes=[1], steps=[-1])
slice_case("negative-steps", (5, 6, 7), [5, 10], [0, 1], axes=[0, 2], steps=[-2, -3])
slice_case("negative-step-clamped", (5, 6, 7), [100], [-100], axes=[2], steps=[-2])
slice_case("int64-max-end", (5, 6, 7), [2], [I64_MAX], axes=[1])
slice_case("out-of-range", (5, 6, 7), [-100, 3], [100, 1000], axes=[0, 2])
slice_case("empty", (5, 6, 7), [4], [2], axes=[0])

SHAPES = {
    "all": {},
    "start1": {"start": 1},
    "end-1": {"end": -1},
    "start-2": {"start": -2},
    "clamped": {"start": -10, "end": 10},
}
for name, attrs in SHAPES.items():
    case(f"Shape-{name}", "Shape", attrs, x=N(2, 3, 4, 5))

CAST_CODES = {
    "float32": 1,
    "uint8": 2,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
}
CASTS = [
    ("float32", "float16"),
    ("float16", "float32"),
    ("float32", "int64"),
    ("float32", "int32"),
    ("float32", "uint8"),
    ("float32", "bool"),
    ("bool", "float32"),
    ("int64", "int32"),
    ("int32", "float32"),
    ("uint8", "float32"),
    ("int64", "bool"),
    ("bool", "int64"),
    ("float16", "int64"),
    ("int64", "float16"),
    ("uint8", "int32"),
    ("float32", "float64"),
    ("float64", "float32"),
    ("int32", "uint8"),
]
for src, dst in CASTS:
    # Non-negative and in range so casts to uint8 are defined; fractional to test truncation;
    # casts to bool need some zeros to be a test at all.
    zeros = 0.3 if dst == "bool" else 0.0
    if src == "bool":
        x = Rand((3, 4, 5), "bool", np.bool_)
    elif src.startswith("float"):
        x = Rand((3, 4, 5), "uniform", np.dtype(src).type, lo=0.1, hi=200, zeros=zeros)
    else:
        x = Rand((3, 4, 5), "int", np.dtype(src).type, lo=1, hi=120, zeros=zeros)
    case(f"Cast-{src}-to-{dst}", "Cast", {"to": CAST_CODES[dst]}, x=x)
case("Cast-float32-negative-to-int64", "Cast", {"to": 7}, x=N(4, 5, scale=50))
case("Cast-saturate-attr", "Cast", {"to": 10, "saturate": 1}, x=N(4, 5))


@dataclass
class TensorAttr(Rand):
    """A random tensor attribute (Constant's `value`)."""

    def draw(self, rng):
        return numpy_helper.from_array(super().draw(rng), "value")


CONSTANTS = {
    "tensor-float32": {"value": TensorAttr((2, 3))},
    "tensor-int64": {"value": TensorAttr((4,), "int", np.int64, lo=-5, hi=5)},
    "tensor-scalar": {"value": TensorAttr(())},
    "value-float": {"value_float": 0.375},
    "value-floats": {"value_floats": [1.5, -2.25, 3e-3]},
    "value-int": {"value_int": -42},
    "value-ints": {"value_ints": [3, -1, 7]},
}
for name, attrs in CONSTANTS.items():
    case(f"Constant-{name}", "Constant", attrs)

case("Identity", "Identity", x=N(2, 3))
case("Identity-int64", "Identity", x=I(4))
case("Dropout-inference", "Dropout", {"seed": 3}, x=N(2, 3, 5))

# -- spatial rearrangement ------------------------------------------------------------------------

for mode in ("DCR", "CRD"):
    for bs in (2, 3):
        attrs = {"blocksize": bs, "mode": mode}
        case(f"DepthToSpace-{mode}-bs{bs}", "DepthToSpace", attrs, x=N(2, 2 * bs * bs, 3, 4))
case("DepthToSpace-default-mode", "DepthToSpace", {"blocksize": 2}, x=N(1, 8, 2, 3))


def resize(id, shape, scales=None, sizes=None, roi=None, **attrs):
    roi = None if roi is None else f32(*roi)
    scales = None if scales is None else f32(*scales)
    sizes = None if sizes is None else i64(*sizes)
    case(
        f"Resize-{id}",
        "Resize",
        attrs,
        {"roi", "scales", "sizes"},
        x=N(*shape),
        roi=roi,
        scales=scales,
        sizes=sizes,
    )


COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
)
for mode in ("nearest", "linear", "cubic"):
    for ctm in COORDINATE_MODES:
        attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
        resize(f"{mode}-{ctm}-scales-up2", (1, 2, 5, 6), scales=[1, 1, 2, 2], **attrs)
        resize(f"{mode}-{ctm}-sizes-up", (1, 2, 5, 6), sizes=[1, 2, 8, 13], **attrs)
        resize(f"{mode}-{ctm}-sizes-down", (1, 2, 9, 10), sizes=[1, 2, 4, 7], **attrs)
        resize(f"{mode}-{ctm}-scales-down", (1, 2, 8, 9), scales=[1, 1, 0.5, 0.75], **attrs)
    resize(
        f"{mode}-tf_crop_and_resize",
        (1, 2, 6, 7),
        sizes=[1, 2, 5, 9],
        roi=[0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2],
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-3.0,
    )
for nearest_mode in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
    for ctm in ("half_pixel", "asymmetric", "align_corners"):
        attrs = {"nearest_mode": nearest_mode, "coordinate_transformation_mode": ctm}
        resize(f"nearest-{nearest_mode}-{ctm}-sizes", (1, 2, 5, 6), sizes=[1, 2, 9, 4], **attrs)
        resize(f"nearest-{nearest_mode}-{ctm}-scales", (1, 2, 4, 6), scales=[1, 1, 2, 0.5], **attrs)
resize(
    "ppocr-det-nearest-up2",
    (1, 24, 30, 40),
    scales=[1, 1, 2, 2],
    mode="nearest",
    coordinate_transformation_mode="asymmetric",
    nearest_mode="floor",
)
resize("nearest-default-attrs", (1, 3, 4, 5), scales=[1, 1, 2, 2])
resize("nearest-batch-channel", (2, 4, 3, 3), scales=[1, 2, 2, 1])
resize("axes-sizes", (1, 2, 5, 6), sizes=[8, 3], axes=[2, 3], mode="linear")
resize("axes-scales", (1, 2, 5, 6), scales=[1.5, 2], axes=[-2, -1], mode="linear")
resize("linear-3d-trilinear", (1, 2, 3, 4, 5), sizes=[1, 2, 5, 7, 4], mode="linear")
resize("linear-1d", (2, 7), sizes=[2, 12], mode="linear")
resize(
    "not-larger",
    (1, 2, 6, 8),
    sizes=[1, 2, 9, 9],
    mode="linear",
    keep_aspect_ratio_policy="not_larger",
)
resize(
    "not-smaller", (1, 2, 6, 8), sizes=[5, 5], axes=[2, 3], keep_aspect_ratio_policy="not_smaller"
)
resize(
    "cubic-exclude-outside", (1, 2, 5, 6), scales=[1, 1, 2, 1.5], mode="cubic", exclude_outside=1
)
resize("cubic-coeff-a", (1, 2, 5, 6), sizes=[1, 2, 7, 11], mode="cubic", cubic_coeff_a=-0.5)
resize("empty-scales-with-sizes", (1, 2, 4, 5), scales=[], sizes=[1, 2, 7, 3], mode="linear")
resize("empty-roi", (1, 2, 4, 4), roi=[], scales=[1, 1, 2, 2], mode="linear")


def pad(id, x, pads, value=None, axes=None, **attrs):
    value = None if value is None else np.array(value, x.dtype)
    axes = None if axes is None else i64(*axes)
    case(
        f"Pad-{id}",
        "Pad",
        attrs,
        {"pads", "value", "axes"},
        x=x,
        pads=i64(*pads),
        value=value,
        axes=axes,
    )


pad("constant-default", N(1, 2, 3, 4), [0, 0, 1, 2, 0, 0, 2, 1])
pad("constant-value", N(1, 2, 3, 4), [0, 1, 1, 2, 0, 0, 2, 1], value=1.5)
pad("constant-int64", I(3, 4), [1, 1, 2, 0], value=7)
pad("negative-crops", N(1, 2, 5, 6), [0, 0, -1, 2, 0, 0, 1, -2])
pad("axes", N(1, 2, 5, 6), [1, 2, 3, 0], value=-2.0, axes=[2, -1])
for mode in ("reflect", "edge", "wrap"):
    pad(mode, N(1, 2, 5, 6), [0, 0, 2, 1, 0, 0, 1, 3], mode=mode)
    pad(f"{mode}-axes", N(2, 5, 6), [1, 3, 2, 0], axes=[1, 2], mode=mode)

# -- recurrent layers -----------------------------------------------------------------------------

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent(
    id, op, attrs=None, dirs=1, bias=True, lens=False, init=False, peep=False, sizes=(5, 3, 4, 6)
):
    """An LSTM/GRU/RNN case: `sizes` are sequence, batch, input and hidden (5, 3, 4, 6 unless
    given); `lens` gives each batch entry its own length, `init` the initial states, `peep`
    LSTM's peepholes; attrs {"layout": 1} puts the batch first."""
    (seq, batch, size, hidden), gates = sizes, GATES[op]
    layout = (attrs or {}).get("layout", 0)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    inputs = dict(
        x=N(batch, seq, size) if layout else N(seq, batch, size),
        w=N(dirs, gates * hidden, size, scale=0.5),
        r=N(dirs, gates * hidden, hidden, scale=0.5 / max(1.0, (hidden / 6) ** 0.5)),
        b=N(dirs, 2 * gates * hidden, scale=0.5) if bias else None,
        lens=I(batch, lo=1, hi=seq + 1, dtype=np.int32) if lens else None,
        h0=N(*state) if init else None,
    )
    if op == "LSTM":
        inputs.update(c0=N(*state) if init else None)
        inputs.update(p=N(dirs, 3 * hidden, scale=0.5) if peep else None)
    attrs = {"hidden_size": hidden, **(attrs or {})}
    into = REFERENCE_CASES if layout else CASES  # onnxruntime has no batch-first kernels
    case(f"{op}-{id}", op, attrs, {"w", "r", "b", "p"}, rtol=1e-5, atol=1e-6, into=into, **inputs)


BI = {"direction": "bidirectional"}
for op in GATES:
    recurrent("forward", op)
    recurrent("no-bias", op, bias=False)
    recurrent("reverse-lens-init", op, {"direction": "reverse"}, lens=True, init=True)
    recurrent("bidirectional-lens-init", op, BI, dirs=2, lens=True, init=True)
    recurrent("clip", op, {"clip": 0.6}, init=True)
recurrent("peepholes", "LSTM", init=True, peep=True)
recurrent("peepholes-clip-bidirectional", "LSTM", {**BI, "clip": 0.5}, dirs=2, init=True, peep=True)
recurrent("input-forget", "LSTM", {"input_forget": 1}, init=True)
recurrent(
    "activations-alpha-beta",
    "LSTM",
    {
        **BI,
        "activations": ["HardSigmoid", "Elu", "Softsign", "Sigmoid", "ScaledTanh", "Affine"],
        "activation_alpha": [0.3, 0.6, 0.7, 0.9],
        "activation_beta": [0.45, 1.2, 0.1],
    },
    dirs=2,
)
recurrent(
    "activations-default-params",
    "LSTM",
    {"activations": ["HardSigmoid", "ThresholdedRelu", "Softplus"]},
)
recurrent("linear-before-reset", "GRU", {"linear_before_reset": 1}, init=True)
recurrent(
    "linear-before-reset-bidirectional-lens",
    "GRU",
    {**BI, "linear_before_reset": 1},
    dirs=2,
    lens=True,
)
recurrent(
    "activations-alpha-beta",
    "GRU",
    {"activations": ["HardSigmoid", "LeakyRelu"], "activation_alpha": [0.3, 0.2]},
)
recurrent("relu", "RNN", {"activations": ["Relu"]})
# Past one workgroup (2 x 4 x 70 threads), batch first, a longer sequence.
for op in GATES:
    recurrent("layout1-bidirectional-hidden70", op, {**BI, "layout": 1}, dirs=2, lens=True,
              init=True, sizes=(9, 4, 10, 70))  # fmt: skip
recurrent("no-linear-before-reset-hidden70", "GRU", init=True, sizes=(12, 2, 8, 70))
recurrent(
    "activations-alpha-beta",
    "RNN",
    {**BI, "activations": ["Affine", "ScaledTanh"], "activation_alpha": [0.3, 0.8],
     "activation_beta": [0.1, 0.9]},
    dirs=2,
)  # fmt: skip

# -- detection ------------------------------------------------------------------------------------


def nms(id, attrs=None, limit=5, iou=0.4, score=None, center=False, tied=False):
    """NonMaxSuppression over 2 batches, 3 classes and 40 boxes on a 10x10 field, so that many
    overlap; `tied` rounds the scores to quarters (ties keep the lower box index first)."""
    shape = (2, 40, 4)
    box = U(*shape, lo=0, hi=10) if not center else Rand(shape, "uniform", lo=0.5, hi=6)
    scores = Rand((2, 3, 40), "int", np.float32, lo=0, hi=4) if tied else U(2, 3, 40, lo=0, hi=1)
    case(
        f"NonMaxSuppression-{id}",
        "NonMaxSuppression",
        {"center_point_box": int(center), **(attrs or {})},
        {"limit", "iou", "score"},
        boxes=box,
        scores=scores,
        limit=None if limit is None else i64(limit),
        iou=None if iou is None else f32(iou),
        score=None if score is None else f32(score),
    )


nms("corners")
nms("center-point-box", center=True)
nms("score-threshold", score=0.6)
nms("many", limit=100, iou=0.2)
nms("tied-scores", limit=50, tied=True)
nms("no-iou-threshold", limit=3, iou=None)
nms("no-limit-no-output", limit=None, iou=None)


def roi_align(id, attrs=None, sampling_ratio=0):
    """RoiAlign of 7 rois over a 2x3x10x12 input at spatial_scale 0.5; the rois reach past the
    input's edges and some are thinner than a bin."""
    attrs = {"output_height": 3, "output_width": 4, "spatial_scale": 0.5, **(attrs or {})}
    case(
        f"RoiAlign-{id}",
        "RoiAlign",
        {**attrs, "sampling_ratio": sampling_ratio},
        rtol=1e-5,
        # sums of up to 4 x 36 weighted O(1) samples, added in another order than the reference's
        atol=1e-5,
        x=N(2, 3, 10, 12),
        rois=f32(
            [0, 0, 23, 19], [-4, -3, 8, 6], [5, 2, 30, 26], [10, 10, 11, 10.5],
            [2.5, 7, 16, 12], [20, 15, 8, 4], [1, 1, 3, 17],
        ),
        batch_indices=i64(0, 1, 1, 0, 1, 0, 1),
    )  # fmt: skip


for mode in ("avg", "max"):
    for transform in ("half_pixel", "output_half_pixel"):
        for ratio in (0, 2):
            attrs = {"mode": mode, "coordinate_transformation_mode": transform}
            roi_align(f"{mode}-{transform}-ratio{ratio}", attrs, ratio)

# -- float16 (computed in float32 and rounded back; tolerance per STYLE.md) ----------------------


def h(*shape):
    return N(*shape, dtype=np.float16)


F16 = {"rtol": 1e-2, "atol": 1e-2}
# At fp16, the absolute tolerance of cases whose sums are large: Conv-wide adds 288 products
# of N(0, 1) operands into outputs up to ~70; rounding both operands to fp16 (as PyTorch's
# .half() does; cuda's tensor cores) moves an output by up to ~2e-2, 3e-4 of that range.
# Gemm-eight-rows-transB adds 512 products into outputs up to ~45: up to ~1.5e-2 (webgpu).
F16_ATOL = {"Conv-wide": 3e-2, "Gemm-eight-rows-transB": 3e-2}
case("Conv-float16", "Conv", consts={"w", "b"}, **F16, x=h(1, 3, 8, 8), w=h(4, 3, 3, 3), b=h(4))
case(
    "ConvTranspose-float16", CT, {"strides": [2, 2]}, {"w"}, **F16, x=h(1, 3, 5, 5), w=h(3, 2, 3, 3)
)
case(
    "BatchNormalization-float16",
    "BatchNormalization",
    consts={"s", "b", "m", "v"},
    **F16,
    x=h(1, 3, 4, 4),
    s=h(3),
    b=h(3),
    m=h(3),
    v=U(3, dtype=np.float16),
)
case(
    "AveragePool-float16",
    "AveragePool",
    {"kernel_shape": [3, 3], "pads": [1] * 4},
    **F16,
    x=h(1, 3, 8, 8),
)
case("MaxPool-float16", "MaxPool", {"kernel_shape": [3, 3]}, x=h(1, 3, 8, 8))
case("GlobalAveragePool-float16", "GlobalAveragePool", **F16, x=h(1, 3, 8, 8))
case("ReduceMean-float16", "ReduceMean", **F16, x=h(2, 3, 8))
case("ReduceSum-float16", "ReduceSum", **F16, x=h(2, 3, 8), axes=i64(1), consts={"axes"})
case("ReduceMax-float16", "ReduceMax", x=h(2, 3, 8))
case("ArgMin-float16", "ArgMin", {"axis": 1}, x=h(2, 30))
case("TopK-float16", "TopK", consts={"k"}, x=h(2, 30), k=i64(4))
case("LogSoftmax-float16", "LogSoftmax", **F16, x=h(2, 30))
case(
    "LayerNormalization-float16",
    "LayerNormalization",
    consts={"s", "b"},
    **F16,
    x=h(2, 3, 16),
    s=h(16),
    b=h(16),
)
case("InstanceNormalization-float16", "InstanceNormalization", **F16, x=h(2, 3, 9), s=h(3), b=h(3))
case(
    "GroupNormalization-float16",
    "GroupNormalization",
    {"num_groups": 2},
    **F16,
    x=h(2, 4, 9),
    s=h(4),
    b=h(4),
)
case("Gemm-float16", "Gemm", {"alpha": 0.5}, **F16, a=h(3, 4), b=h(4, 5), c=h(5))
case("MatMul-float16", "MatMul", **F16, a=h(3, 4), b=h(4, 5))
resize_scales = f32(1, 1, 2, 2)
case(
    "Resize-linear-float16",
    "Resize",
    {"mode": "linear"},
    {"scales"},
    **F16,
    x=h(1, 3, 4, 4),
    roi=None,
    scales=resize_scales,
)
case(
    "Resize-nearest-float16",
    "Resize",
    consts={"scales"},
    x=h(1, 3, 4, 4),
    roi=None,
    scales=resize_scales,
)
case(
    "Pad-float16",
    "Pad",
    consts={"p", "v"},
    x=h(2, 3),
    p=i64(1, 1, 1, 1),
    v=np.array(1.5, np.float16),
)
case("Where-float16", "Where", c=B(3, 4), x=h(3, 4), y=h(4))
case("Max-float16", "Max", a=h(2, 3, 4), b=h(4), c=h(3, 1))
case("Mean-float16", "Mean", **F16, a=h(3, 4), b=h(3, 4))
case("Gelu-float16", "Gelu", **F16, x=h(3, 16))
case("Exp-float16", "Exp", **F16, x=h(3, 4))
case("Less-float16", "Less", a=h(3, 4), b=h(4))
case("IsInf-float16", "IsInf", x=Rand((3, 4), dtype=np.float16, special=0.4))
case("Mod-float16-fmod1", "Mod", {"fmod": 1}, **F16, a=h(3, 4), b=Rand((4,), "signed", np.float16))

# -- indexing and data movement -------------------------------------------------------------------
# Index inputs cover negative entries; "fed" indices run the GPU kernels that read them at run
# time, constant ones (consts) the gather tables.

G = "Gather"
case(f"{G}-axis0-fed", G, data=N(5, 4, 3), idx=I(2, 3, lo=-5, hi=5))
case(f"{G}-axis1-const", G, {"axis": 1}, {"idx"}, data=N(2, 6, 3), idx=I(4, lo=-6, hi=6))
case(f"{G}-axis-last-fed", G, {"axis": -1}, data=N(3, 4, 5), idx=I(2, 2, lo=-5, hi=5))
case(f"{G}-scalar-index-const", G, {"axis": 1}, {"idx"}, data=N(4, 5), idx=np.array(-2))
case(f"{G}-scalar-index-fed", G, data=N(4, 5), idx=Rand((), "int", np.int64, lo=-4, hi=4))
case(f"{G}-int32-indices", G, data=N(6, 3), idx=I(7, lo=-6, hi=6, dtype=np.int32))
case(f"{G}-int64-data", G, {"axis": 1}, data=I(3, 6, lo=-99, hi=99), idx=I(2, 2, lo=-6, hi=6))
case(f"{G}-embedding", G, consts={"table"}, table=N(50, 8), ids=I(2, 7, lo=0, hi=50))
case(f"{G}-int64-shape-const", G, consts={"idx"}, data=I(4, lo=1, hi=9), idx=i64(3, -4, 0))

GE = "GatherElements"
case(f"{GE}-axis0-fed", GE, data=N(4, 3), idx=I(5, 3, lo=-4, hi=4))
case(f"{GE}-axis1-smaller", GE, {"axis": 1}, data=N(3, 5), idx=I(2, 4, lo=-5, hi=5))
case(f"{GE}-negative-axis-3d", GE, {"axis": -2}, data=N(2, 4, 3), idx=I(2, 6, 3, lo=-4, hi=4))
case(f"{GE}-const", GE, {"axis": 1}, {"idx"}, data=N(3, 4, 2), idx=I(3, 5, 2, lo=-4, hi=4))

GN = "GatherND"
case(f"{GN}-pairs", GN, data=N(3, 4, 5), idx=I(2, 2, lo=-3, hi=3))
case(f"{GN}-full-const", GN, consts={"idx"}, data=N(3, 4), idx=I(5, 2, lo=-3, hi=3))
case(f"{GN}-batch-dims1", GN, {"batch_dims": 1}, data=N(2, 3, 4), idx=I(2, 5, 1, lo=-3, hi=3))
case(
    f"{GN}-batch-dims2-int64",
    GN,
    {"batch_dims": 2},
    data=I(2, 3, 4, 5),
    idx=I(2, 3, 2, 2, lo=-4, hi=4),
)
case(f"{GN}-slices-600", GN, data=N(40, 30, 20), idx=I(30, 20, 1, lo=-40, hi=40))

case("Split-sizes", "Split", {"axis": 1}, {"s"}, x=N(2, 7, 3), s=i64(2, 4, 1))
case("Split-sizes-with-zero", "Split", consts={"s"}, x=N(5, 2), s=i64(3, 0, 2))
case("Split-num-outputs", "Split", {"axis": -1, "num_outputs": 3}, x=N(2, 3, 9))
case("Split-num-outputs-uneven", "Split", {"num_outputs": 3}, x=N(7, 2))
case("Split-int64", "Split", {"num_outputs": 2}, x=I(4, 3))

case("Expand-broadcast", "Expand", consts={"s"}, x=N(3, 1), s=i64(2, 3, 4))
case("Expand-shape-smaller", "Expand", consts={"s"}, x=N(2, 1, 5), s=i64(3, 1))
case("Expand-int64", "Expand", consts={"s"}, x=I(1, 4), s=i64(3, 4))
case("Tile", "Tile", consts={"r"}, x=N(2, 3, 4), r=i64(2, 1, 3))
case("Tile-int64", "Tile", consts={"r"}, x=I(3), r=i64(4))

COS = "ConstantOfShape"
case(f"{COS}-default", COS, consts={"s"}, s=i64(2, 3))
case(f"{COS}-float", COS, {"value": TensorAttr((1,))}, {"s"}, s=i64(3, 1, 4))
case(f"{COS}-int64", COS, {"value": TensorAttr((1,), "int", np.int64)}, {"s"}, s=i64(5))
case(f"{COS}-large", COS, {"value": TensorAttr((1,))}, {"s"}, s=i64(300, 301))
case("Range-int64", "Range", consts="abc", a=np.array(-3), b=np.array(17), c=np.array(4))
case("Range-negative-delta", "Range", consts="abc", a=np.array(5), b=np.array(-6), c=np.array(-2))
case(
    "Range-float",
    "Range",
    consts="abc",
    a=np.array(1.5, np.float32),
    b=np.array(4.0, np.float32),
    c=np.array(0.25, np.float32),
)
case("Range-empty", "Range", consts="abc", a=np.array(3), b=np.array(1), c=np.array(1))
case(
    "Range-large",
    "Range",
    consts="abc",
    a=np.array(-0.5, np.float32),
    b=np.array(7e3, np.float32),
    c=np.array(0.0625, np.float32),
)

for upper in (0, 1):
    name = "Triu" if upper else "Tril"
    case(f"Trilu-{name}", "Trilu", {"upper": upper}, x=N(2, 4, 5))
    for k in (-2, 1, 7):
        case(f"Trilu-{name}-k{k}", "Trilu", {"upper": upper}, {"k"}, x=N(3, 5, 4), k=i64(k))
case("Trilu-int64", "Trilu", x=I(4, 4))

ON = "OneHot"
hot = f32(-0.5, 2.0)
case(f"{ON}-default-axis", ON, consts={"d", "v"}, i=I(2, 3, lo=-5, hi=5), d=i64(5), v=hot)
case(f"{ON}-axis0", ON, {"axis": 0}, {"d", "v"}, i=I(4, lo=-3, hi=3), d=f32(3), v=hot)
case(
    f"{ON}-out-of-range-int64-values",
    ON,
    {"axis": 1},
    {"d", "v"},
    i=I(2, 3, lo=-8, hi=8),
    d=i64(4),
    v=i64(0, 7),
)
case(
    f"{ON}-fed-values",
    ON,
    {"axis": -1},
    {"d"},
    i=I(30, 20, lo=-12, hi=12),
    d=i64(9),
    v=hot,
)

SE = "ScatterElements"
case(
    f"{SE}-none",
    SE,
    {"axis": 1},
    data=N(3, 5),
    idx=i64([0, -1, 2], [4, 1, -2], [3, 0, 1]),
    upd=N(3, 3),
)
for reduction in ("add", "mul", "max", "min"):
    case(
        f"{SE}-{reduction}",
        SE,
        {"axis": 1, "reduction": reduction},
        data=N(3, 5),
        idx=I(3, 4, lo=-5, hi=5),  # repeats within a row: reductions accumulate
        upd=N(3, 4),
    )
case(
    f"{SE}-axis0-const",
    SE,
    consts={"idx"},
    data=N(4, 3),
    idx=i64([1, 0, 2], [-1, 3, 0]),
    upd=N(2, 3),
)
case(
    f"{SE}-int64-add", SE, {"reduction": "add"}, data=I(5, 2), idx=I(3, 2, lo=-5, hi=5), upd=I(3, 2)
)

SN = "ScatterND"
for reduction in ("add", "mul", "max", "min"):
    case(
        f"{SN}-{reduction}",
        SN,
        {"reduction": reduction},
        data=N(4, 3, 2),
        idx=I(5, 1, lo=-4, hi=4),
        upd=N(5, 3, 2),
    )
# distinct index tuples: with repeats and no reduction, which update lands is unspecified
case(
    f"{SN}-none-elements",
    SN,
    consts={"idx"},
    data=N(3, 4),
    idx=i64([0, 1], [-1, 2], [1, -4]),
    upd=N(3),
)
case(f"{SN}-none-slices", SN, data=N(4, 2, 3), idx=np.array([[2], [-4]], np.int64), upd=N(2, 2, 3))
case(
    f"{SN}-add-pairs-large",
    SN,
    {"reduction": "add"},
    data=N(30, 20, 9),
    idx=I(50, 2, lo=-20, hi=20),
    upd=N(50, 9),
)
case(
    f"{SE}-max-axis2-narrower-updates",
    SE,
    {"axis": 2, "reduction": "max"},
    data=N(4, 30, 20),
    idx=I(3, 25, 30, lo=-20, hi=20),
    upd=N(3, 25, 30),
)

case("NonZero", "NonZero", x=Rand((3, 4, 2), "normal", zeros=0.5))
case("NonZero-int64", "NonZero", x=Rand((6,), "int", np.int64, lo=-2, hi=3))
case("NonZero-bool", "NonZero", x=Rand((2, 5), "bool", np.bool_))

CS = "CumSum"
for exclusive in (0, 1):
    for reverse in (0, 1):
        attrs = {"exclusive": exclusive, "reverse": reverse}
        case(f"{CS}-exclusive{exclusive}-reverse{reverse}", CS, attrs, {"a"}, x=N(3, 5), a=i64(1))
case(f"{CS}-axis0-int32", CS, consts={"a"}, x=I(4, 3, dtype=np.int32), a=np.array(0, np.int32))
case(f"{CS}-negative-axis-fed", CS, {"exclusive": 1}, x=N(2, 3, 4), a=i64(-2))
case(f"{CS}-middle-axis-long", CS, {"reverse": 1}, {"a"}, x=N(3, 700, 5), a=i64(1))
case(
    f"{CS}-int64-exclusive-reverse",
    CS,
    {"exclusive": 1, "reverse": 1},
    {"a"},
    x=I(50, 300),
    a=i64(-1),
)

EINSUMS = {
    "attention-scores": ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
    "attention-values": ("bhqk,bhkd->bhqd", (2, 3, 4, 6), (2, 3, 6, 5)),
    "batch-matmul": ("bij,bjk->bik", (3, 4, 5), (3, 5, 2)),
    "outer": ("i,j->ij", (4,), (3,)),
    "implicit-output": ("ij,jk", (3, 4), (4, 2)),
    "ellipsis": ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
}
for name, (equation, sa, sb) in EINSUMS.items():
    case(f"Einsum-{name}", "Einsum", {"equation": equation}, a=N(*sa), b=N(*sb))
case("Einsum-transpose", "Einsum", {"equation": "ij->ji"}, a=N(3, 4))
case("Einsum-trace", "Einsum", {"equation": "ii->"}, a=N(4, 4))
case("Einsum-diagonal-batch", "Einsum", {"equation": "bii->bi"}, a=N(2, 3, 3))
case("Einsum-sum-axis", "Einsum", {"equation": "ijk->i"}, a=N(3, 4, 5))
case(
    "Einsum-ellipsis-broadcast",
    "Einsum",
    {"equation": "...ij,...jk->...ik"},
    a=N(2, 1, 3, 4),
    b=N(1, 5, 4, 2),
)
case(
    "Einsum-three-operands", "Einsum", {"equation": "ij,jk,kl->il"}, a=N(3, 4), b=N(4, 5), c=N(5, 2)
)
case("Einsum-int64", "Einsum", {"equation": "ij,j->i"}, a=I(3, 4), b=I(4))
case(
    "Einsum-attention-64",
    "Einsum",
    {"equation": "bhqd,bhkd->bhqk"},
    a=N(1, 4, 70, 64),
    b=N(1, 4, 50, 64),
    atol=1e-4,
)


# -- geometry (tinydl's own ops; onnxruntime judges them through opcheck.ORT_EQUIVALENTS) --------


def warp_matrices(seed: int, k: int, h: int, w: int, perspective: bool = False) -> np.ndarray:
    """k random crop matrices (output pixel -> image pixel): rotated, scaled, shifted, some of
    each crop outside the h x w image; with `perspective`, a non-zero last row."""
    rng = np.random.default_rng(seed)
    angle = rng.uniform(-np.pi, np.pi, k)
    scale = rng.uniform(0.6, 1.6, (k, 2))
    m = np.zeros((k, 3, 3))
    m[:, 0, 0], m[:, 0, 1] = np.cos(angle) * scale[:, 0], -np.sin(angle) * scale[:, 1]
    m[:, 1, 0], m[:, 1, 1] = np.sin(angle) * scale[:, 0], np.cos(angle) * scale[:, 1]
    m[:, 0, 2], m[:, 1, 2] = rng.uniform(-2, w + 1, k), rng.uniform(-2, h + 1, k)
    m[:, 2, 2] = 1
    if perspective:
        m[:, 2, :2] = rng.uniform(-0.03, 0.03, (k, 2))
    return m.astype(np.float32)


W = "tinydl.Warp"
WARP_SIZE = {"output_height": 6, "output_width": 7}
for border in ("zero", "replicate"):
    case(
        f"Warp-affine-{border}",
        W,
        {**WARP_SIZE, "border": border},
        x=U(1, 3, 9, 11, lo=0.5),
        m=warp_matrices(1, 2, 9, 11),
    )
    case(
        f"Warp-perspective-{border}-NHWC",
        W,
        {**WARP_SIZE, "border": border, "layout": "NHWC"},
        x=U(1, 10, 8, 3, lo=0.5),
        m=warp_matrices(2, 3, 10, 8, perspective=True),
    )
case("Warp-crop-per-image", W, WARP_SIZE, x=U(2, 2, 7, 7, lo=0.5), m=warp_matrices(3, 2, 7, 7))
case(  # the output size as an input (a constant here; computed from shapes in the OCR crops)
    "Warp-size-input-NHWC",
    W,
    {"border": "replicate", "layout": "NHWC"},
    consts={"s"},
    x=U(1, 10, 8, 3, lo=0.5),
    m=warp_matrices(4, 3, 10, 8, perspective=True),
    s=np.array([5, 9], np.int64),
)


def crop_matrices(seed: int, k: int) -> np.ndarray:
    """k 4x4 MediaPipe crop matrices: rotated, scaled, shifted so part of each crop falls
    outside a 9 x 11 input."""
    rng = np.random.default_rng(seed)
    m = np.tile(np.eye(4, dtype=np.float32), (k, 1, 1))
    for i in range(k):
        angle, scale = rng.uniform(-np.pi, np.pi), rng.uniform(0.8, 1.6)
        c, s = np.cos(angle) * scale, np.sin(angle) * scale
        m[i, :2, :2] = [[c, -s], [s, c]]
        m[i, :2, 3] = rng.uniform(-2, 8, 2)
    return m


# MediaPipe's custom ops (the attention face mesh): judged against the reference, which
# test_tflite.py checks against MediaPipe's own loops.
TTB, L2T = "tinydl.TransformTensorBilinear", "tinydl.Landmarks2TransformMatrix"
CROP = {"output_height": 7, "output_width": 8}
case(f"{TTB}-one-matrix", TTB, CROP, into=REFERENCE_CASES, x=N(2, 3, 9, 11), m=crop_matrices(1, 1))
case(f"{TTB}-per-image", TTB, CROP, into=REFERENCE_CASES, x=N(3, 2, 9, 11), m=crop_matrices(2, 3))
case(
    L2T,
    L2T,
    {
        "left_rotation_idx": 5,
        "right_rotation_idx": 17,
        "subset_idxs": [3, 7, 11, 12, 20, 25, 29],
        "target_rotation_radians": 0.25,
        "output_height": 12,
        "output_width": 20,
        "scale_x": 1.5,
        "scale_y": 1.25,
    },
    atol=1e-3,  # translations of about 100 pixels, in float32 here against float64
    into=REFERENCE_CASES,
    lm=U(3, 30, 3, lo=0.0, hi=190.0),
)

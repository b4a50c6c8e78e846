"""ONNX conformance: tinydl as an `onnx.backend.base.Backend`, run through onnx.backend.test.

Only the node tests (`onnx/backend/test/case/node`) of the ops tinydl claims are collected, on CPU
device names; the backend itself comes from TINYDL_BACKEND (default cpu). Every exclusion in
EXCLUDED carries a one-line reason; `tools/conformance_summary.py` prints the counts for the README.
onnx's own rtol/atol apply.

onnx stamps its node tests with the newest opset of each op (up to 28), or an old one (And, Not:
1 and 7), while tinydl reads opsets 11-23: such models are first converted with
`onnx.version_converter`, as tinydl's own error message advises, and a model that cannot be
converted fails.
"""

from __future__ import annotations

import os
import re
import warnings

import onnx
import onnx.backend.base
import onnx.backend.test
import onnx.version_converter
import pytest

import tinydl
from tinydl.importers.onnx import MAX_OPSET, MIN_OPSET, from_model
from tinydl.ops import REGISTRY

# The ops tinydl claims are those of its op registry (tinydl.ops.REGISTRY) but these, each with
# why its node tests are not run (one line each).
NOT_CLAIMED = {
    "Dropout": "registered so that models with it load (the identity at inference), not claimed",
}
# onnx names an op's node tests (after "test_") by its name in lower case, except these. The
# lookaheads keep `conv` off `convinteger`/`convtranspose` and `constant` off `constant_pad`.
TEST_NAMES = {
    "Conv": r"(basic_)?conv(?!integer|transpose)",
    "BatchNormalization": r"batchnorm",
    "ReduceMean": r"reduce_mean",
    "ReduceMax": r"reduce_max",
    "ReduceMin": r"reduce_min",
    "ReduceSum": r"reduce_sum",
    "ReduceProd": r"reduce_prod",
    "ReduceL1": r"reduce_l1",
    "ReduceL2": r"reduce_l2",
    "ReduceLogSum": r"reduce_log_sum",
    "ReduceLogSumExp": r"reduce_log_sum_exp",
    "ReduceSumSquare": r"reduce_sum_square",
    "TopK": r"top_k",
    "LayerNormalization": r"layer_normalization",
    "InstanceNormalization": r"instancenorm",
    "GroupNormalization": r"group_normalization",
    "Constant": r"constant(?!_pad)",
    "Pad": r"(constant|edge|reflect|wrap)_pad",
    "RNN": r"(simple_)?rnn",
    "Gather": r"gather(?!_elements|nd)",
    "GatherElements": r"gather_elements",
    "ScatterElements": r"scatter_elements",
    "Split": r"split(?!_to_sequence)",
    "Trilu": r"tri[lu]",
    "GreaterOrEqual": r"greater_equal",
    "LessOrEqual": r"less_equal",
    "Loop": r"loop\d*",
    "Scan": r"scan\d*",
}
# Claimed op -> the name onnx gives its node tests. Ops of tinydl's own domain ("tinydl.", made
# by the optimizer) have no ONNX tests.
CLAIMED = {
    op: TEST_NAMES.get(op, op.lower())
    for op in sorted(REGISTRY)
    if not op.startswith("tinydl.") and op not in NOT_CLAIMED
}
_stale = (set(TEST_NAMES) | set(NOT_CLAIMED)) - set(REGISTRY)
assert not _stale, f"TEST_NAMES/NOT_CLAIMED name ops the registry no longer has: {sorted(_stale)}"
# A fragment must be followed by "_" or the end, so `add` does not take `test_addition_...`.
INCLUDE = re.compile(r"^test_(" + "|".join(CLAIMED.values()) + r")(_|$)")

# Test-name regex -> why tinydl deliberately does not run it (one line each; tools/ counts them).
EXCLUDED = {
    r"^test_cast_.*(BFLOAT16|FLOAT8|FLOAT4|INT4|INT2)": (
        "bfloat16, float8, float4 and 2/4-bit integer types: tinydl carries float16/32/64, "
        "(u)int8-64 and bool only"
    ),
    r"^test_identity_(opt|sequence)_": "optional and sequence values: tinydl runs tensors only",
    r"^test_if_(opt|seq)_": "If over optional and sequence values: tinydl runs tensors only",
    r"^test_loop1[36]_seq": "Loop over sequence and optional values: tinydl runs tensors only",
    r"^test_scan_sum_": (
        "Scan-8 (batch axis, sequence_lens): its data keep the batch axis Scan-9 dropped; tinydl "
        "reads opsets 11-23"
    ),
    r"^test_(einsum|onehot|range)_.*bfloat16": "bfloat16: tinydl carries float16/32/64 only",
    r"^test_range_float16_": "float16 Range: ONNX allows it from opset 27; tinydl reads up to 23",
    r"^test_maxpool_with_argmax_": "MaxPool's second output (Indices): not supported",
    r"^test_resize_.*_antialias_": "Resize antialias=1: not supported",
    r"^test_resize_downsample_scales_(linear|cubic)_align_corners_": (
        "align_corners with a fractional scale*length: onnx's reference divides by it, tinydl "
        "and onnxruntime by the integer output length (ORT skips these too)"
    ),
    r"^test_(relu|leakyrelu|prelu|hardsigmoid|elu|selu|softplus|softsign|gelu|reduce_l2|"
    r"reduce_log_sum_exp)_.*expanded": (
        "function-expanded variant built with CastLike, which tinydl does not claim"
    ),
    r"^test_layer_normalization_.*expanded": (
        "function-expanded variant built with Size, which tinydl does not claim"
    ),
    r"^test_equal_string": "string tensors: tinydl carries numbers and bools only",
    r"^test_mod_.*float.*fmod_0": (
        "Mod of floats with fmod=0 is opset 28's; tinydl reads opsets up to 23 (ORT refuses it)"
    ),
}


class TinyDLRep(onnx.backend.base.BackendRep):
    def __init__(self, model: onnx.ModelProto):
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [v.name for v in model.graph.input if v.name not in initializers]
        self.output_names = [v.name for v in model.graph.output]
        backend = os.environ.get("TINYDL_BACKEND", "numpy")
        self.session = tinydl.compile(from_model(model), backends=(backend,))

    def run(self, inputs, **kwargs):
        results = self.session.run(dict(zip(self.input_names, inputs, strict=True)))
        return tuple(results[name] for name in self.output_names)


class TinyDLBackend(onnx.backend.base.Backend):
    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if not MIN_OPSET <= opset <= MAX_OPSET:
            model = onnx.version_converter.convert_version(
                model, min(max(opset, MIN_OPSET), MAX_OPSET)
            )
        return TinyDLRep(model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


with warnings.catch_warnings():
    # onnx computes its expected outputs at import; their overflow/divide warnings are not ours.
    warnings.simplefilter("ignore", RuntimeWarning)
    backend_test = onnx.backend.test.BackendTest(TinyDLBackend, __name__)
for pattern in CLAIMED.values():
    backend_test.include(rf"^test_{pattern}(_|$)")
for pattern in EXCLUDED:
    backend_test.exclude(pattern)

with warnings.catch_warnings():
    # enable_report tags every case with onnx's coverage mark, which this project does not register.
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    _cases = backend_test.enable_report().test_cases

# Keep the claimed node tests on CPU only, so pytest's "skipped" count is exactly the exclusions.
OnnxBackendNodeModelTest = _cases["OnnxBackendNodeModelTest"]
for _name in [n for n in vars(OnnxBackendNodeModelTest) if n.startswith("test_")]:
    if not (_name.endswith("_cpu") and INCLUDE.search(_name)):
        delattr(OnnxBackendNodeModelTest, _name)

"""Fuzz the loaders: every mutated .onnx/.tdl file either loads or raises InvalidModelError.

Seed models are mutated with a seeded RNG (byte flips, random overwrites, truncations, inserted
and deleted runs; structure-aware edits of the .tdl JSON header and of the ONNX protobuf), and
each case is loaded with `tinydl.load` under a time limit. A loaded model is also compiled for
the cpu backend (never run: a random graph may ask for huge tensors).

By default about 2,000 cases run (a few seconds); `TINYDL_FUZZ_CASES=10000` scales them up and
`TINYDL_FUZZ_SEED` changes the RNG seed. A failure lists the seed model, the case's RNG label
and mutation, so `_mutated(seed, label)` rebuilds the exact file.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers.fuzz import (
    BYTE_MUTATIONS,
    INTERESTING_FLOATS,
    INTERESTING_INTS,
    MEMORY_HEADROOM,
    MODE_STRINGS,
    CaseTimeout,
    check_case,
    delete_run,
    flip_bits,
    insert_run,
    memory_cap,
    mutate_json,
    overwrite_run,
    time_limit,
    truncate,
)
from onnx import TensorProto, helper, numpy_helper

import tinydl
from tinydl.ops import REGISTRY

CASES = int(os.environ.get("TINYDL_FUZZ_CASES", "2000"))
BASE_SEED = os.environ.get("TINYDL_FUZZ_SEED", "0")
# The real-world seed is large, so it gets a small share of the cases.
BIG_SEED_SHARE = 0.03

PPOCR_DET = "ch_PP-OCRv4_det_infer.onnx"
EXTERNAL_DATA = "w.bin"


# -- seed models ------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=(), opset=17, name="seed"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def _init(rng, name, shape, dtype=np.float32):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def _elementwise(opset: int):
    rng = np.random.default_rng(opset)
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "scale"], ["m"], name="mul"),
        helper.make_node("Clip", ["m", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("Softmax", ["c"], ["s"], name="softmax", axis=-1),
        helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid"),
    ]
    inits = [
        _init(rng, "bias", (4,)),
        _init(rng, "scale", (1, 4)),
        numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(1.0, np.float32), "hi"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", f, ["N", 4])],
        [helper.make_tensor_value_info("y", f, ["N", 4])],
        inits,
        opset,
    )


def _convnet(opset: int):
    rng = np.random.default_rng(opset)
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node(
            "Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], kernel_shape=[3, 3]
        ),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "Conv",
            ["r1", "w2"],
            ["c2"],
            name="conv2",
            pads=[1, 1, 1, 1],
            strides=[1, 1],
            dilations=[1, 1],
            group=1,
        ),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="skip"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    inits = [_init(rng, "w1", (4, 3, 3, 3)), _init(rng, "b1", (4,)), _init(rng, "w2", (4, 4, 3, 3))]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", f, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", f, [1, 4, 8, 8])],
        inits,
        opset,
    )


def _shapes(opset: int):
    f = TensorProto.FLOAT

    def const(name, values):
        tensor = numpy_helper.from_array(np.array(values, np.int64), name)
        return helper.make_node("Constant", [], [name], name=f"{name}_const", value=tensor)

    nodes = [
        const("shape", [2, 12]),
        helper.make_node("Reshape", ["x", "shape"], ["flat"], name="reshape"),
        helper.make_node("Concat", ["flat", "extra"], ["cat"], name="concat", axis=1),
        const("starts", [0, 1]),
        const("ends", [2, 9]),
        const("axes", [0, 1]),
        const("steps", [1, 2]),
        helper.make_node("Slice", ["cat", "starts", "ends", "axes", "steps"], ["sl"], name="slice"),
        helper.make_node("Shape", ["sl"], ["sl_shape"], name="shape_of"),
        helper.make_node("Concat", ["sl_shape", "one"], ["shape3"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["sl", "shape3"], ["r3"], name="reshape3"),
        helper.make_node("Relu", ["r3"], ["y"], name="relu"),
    ]
    inits = [
        numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "extra"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", f, [2, 3, 4])],
        [helper.make_tensor_value_info("y", f, [2, 4, 1])],
        inits,
        opset,
    )


def _zoo(opset: int):
    """One node of most registered ops, so mutated attributes reach each op's shape inference."""
    rng = np.random.default_rng(opset)
    n = helper.make_node

    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    def floats(name, values):
        return numpy_helper.from_array(np.array(values, np.float32), name)

    inits = [
        _init(rng, "bn_scale", (4,)),
        _init(rng, "bn_bias", (4,)),
        _init(rng, "bn_mean", (4,)),
        floats("bn_var", rng.uniform(0.5, 2, 4)),
        _init(rng, "wt", (4, 4, 2, 2)),
        floats("roi", np.zeros(0)),
        floats("scales", [1, 1, 2, 2]),
        ints("pads", [0, 0, 1, 1, 0, 0, 1, 1]),
        _init(rng, "gw", (4, 6)),
        _init(rng, "gb", (6,)),
        _init(rng, "mw", (6, 6)),
        _init(rng, "slope", (6,)),
        floats("two", 2.0),
    ]
    if opset >= 13:
        inits += [ints("sq_axes", [2, 3]), ints("us_axes", [0])]
        squeeze = n("Squeeze", ["gap", "sq_axes"], ["sq"], name="squeeze")
        unsqueeze = n("Unsqueeze", ["pr", "us_axes"], ["us"], name="unsqueeze")
    else:
        squeeze = n("Squeeze", ["gap"], ["sq"], name="squeeze", axes=[2, 3])
        unsqueeze = n("Unsqueeze", ["pr"], ["us"], name="unsqueeze", axes=[0])
    hard_swish = (
        n("HardSwish", ["lr"], ["hs"], name="hswish")
        if opset >= 14
        else n("Relu", ["lr"], ["hs"], name="relu")
    )
    nodes = [
        n(
            "BatchNormalization",
            ["x", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
            ["bn"],
            name="bn",
        ),
        n("ConvTranspose", ["bn", "wt"], ["ct"], name="deconv", strides=[2, 2]),
        n("MaxPool", ["ct"], ["mp"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        n("AveragePool", ["mp"], ["ap"], name="avgpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("Resize", ["ap", "roi", "scales"], ["rs"], name="resize", mode="nearest"),
        n("DepthToSpace", ["rs"], ["d2s"], name="d2s", blocksize=2),
        n("Pad", ["d2s", "pads"], ["pd"], name="pad", mode="constant"),
        n("LeakyRelu", ["pd"], ["lr"], name="leaky", alpha=0.1),
        hard_swish,
        n("HardSigmoid", ["hs"], ["hsig"], name="hsig"),
        n("Tanh", ["hsig"], ["th"], name="tanh"),
        n("Flatten", ["th"], ["fl"], name="flatten", axis=1),
        n("Cast", ["fl"], ["c16"], name="to_half", to=TensorProto.FLOAT16),
        n("Cast", ["c16"], ["c32"], name="to_float", to=TensorProto.FLOAT),
        n("Softmax", ["c32"], ["sm"], name="softmax", axis=1),  # opset 12: the legacy rewrite
        n("Identity", ["sm"], ["idn"], name="identity"),
        n("GlobalAveragePool", ["bn"], ["gap"], name="gap"),
        squeeze,
        n("Gemm", ["sq", "gw", "gb"], ["gm"], name="gemm"),
        n("MatMul", ["gm", "mw"], ["mm"], name="matmul"),
        n("PRelu", ["mm", "slope"], ["pr"], name="prelu"),
        unsqueeze,
        n("Transpose", ["us"], ["tr"], name="transpose", perm=[2, 0, 1]),
        n("ReduceMean", ["tr"], ["rm"], name="mean", axes=[0], keepdims=1),
        n("Sub", ["idn", "rm"], ["sub"], name="sub"),
        n("Pow", ["sub", "two"], ["pw"], name="pow"),
        n("Sqrt", ["pw"], ["sq2"], name="sqrt"),
        n("Div", ["sq2", "two"], ["y"], name="div"),
    ]
    f = TensorProto.FLOAT
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", f, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", f, [1, 1, 1156])],
        inits,
        opset,
    )


ZOO_OPS = {
    "BatchNormalization",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "Resize",
    "DepthToSpace",
    "Pad",
    "LeakyRelu",
    "HardSwish",
    "HardSigmoid",
    "Tanh",
    "Flatten",
    "Cast",
    "Softmax",
    "Identity",
    "GlobalAveragePool",
    "Squeeze",
    "Gemm",
    "MatMul",
    "PRelu",
    "Unsqueeze",
    "Transpose",
    "ReduceMean",
    "Sub",
    "Pow",
    "Sqrt",
    "Div",
    "Shape",
    "Reshape",
}
SMALL_SEEDS = {
    "elementwise_op12": (
        lambda: _elementwise(12),
        {"Add", "Relu", "Mul", "Clip", "Softmax", "Sigmoid"},
    ),
    "elementwise_op17": (
        lambda: _elementwise(17),
        {"Add", "Relu", "Mul", "Clip", "Softmax", "Sigmoid"},
    ),
    "convnet_op12": (lambda: _convnet(12), {"Conv", "Relu", "Add"}),
    "convnet_op17": (lambda: _convnet(17), {"Conv", "Relu", "Add"}),
    "shapes_op17": (
        lambda: _shapes(17),
        {"Constant", "Reshape", "Concat", "Slice", "Shape", "Relu"},
    ),
    "zoo_op12": (lambda: _zoo(12), ZOO_OPS),
    "zoo_op17": (lambda: _zoo(17), ZOO_OPS),
}


def _ppocr_path() -> Path | None:
    try:
        import rapidocr_onnxruntime
    except ImportError:
        return None
    path = Path(rapidocr_onnxruntime.__file__).parent / "models" / PPOCR_DET
    return path if path.is_file() else None


@dataclass
class Seed:
    name: str
    suffix: str
    data: bytes
    big: bool = False


def _seed_params():
    params = []
    for name, (_, ops) in SMALL_SEEDS.items():
        missing = sorted(ops - set(REGISTRY))
        marks = [pytest.mark.skip(reason=f"ops not registered yet: {missing}")] if missing else []
        for suffix in (".onnx", ".tdl"):
            params.append(pytest.param(name, suffix, id=f"{name}{suffix}", marks=marks))
    params.append(
        pytest.param(
            "ppocr_det",
            ".onnx",
            id="ppocr_det.onnx",
            marks=[
                pytest.mark.skipif(
                    _ppocr_path() is None, reason="rapidocr_onnxruntime is not installed"
                ),
            ],
        )
    )
    return params


_SEED_CACHE: dict[tuple[str, str], Seed] = {}


def _seed(name: str, suffix: str, tmp_dir: Path) -> Seed:
    key = (name, suffix)
    if key in _SEED_CACHE:
        return _SEED_CACHE[key]
    if name == "ppocr_det":
        seed = Seed(name, suffix, _ppocr_path().read_bytes(), big=True)
    else:
        onnx_bytes = SMALL_SEEDS[name][0]().SerializeToString()
        data = onnx_bytes
        if suffix == ".tdl":
            src = tmp_dir / f"{name}.onnx"
            src.write_bytes(onnx_bytes)
            dst = tmp_dir / f"{name}.tdl"
            tinydl.save(tinydl.load(src), dst)
            data = dst.read_bytes()
        seed = Seed(name, suffix, data)
    path = tmp_dir / f"{name}.seed{suffix}"
    path.write_bytes(seed.data)
    tinydl.load(path)  # the unmutated seed must load
    _SEED_CACHE[key] = seed
    return seed


# -- mutations --------------------------------------------------------------------------------


def _tdl_split(data: bytes) -> tuple[dict, dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    doc = json.loads(header["__metadata__"]["graph"])
    return header, doc, data[8 + n :]


def _tdl_join(header: dict, doc: dict | None, body: bytes, length_delta: int = 0) -> bytes:
    if doc is not None:
        header = dict(header, __metadata__=dict(header["__metadata__"], graph=json.dumps(doc)))
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) + length_delta) + raw + body


def _tdl_json(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    header, doc, body = _tdl_split(data)
    delta = 0 if rng.random() < 0.9 else rng.choice([-1, 1, -8, 8, 1 << 20])
    if rng.random() < 0.6:
        what = "graph " + "; ".join(mutate_json(rng, doc) for _ in range(rng.randint(1, 3)))
        return what + f" (length {delta:+d})", _tdl_join(header, doc, body, delta)
    what = "header " + "; ".join(mutate_json(rng, header) for _ in range(rng.randint(1, 2)))
    return what + f" (length {delta:+d})", _tdl_join(header, None, body, delta)


def _tdl_semantic(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """A well-formed edit that gets past the structural checks into validation and inference:
    an attribute, a value name, an op, an input dim, or one element of a small weight."""
    header, doc, body = _tdl_split(data)
    nodes = doc["nodes"]
    names = sorted(
        {x for n in nodes for x in n["inputs"] + n["outputs"]} | set(doc["initializers"])
    )
    ints = INTERESTING_INTS[:-1]
    choice = rng.randrange(5)
    if choice == 0 and any(n["attrs"] for n in nodes):
        node = rng.choice([n for n in nodes if n["attrs"]])
        key = rng.choice(sorted(node["attrs"]))
        old = node["attrs"][key]
        if isinstance(old, list) and old:
            new = list(old)
            new[rng.randrange(len(new))] = rng.choice(
                ints if isinstance(old[0], int) else INTERESTING_FLOATS
            )
        elif isinstance(old, list):
            new = [rng.choice(ints) for _ in range(rng.randint(1, 6))]
        elif isinstance(old, str):
            new = rng.choice(MODE_STRINGS)
        elif isinstance(old, float):
            new = rng.choice(INTERESTING_FLOATS)
        else:
            new = rng.choice(ints)
        node["attrs"][key] = new
        what = f"node {node['name']}: {key} = {str(new)[:60]}"
    elif choice == 1:
        node = rng.choice(nodes)
        field = rng.choice(["inputs", "outputs"]) if node["inputs"] else "outputs"
        k = rng.randrange(len(node[field]))
        node[field][k] = rng.choice(names)
        what = f"node {node['name']}: {field}[{k}] = {node[field][k]!r}"
    elif choice == 2:
        node = rng.choice(nodes)
        node["op"] = rng.choice(sorted(REGISTRY))
        what = f"node {node['name']}: op = {node['op']}"
    elif choice == 3 and doc["inputs"] and doc["inputs"][0]["shape"]:
        shape = doc["inputs"][0]["shape"]
        shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 1000, 2**20, 2**39, "N", None])
        what = f"input shape = {shape}"
    else:
        small = [
            k
            for k, v in header.items()
            if k != "__metadata__"
            and v["dtype"] in ("I64", "F32")
            and 0 < v["data_offsets"][1] - v["data_offsets"][0] <= 64
        ]
        if not small:
            return _tdl_json(rng, data)
        name = rng.choice(small)
        info = header[name]
        begin, end = info["data_offsets"]
        k = rng.randrange((end - begin) // (8 if info["dtype"] == "I64" else 4))
        if info["dtype"] == "I64":
            value = rng.choice([x for x in ints if -(2**63) <= x < 2**63])
            item = struct.pack("<q", value)
        else:
            value = rng.choice(INTERESTING_FLOATS)
            with np.errstate(over="ignore"):
                item = np.float32(value).tobytes()
        pos = begin + k * len(item)
        body = body[:pos] + item + body[pos + len(item) :]
        what = f"tensor {name}[{k}] = {value}"
    return f"semantic: {what}", _tdl_join(header, doc, body)


def _tdl_header_bytes(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """A byte mutation confined to the 8-byte length and JSON header, where structure lives."""
    (n,) = struct.unpack("<Q", data[:8])
    what, head = rng.choice([flip_bits, overwrite_run, insert_run, delete_run])(rng, data[: 8 + n])
    return f"header bytes: {what}", head + data[8 + n :]


def _onnx_proto(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Edit one field of the parsed ModelProto: names, op types, attributes, dims, constants."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    g = model.graph
    names = sorted(
        {x for n in g.node for x in [*n.input, *n.output]}
        | {t.name for t in g.initializer}
        | {v.name for v in g.input}
    ) + ["", "nope"]
    ints = [x for x in INTERESTING_INTS if -(2**63) <= x < 2**63]
    tensors = list(g.initializer) + [a.t for n in g.node for a in n.attribute if a.type == a.TENSOR]
    choice = rng.randrange(9)
    if choice == 0 and g.node:
        node = rng.choice(g.node)
        field = node.input if node.input and rng.random() < 0.7 else node.output
        if field:
            k = rng.randrange(len(field))
            field[k] = rng.choice(names)
            what = f"node {node.name}: value #{k} -> {field[k]!r}"
        else:
            field.append(rng.choice(names))
            what = f"node {node.name}: add value {field[-1]!r}"
    elif choice == 1 and g.node:
        node = rng.choice(g.node)
        node.op_type = rng.choice([*sorted(REGISTRY), "Bogus", "Constant", ""])
        what = f"node {node.name}: op -> {node.op_type}"
    elif choice == 2 and any(n.attribute for n in g.node):
        node = rng.choice([n for n in g.node if n.attribute])
        attr = rng.choice(node.attribute)
        if attr.type == attr.INTS and attr.ints:
            attr.ints[rng.randrange(len(attr.ints))] = rng.choice(ints)
        elif attr.type == attr.INT:
            attr.i = rng.choice(ints)
        elif attr.type == attr.FLOAT:
            attr.f = rng.choice(INTERESTING_FLOATS)
        elif attr.type == attr.STRING and rng.random() < 0.7:
            attr.s = rng.choice(MODE_STRINGS).encode()
        else:
            attr.type = rng.randrange(15)
        what = f"node {node.name}: attribute {attr}"[:200]
    elif choice == 3 and tensors:
        t = rng.choice(tensors)
        if t.dims and rng.random() < 0.7:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(ints)
        else:
            t.dims.append(rng.choice([0, 1, 2]))
        what = f"tensor {t.name}: dims -> {list(t.dims)}"
    elif choice == 4 and tensors:
        # Constant values drive shape inference (Reshape targets, Slice bounds, Concat axes).
        t = rng.choice(tensors)
        arr = numpy_helper.to_array(t).copy()
        if arr.size and arr.dtype.kind in "iu":
            arr.flat[rng.randrange(arr.size)] = rng.choice(
                [x for x in ints if np.can_cast(np.min_scalar_type(x), arr.dtype) or abs(x) < 128]
            )
        elif arr.size:
            with np.errstate(over="ignore"):
                arr.flat[rng.randrange(arr.size)] = rng.choice(INTERESTING_FLOATS)
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
        what = f"tensor {t.name}: values -> {arr.ravel()[:8].tolist()}"
    elif choice == 5 and g.node:
        k = rng.randrange(len(g.node))
        if rng.random() < 0.5:
            del g.node[k]
            what = f"delete node #{k}"
        else:
            g.node.add().CopyFrom(g.node[k])
            what = f"duplicate node #{k}"
    elif choice == 6 and g.input:
        v = rng.choice(g.input)
        dims = v.type.tensor_type.shape.dim
        if dims:
            d = dims[rng.randrange(len(dims))]
            if rng.random() < 0.5:
                d.dim_value = rng.choice([x for x in ints if x >= 0])
            else:
                d.dim_param = rng.choice(["N", "", "x y"])
        v.type.tensor_type.elem_type = rng.choice([1, 1, 1, 7, 8, 16, 0, 99])
        what = f"input {v.name}: type -> {v.type}"[:200]
    elif choice == 7:
        model.opset_import[0].version = rng.choice([1, 10, 11, 12, 13, 17, 21, 23, 24, 10**6])
        what = f"opset -> {model.opset_import[0].version}"
    else:
        t = rng.choice(tensors) if tensors else None
        if t is None:
            return flip_bits(rng, data)
        t.data_location = rng.choice([0, 1, 1, 1])
        t.external_data.add(
            key="location",
            value=rng.choice(
                [
                    EXTERNAL_DATA,
                    EXTERNAL_DATA,
                    "../../etc/passwd",
                    "/etc/passwd",
                    ".",
                    "missing.bin",
                ]
            ),
        )
        for key in ("offset", "length"):
            if rng.random() < 0.5:
                t.external_data.add(
                    key=key, value=str(rng.choice([0, 1, 4, 16, 64, 4095, 2**40, -1, "x"]))
                )
        what = f"tensor {t.name}: external data {list(t.external_data)}"[:200]
    return f"proto: {what}", model.SerializeToString()


def _mutations(seed: Seed):
    if seed.big:
        return [flip_bits, truncate]
    if seed.suffix == ".tdl":
        return BYTE_MUTATIONS + [
            _tdl_json,
            _tdl_json,
            _tdl_header_bytes,
            _tdl_semantic,
            _tdl_semantic,
            _tdl_semantic,
        ]
    return BYTE_MUTATIONS + [_onnx_proto, _onnx_proto, _onnx_proto]


def _mutated(seed: Seed, label: str) -> tuple[str, bytes]:
    rng = random.Random(label)
    mutation = rng.choice(_mutations(seed))
    try:
        what, data = mutation(rng, seed.data)
    except (ValueError, TypeError, KeyError, IndexError):  # an edit protobuf/JSON refused to encode
        mutation = flip_bits
        what, data = flip_bits(rng, seed.data)
    if rng.random() < 0.15 and not seed.big:
        more, data = rng.choice(BYTE_MUTATIONS)(rng, data) if data else ("", data)
        what += f"; then {more}"
    return what, data


# -- running a case ---------------------------------------------------------------------------


def _case_count(seed: Seed) -> int:
    small = 2 * len(SMALL_SEEDS)
    if seed.big:
        return max(10, int(CASES * BIG_SEED_SHARE))
    return max(20, math.ceil(CASES * (1 - BIG_SEED_SHARE) / small))


@pytest.mark.parametrize(("name", "suffix"), _seed_params())
def test_mutated_models_load_or_raise_invalid_model_error(name, suffix, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"fuzz_{name}{suffix[1:]}")
    seed = _seed(name, suffix, tmp)
    (tmp / EXTERNAL_DATA).write_bytes(random.Random(0).randbytes(4096))  # for external-data edits
    failures: dict[str, str] = {}
    count = _case_count(seed)
    loaded = 0
    with memory_cap(MEMORY_HEADROOM):
        for i in range(count):
            label = f"{BASE_SEED}:{name}{suffix}:{i}"
            what, data = _mutated(seed, label)
            # Now and then a name that makes the loader sniff the format from the bytes.
            name_rng = random.Random(label + "/name")
            path = tmp / ("case" + name_rng.choice([suffix] * 8 + [".bin", ""]))
            path.write_bytes(data)
            ok, problem = check_case(path)
            loaded += ok
            if problem is not None:
                # One report per distinct failure site keeps the message readable.
                key = problem.strip().splitlines()[-1][:120] + problem.split("\n")[0]
                failures.setdefault(key, f"case {label!r}: {what}\n{problem}")
    assert not failures, (
        f"{len(failures)} distinct failure(s) in {count} mutations of {name}{suffix} "
        f"(TINYDL_FUZZ_SEED={BASE_SEED}):\n\n" + "\n\n".join(failures.values())
    )
    # Mutations that all fail the first check would test nothing past it.
    assert count < 50 or loaded > 0, f"none of {count} mutations of {name}{suffix} loaded"


def test_case_counts_meet_the_minimum():
    seeds = [Seed(n, s, b"") for n in SMALL_SEEDS for s in (".onnx", ".tdl")] + [
        Seed("big", ".onnx", b"", True)
    ]
    assert sum(_case_count(s) for s in seeds) >= min(CASES, 500)


def test_time_limit_interrupts_a_hang():
    with pytest.raises(CaseTimeout), time_limit(0.2):
        while True:
            pass


# -- loading never executes code from the file ------------------------------------------------


class _Payload:
    """Unpickling this creates `path`: proof that a loader ran code from the file."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _pickle_bytes(sentinel: Path) -> bytes:
    return pickle.dumps(_Payload(sentinel), protocol=2)


def test_pickle_payload_is_live(tmp_path):
    # Guards the tests below: the payload really does run code when something unpickles it.
    sentinel = tmp_path / "ran"
    pickle.loads(_pickle_bytes(sentinel)).close()
    assert sentinel.exists()


def _load_quietly(path: Path):
    try:
        return tinydl.load(path)
    except tinydl.InvalidModelError:
        return None


def test_tdl_with_pickle_payloads_is_data(tmp_path):
    sentinel = tmp_path / "ran"
    payload = _pickle_bytes(sentinel)
    seed = tmp_path / "seed.onnx"
    seed.write_bytes(_elementwise(17).SerializeToString())
    graph = tinydl.load(seed)
    graph.metadata["payload"] = payload.decode("latin-1")
    graph.initializers["pickled"] = np.frombuffer(payload, np.uint8)
    good = tmp_path / "good.tdl"
    tinydl.save(graph, good)
    loaded = tinydl.load(good)
    assert loaded.metadata["payload"].encode("latin-1") == payload
    assert bytes(loaded.initializers["pickled"]) == payload

    header, doc, body = _tdl_split(good.read_bytes())
    variants = {
        "graph is a pickle": dict(
            header, __metadata__=dict(header["__metadata__"], graph=payload.decode("latin-1"))
        ),
        "tensor dtype object": dict(header, pickled=dict(header["pickled"], dtype="O")),
        "tensor dtype pickle": dict(header, pickled=dict(header["pickled"], dtype="pickle")),
    }
    for what, variant in variants.items():
        path = tmp_path / f"{what.replace(' ', '_')}.tdl"
        path.write_bytes(_tdl_join(variant, None, body))
        with pytest.raises(tinydl.InvalidModelError):
            tinydl.load(path)
    # The whole file being a pickle stream.
    raw = tmp_path / "raw.tdl"
    raw.write_bytes(payload)
    assert _load_quietly(raw) is None
    assert not sentinel.exists()


def test_onnx_with_pickle_payloads_is_data(tmp_path):
    sentinel = tmp_path / "ran"
    payload = _pickle_bytes(sentinel)
    model = _elementwise(17)
    model.doc_string = payload.decode("latin-1")
    helper.set_model_props(model, {"payload": payload.decode("latin-1")})
    model.graph.initializer.append(
        numpy_helper.from_array(np.frombuffer(payload, np.uint8), "pickled")
    )
    path = tmp_path / "payload.onnx"
    path.write_bytes(model.SerializeToString())
    graph = tinydl.load(path)
    assert bytes(graph.initializers["pickled"]) == payload
    for name in ("raw.onnx", "raw.tdl", "raw.npy", "raw.pkl"):
        (tmp_path / name).write_bytes(payload)
        assert _load_quietly(tmp_path / name) is None
    assert not sentinel.exists()


def test_loaders_have_no_code_execution_paths():
    # The loaders parse with json, protobuf and mmap only; none of these may appear there.
    banned = re.compile(
        r"\bpickle\b|\bcPickle\b|\bmarshal\b|\bshelve\b|\bdill\b|\bjoblib\b|allow_pickle|"
        r"\bnp\.load\(|\bnumpy\.load\(|\btorch\.load\(|\byaml\.load\(|\beval\(|\bexec\(|"
        r"\b__import__\(|\bcompile\(.*['\"]exec['\"]"
    )
    root = Path(tinydl.__file__).parent
    hits = []
    for folder in ("ir", "importers", "runtime"):
        for path in sorted((root / folder).rglob("*.py")):
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                if banned.search(line):
                    hits.append(f"{path.relative_to(root.parent)}:{lineno}: {line.strip()}")
    assert not hits, "code-execution paths in the loaders:\n" + "\n".join(hits)
    # The one reader that runs code is tinydl.snapshot's, for the cache folder's own files (the
    # kept import of a model, a kept session): only files this user alone could have written,
    # never a file the caller names (test_snapshot.py: a snapshot others could write is not read).
    readers = sorted(
        str(path.relative_to(root))
        for folder in ("ir", "importers", "runtime")
        for path in (root / folder).rglob("*.py")
        if "snapshot.load(" in path.read_text()
    )
    assert readers == ["runtime/loader.py", "runtime/session.py"], readers
    loader = (root / "runtime" / "loader.py").read_text()
    assert loader.count("snapshot.load(") == 1
    assert "snapshot.load(cached)" in loader  # (the model cache's path, never the caller's)


@pytest.mark.parametrize(
    "location",
    ["a\x00b.bin", "x" * 5000, "loop.bin", "sub/loop.bin"],
    ids=["null-byte", "long-name", "symlink-loop", "nested-symlink-loop"],
)
def test_hostile_external_data_locations_are_invalid_model_errors(tmp_path, location):
    """A null byte, a name longer than the OS allows, and a symlink loop in an external-data
    location are InvalidModelErrors (not ValueError, OSError or RuntimeError), and nothing is
    read."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    (tmp_path / "loop.bin").symlink_to(tmp_path / "loop.bin")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "loop.bin").symlink_to(tmp_path / "sub" / "loop.bin")
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [0.0, 0.0])
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(tinydl.InvalidModelError, match="external data"):
        tinydl.load(path)

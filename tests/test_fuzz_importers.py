"""Fuzz the TFLite and Keras .h5 importers: every mutated file loads or raises InvalidModelError.

As tests/test_fuzz.py (whose case runner, time limit and memory cap this shares, from
helpers/fuzz.py): seed models are mutated with a seeded RNG and each case is loaded with
`tinydl.load`, then compiled for the cpu backend. Mutations are byte-level (flips, overwrites,
truncations, inserted and deleted runs) and structure-aware: one field of the TFLite flatbuffer
(through the schema classes LiteRT ships) or one place of the Keras JSON config or weights,
re-serialized.

Each importer gets a tenth of TINYDL_FUZZ_CASES (default 2000), at least 200 cases.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
from pathlib import Path

import numpy as np
import pytest
from helpers.fuzz import (
    BYTE_MUTATIONS,
    INTERESTING_FLOATS,
    INTERESTING_INTS,
    MEMORY_HEADROOM,
    check_case,
    memory_cap,
    mutate_json,
)

import tinydl

CASES = max(200, int(os.environ.get("TINYDL_FUZZ_CASES", "2000")) // 10)
BASE_SEED = os.environ.get("TINYDL_FUZZ_SEED", "0")
INT32 = [x for x in INTERESTING_INTS if -(2**31) <= x < 2**31]


def _run(name: str, suffix: str, data: bytes, mutate, count: int, tmp: Path) -> None:
    seed_path = tmp / f"seed{suffix}"
    seed_path.write_bytes(data)
    tinydl.load(seed_path)  # the unmutated seed must load
    failures: dict[str, str] = {}
    loaded = 0
    with memory_cap(MEMORY_HEADROOM):
        for i in range(count):
            label = f"{BASE_SEED}:{name}:{i}"
            rng = random.Random(label)
            what, case = mutate(rng, data)
            if rng.random() < 0.1:
                more, case = rng.choice(BYTE_MUTATIONS)(rng, case) if case else ("", case)
                what += f"; then {more}"
            path = tmp / ("case" + rng.choice([suffix] * 8 + [".bin", ""]))
            path.write_bytes(case)
            ok, problem = check_case(path)
            loaded += ok
            if problem is not None:
                key = problem.strip().splitlines()[-1][:120] + problem.split("\n")[0]
                failures.setdefault(key, f"case {label!r}: {what}\n{problem}")
    assert not failures, (
        f"{len(failures)} distinct failure(s) in {count} mutations of {name} "
        f"(TINYDL_FUZZ_SEED={BASE_SEED}):\n\n" + "\n\n".join(failures.values())
    )
    assert loaded > 0, f"none of {count} mutations of {name} loaded"


def _bytes_or_structure(structural, share: float = 0.5):
    def mutate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
        if rng.random() < share:
            try:
                return structural(rng, data)
            except (
                ValueError,
                TypeError,
                KeyError,
                IndexError,
                OverflowError,
                AttributeError,
                __import__("struct").error,
            ) as exc:  # an edit the encoder refused
                what, out = BYTE_MUTATIONS[0](rng, data)
                return f"(edit refused: {type(exc).__name__}) {what}", out
        return rng.choice(BYTE_MUTATIONS)(rng, data)

    return mutate


# -- TFLite ------------------------------------------------------------------------------------


def _tflite_seed() -> bytes:
    """A small model that reaches most of the importer: fp16 and sparse weights, fused
    activations, layout-sensitive ops and a reshape back to NHWC order."""
    pytest.importorskip("tflite", reason="pip install 'tinydl[tflite]'")
    pytest.importorskip("ai_edge_litert", reason="pip install 'tinydl[test]'")
    from helpers.tflite import SAME, TFLiteModel, options, sparsity, zeros

    rng = np.random.default_rng(0)
    m = TFLiteModel()
    x = m.tensor((1, 8, 8, 3), name="image")
    w16 = m.const(rng.standard_normal((4, 3, 3, 3)).astype(np.float16))
    w = m.op("DEQUANTIZE", [w16], out_shapes=[(4, 3, 3, 3)])
    conv = dict(padding=SAME, strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1)
    a = m.op(
        "CONV_2D",
        [x, w, zeros(m, 4)],
        options=options("Conv2D", fusedActivationFunction=3, **conv),
        out_shapes=[(1, 8, 8, 4)],
    )
    sp = sparsity(
        [
            (0, 4, None, None),
            (0, 1, None, None),
            (0, 1, None, None),
            (1, 0, [0, 2, 3, 3, 5], [0, 3, 1, 0, 2]),
        ],
        [0, 1, 2, 3],
    )
    ws = m.tensor((4, 1, 1, 4), np.float32, rng.standard_normal(5).astype(np.float32), sparsity=sp)
    ws = m.op("DENSIFY", [ws], out_shapes=[(4, 1, 1, 4)])
    b = m.op(
        "CONV_2D",
        [a, ws, zeros(m, 4)],
        options=options("Conv2D", **conv),
        out_shapes=[(1, 8, 8, 4)],
    )
    dw = m.const(rng.standard_normal((1, 3, 3, 4)).astype(np.float32))
    c = m.op(
        "DEPTHWISE_CONV_2D",
        [b, dw, zeros(m, 4)],
        options=options("DepthwiseConv2D", depthMultiplier=1, **conv),
        out_shapes=[(1, 8, 8, 4)],
    )
    s = m.op(
        "ADD", [a, c], options=options("Add", fusedActivationFunction=1), out_shapes=[(1, 8, 8, 4)]
    )
    p = m.op(
        "PAD",
        [s, m.const(np.array([[0, 0], [1, 1], [0, 2], [0, 0]], np.int32))],
        out_shapes=[(1, 10, 10, 4)],
    )
    q = m.op(
        "MAX_POOL_2D",
        [p],
        options=options("Pool2D", padding=1, strideH=2, strideW=2, filterHeight=2, filterWidth=2),
        out_shapes=[(1, 5, 5, 4)],
    )
    r = m.op(
        "RESIZE_BILINEAR",
        [q, m.const(np.array([10, 10], np.int32))],
        options=options("ResizeBilinear", halfPixelCenters=True),
        out_shapes=[(1, 10, 10, 4)],
    )
    d = m.op(
        "DEPTH_TO_SPACE",
        [r],
        options=options("DepthToSpace", blockSize=2),
        out_shapes=[(1, 20, 20, 1)],
    )
    h = m.op(
        "HARD_SWISH",
        [
            m.op(
                "MUL",
                [d, m.const(np.array([0.5], np.float32))],
                options=options("Mul"),
                out_shapes=[(1, 20, 20, 1)],
            )
        ],
        out_shapes=[(1, 20, 20, 1)],
    )
    t = m.op(
        "STRIDED_SLICE",
        [
            h,
            m.const(np.array([0, 2, 0, 0], np.int32)),
            m.const(np.array([1, 18, 20, 1], np.int32)),
            m.const(np.array([1, 2, 1, 1], np.int32)),
        ],
        options=options("StridedSlice"),
        out_shapes=[(1, 8, 20, 1)],
    )
    flat = m.op("RESHAPE", [t, m.const(np.array([1, 160], np.int32))], out_shapes=[(1, 160)])
    fc = m.op(
        "FULLY_CONNECTED",
        [flat, m.const(rng.standard_normal((6, 160)).astype(np.float32)), zeros(m, 6)],
        options=options("FullyConnected"),
        out_shapes=[(1, 6)],
    )
    mean = m.op(
        "MEAN",
        [q, m.const(np.array([1, 2], np.int32))],
        options=options("Reducer", keepDims=False),
        out_shapes=[(1, 4)],
    )
    y = m.op(
        "CONCATENATION",
        [m.op("LOGISTIC", [fc], out_shapes=[(1, 6)]), mean],
        options=options("Concatenation", axis=1),
        out_shapes=[(1, 10)],
    )
    m.g.inputs, m.g.outputs = [x], [y, s]
    m.m.subgraphs = [m.g]
    return m._bytes()


def _tflite_edit(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Change one field of the unpacked model and pack it again."""
    import flatbuffers
    from helpers.tflite import S

    model = S.ModelT.InitFromPackedBuf(bytearray(data), 0)
    g = model.subgraphs[0]
    n_t = len(g.tensors)
    choice = rng.randrange(12)
    if choice == 0:
        t = rng.choice(g.tensors)
        if t.shape is not None and len(t.shape) and rng.random() < 0.8:
            t.shape[rng.randrange(len(t.shape))] = rng.choice(INT32)
        else:
            t.shape = [rng.choice([0, 1, 2, 3]) for _ in range(rng.randrange(6))]
        what = f"tensor {t.name}: shape {t.shape}"
    elif choice == 1:
        t = rng.choice(g.tensors)
        t.type = rng.randrange(20)
        what = f"tensor {t.name}: type {t.type}"
    elif choice == 2:
        t = rng.choice(g.tensors)
        t.buffer = rng.randrange(-1, len(model.buffers) + 2)
        what = f"tensor {t.name}: buffer {t.buffer}"
    elif choice == 3:
        o = rng.choice(g.operators)
        field = o.inputs if rng.random() < 0.7 else o.outputs
        k = rng.randrange(len(field))
        field[k] = rng.randrange(-2, n_t + 2)
        what = f"operator: tensor #{k} -> {field[k]}"
    elif choice == 4:
        o = rng.choice(g.operators)
        o.opcodeIndex = rng.randrange(len(model.operatorCodes) + 2)
        what = f"operator: opcode index {o.opcodeIndex}"
    elif choice == 5:
        oc = rng.choice(model.operatorCodes)
        oc.builtinCode = rng.randrange(210)
        oc.deprecatedBuiltinCode = min(oc.builtinCode, 127)
        what = f"opcode -> {oc.builtinCode}"
    elif choice == 6:
        o = rng.choice([o for o in g.operators if o.builtinOptions is not None])
        fields = [f for f in vars(o.builtinOptions) if not f.startswith("_")]
        f = rng.choice(fields)
        old = getattr(o.builtinOptions, f)
        new = (
            rng.choice(INTERESTING_FLOATS)
            if isinstance(old, float)
            else rng.choice(INT32)
            if not isinstance(old, bool) or rng.random() < 0.3
            else not old
        )
        setattr(o.builtinOptions, f, new)
        if rng.random() < 0.2:
            o.builtinOptionsType = rng.randrange(130)
        what = (
            f"options {type(o.builtinOptions).__name__}.{f} = {new} (type {o.builtinOptionsType})"
        )
    elif choice == 7:
        b = rng.choice([b for b in model.buffers if b.data is not None])
        raw = bytearray(np.asarray(b.data, np.uint8).tobytes())
        if rng.random() < 0.5:
            raw = raw[: rng.randrange(len(raw) + 1)]
        else:
            raw += rng.randbytes(rng.choice([1, 2, 4, 64]))
        b.data = np.frombuffer(bytes(raw), np.uint8)
        what = f"buffer data -> {len(raw)} bytes"
    elif choice == 8:
        t = next(t for t in g.tensors if t.sparsity is not None)
        sp = t.sparsity
        k = rng.randrange(4)
        if k == 0:
            sp.traversalOrder = [rng.choice([0, 1, 2, 3, 4, -1]) for _ in sp.traversalOrder]
        elif k == 1:
            sp.blockMap = [rng.choice([0, 1, 3, 9, -1])]
        else:
            d = rng.choice(sp.dimMetadata)
            if d.arraySegments is not None and rng.random() < 0.7:
                vec = d.arraySegments if rng.random() < 0.5 else d.arrayIndices
                vec.values[rng.randrange(len(vec.values))] = rng.choice(INT32)
            else:
                d.format, d.denseSize = rng.randrange(3), rng.choice(INT32)
        what = f"sparsity of {t.name} edited ({k})"
    elif choice == 9:
        t = rng.choice(g.tensors)
        q = S.QuantizationParametersT()
        q.scale = [rng.choice(INTERESTING_FLOATS[:6])] * rng.choice([1, 2, 4])
        q.zeroPoint = [rng.choice([0, 1, -128])] * rng.choice([1, len(q.scale)])
        q.quantizedDimension = rng.choice([0, 1, 3, 7])
        t.quantization = q
        what = f"tensor {t.name}: quantization {q.scale} {q.zeroPoint}"
    elif choice == 10:
        field = g.inputs if rng.random() < 0.5 else g.outputs
        field.append(rng.randrange(-1, n_t + 1)) if rng.random() < 0.3 else field.__setitem__(
            rng.randrange(len(field)), rng.randrange(-1, n_t + 1)
        )
        what = f"subgraph inputs {list(g.inputs)} outputs {list(g.outputs)}"
    else:
        k = rng.randrange(len(g.operators))
        if rng.random() < 0.5:
            del g.operators[k]
            what = f"delete operator #{k}"
        else:
            g.operators.insert(k, copy.deepcopy(g.operators[k]))
            what = f"duplicate operator #{k}"
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return f"flatbuffer: {what}"[:200], bytes(builder.Output())


def test_mutated_tflite_models_load_or_raise_invalid_model_error(tmp_path):
    data = _tflite_seed()
    _run("tflite", ".tflite", data, _bytes_or_structure(_tflite_edit), CASES, tmp_path)


def test_mutated_blazepose_loads_or_raises_invalid_model_error(tmp_path):
    """The real model, sparse and fp16 weights included; fewer cases, as each costs more."""
    from helpers.models import mediapipe_model

    pytest.importorskip("tflite", reason="pip install 'tinydl[tflite]'")
    path = mediapipe_model("pose_detection/pose_detection.tflite")

    def mutate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
        return rng.choice([BYTE_MUTATIONS[0], BYTE_MUTATIONS[1], BYTE_MUTATIONS[2]])(rng, data)

    _run(
        "pose_detection", ".tflite", Path(path).read_bytes(), mutate, max(20, CASES // 10), tmp_path
    )


# -- Keras .h5 -----------------------------------------------------------------------------------


def _layer(kind: str, name: str, inbound=None, **config) -> dict:
    spec = {"class_name": kind, "name": name, "config": {"name": name, **config}}
    if inbound is not None:
        spec["inbound_nodes"] = inbound
    return spec


def _h5_seeds() -> dict[str, tuple[dict, dict[str, list], str]]:
    """(config, weights by layer, Keras version): a Keras 3 Sequential CNN and a Keras 2
    functional model with merges, padding and a TFOpLambda depth_to_space."""
    rng = np.random.default_rng(0)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    conv = dict(
        strides=[1, 1],
        padding="same",
        data_format="channels_last",
        dilation_rate=[1, 1],
        groups=1,
        use_bias=True,
    )
    sequential = {
        "class_name": "Sequential",
        "config": {
            "name": "cnn",
            "layers": [
                _layer("InputLayer", "input_layer", batch_shape=[None, 8, 8, 3], dtype="float32"),
                _layer(
                    "Conv2D", "conv2d", filters=4, kernel_size=[3, 3], activation="relu", **conv
                ),
                _layer("BatchNormalization", "bn", axis=-1, epsilon=0.001, center=True, scale=True),
                _layer(
                    "MaxPooling2D",
                    "pool",
                    pool_size=[2, 2],
                    strides=[2, 2],
                    padding="valid",
                    data_format="channels_last",
                ),
                _layer(
                    "DepthwiseConv2D",
                    "dw",
                    kernel_size=[3, 3],
                    depth_multiplier=1,
                    activation="relu6",
                    **{k: v for k, v in conv.items() if k != "groups"},
                ),
                _layer(
                    "UpSampling2D",
                    "up",
                    size=[2, 2],
                    interpolation="bilinear",
                    data_format="channels_last",
                ),
                _layer(
                    "AveragePooling2D",
                    "avg",
                    pool_size=[2, 2],
                    strides=None,
                    padding="same",
                    data_format="channels_last",
                ),
                _layer("Flatten", "flatten", data_format="channels_last"),
                _layer("Dense", "dense", units=5, activation="softmax", use_bias=True),
            ],
        },
    }
    seq_weights = {
        "conv2d": [("kernel", w(3, 3, 3, 4)), ("bias", w(4))],
        "bn": [
            ("gamma", w(4)),
            ("beta", w(4)),
            ("moving_mean", w(4)),
            ("moving_variance", np.abs(w(4)) + 0.5),
        ],
        "dw": [("kernel", w(3, 3, 4, 1)), ("bias", w(4))],
        "dense": [("kernel", w(64, 5)), ("bias", w(5))],
    }

    def node(*names, **kwargs):
        return [[[n, 0, 0, kwargs] for n in names]]

    functional = {
        "class_name": "Functional",
        "config": {
            "name": "merge",
            "input_layers": [["x", 0, 0]],
            "output_layers": [["d2s", 0, 0], ["gap", 0, 0]],
            "layers": [
                _layer("InputLayer", "x", [], batch_input_shape=[None, 6, 6, 2], dtype="float32"),
                _layer(
                    "Conv2D",
                    "a",
                    node("x"),
                    filters=8,
                    kernel_size=[3, 3],
                    activation="tanh",
                    **conv,
                ),
                _layer(
                    "SeparableConv2D",
                    "b",
                    node("x"),
                    filters=8,
                    kernel_size=[3, 3],
                    depth_multiplier=1,
                    activation="linear",
                    **{k: v for k, v in conv.items() if k != "groups"},
                ),
                _layer("Add", "add", node("a", "b")),
                _layer("PReLU", "prelu", node("add"), shared_axes=[1, 2]),
                _layer(
                    "ZeroPadding2D",
                    "pad",
                    node("prelu"),
                    padding=[[1, 1], [1, 1]],
                    data_format="channels_last",
                ),
                _layer(
                    "Cropping2D",
                    "crop",
                    node("pad"),
                    cropping=[[1, 1], [1, 1]],
                    data_format="channels_last",
                ),
                _layer("Concatenate", "cat", node("crop", "a"), axis=-1),
                {
                    "class_name": "TFOpLambda",
                    "name": "d2s",
                    "inbound_nodes": [["cat", 0, 0, {"block_size": 2}]],
                    "config": {"name": "d2s", "function": "nn.depth_to_space"},
                },
                _layer("GlobalAveragePooling2D", "gap", node("cat"), data_format="channels_last"),
            ],
        },
    }
    fun_weights = {
        "a": [("kernel:0", w(3, 3, 2, 8)), ("bias:0", w(8))],
        "b": [
            ("depthwise_kernel:0", w(3, 3, 2, 1)),
            ("pointwise_kernel:0", w(1, 1, 2, 8)),
            ("bias:0", w(8)),
        ],
        "prelu": [("alpha:0", w(1, 1, 8))],
    }
    return {
        "keras3_sequential": (sequential, seq_weights, "3.5.0"),
        "keras2_functional": (functional, fun_weights, "2.13.1"),
    }


def _write_h5(path: Path, config: dict | str, weights: dict[str, list], version: str) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = version
        f.attrs["model_config"] = config if isinstance(config, str) else json.dumps(config)
        root = f.create_group("model_weights")
        root.attrs["layer_names"] = np.array([n.encode() for n in weights], dtype="S")
        for layer, items in weights.items():
            group = root.create_group(layer)
            group.attrs["weight_names"] = np.array(
                [f"{layer}/{name}".encode() for name, _ in items], dtype="S"
            )
            for name, value in items:
                group.create_dataset(f"{layer}/{name}", data=value)


def _h5_edit(tmp: Path, seed):
    config, weights, version = seed

    def edit(rng: random.Random, data: bytes) -> tuple[str, bytes]:
        cfg, ws = copy.deepcopy(config), {k: list(v) for k, v in weights.items()}
        choice = rng.randrange(5)
        if choice <= 1:
            what = "config " + "; ".join(mutate_json(rng, cfg) for _ in range(rng.randint(1, 2)))
        elif choice == 2:
            layer = rng.choice(sorted(ws))
            k = rng.randrange(len(ws[layer]))
            name, value = ws[layer][k]
            shape = list(value.shape)
            if shape and rng.random() < 0.7:
                shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 7])
            else:
                shape = shape + [1] if rng.random() < 0.5 else shape[:-1]
            ws[layer][k] = (
                name,
                np.resize(value, shape).astype(
                    rng.choice([np.float32, np.float32, np.float16, np.int32, np.uint8])
                ),
            )
            what = f"weight {layer}/{name} -> {shape} {ws[layer][k][1].dtype}"
        elif choice == 3:
            layer = rng.choice(sorted(ws))
            if rng.random() < 0.5:
                del ws[layer]
                what = f"drop weights of {layer}"
            else:
                ws[rng.choice(["x", "nope", "dense", "a"])] = ws.pop(layer)
                what = f"rename weights of {layer}"
        else:
            layer = rng.choice(sorted(ws))
            k = rng.randrange(len(ws[layer]))
            name, value = ws[layer][k]
            value = value.copy()
            with np.errstate(over="ignore", invalid="ignore"):
                value.flat[rng.randrange(value.size)] = rng.choice(INTERESTING_FLOATS)
            ws[layer][k] = (name, value)
            what = f"weight {layer}/{name} value"
        path = tmp / "edit.h5"
        _write_h5(path, cfg, ws, version)
        return what[:200], path.read_bytes()

    return edit


@pytest.mark.parametrize("seed", ["keras3_sequential", "keras2_functional"])
def test_mutated_keras_models_load_or_raise_invalid_model_error(tmp_path, seed):
    pytest.importorskip("h5py", reason="pip install 'tinydl[keras]'")
    spec = _h5_seeds()[seed]
    _write_h5(tmp_path / "seed.h5", *spec)
    data = (tmp_path / "seed.h5").read_bytes()
    _run(
        seed,
        ".h5",
        data,
        _bytes_or_structure(_h5_edit(tmp_path, spec)),
        math.ceil(CASES / 2),
        tmp_path,
    )


def test_case_counts_meet_the_minimum():
    assert CASES >= 200 and 2 * math.ceil(CASES / 2) >= 200

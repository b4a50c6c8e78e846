"""Keras importer: a Keras .h5 file (the legacy HDF5 save format of Keras 2 and 3) becomes an
ir.Graph in canonical (NCHW) form.

The file is read by importers/keras_reader.py (with h5py only, in a child process where the OS
can fork): the model's JSON config (`model_config`) and the weights under `model_weights`;
neither TensorFlow nor Keras is imported, and no Python code stored in the file
(Lambda layers) is run. Sequential and functional models are supported, including functional
models in both the Keras 2 and the Keras 3 node formats. Channels-last tensors are held as NCHW
where an op needs it (see importers/nhwc.py); graph inputs keep the shape Keras gives them.

depth_to_space has no built-in Keras layer. Two spellings are understood: the `TFOpLambda`
layer that tf.keras 2 records for `tf.nn.depth_to_space(x, block_size)`, and a custom layer whose
class is named `DepthToSpace` with a `block_size` config entry (TensorFlow's DCR order).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, InvalidModelError, UnsupportedOpError
from tinydl.importers.keras_reader import _h5py, _read_isolated
from tinydl.importers.nhwc import GraphBuilder, Tensor, constant, identity
from tinydl.ir.graph import Graph

IDENTITY_LAYERS = {
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "GaussianNoise",
    "GaussianDropout",
    "AlphaDropout",
    "ActivityRegularization",
    "Masking",
}
MERGE_OPS = {"Add": "Add", "Subtract": "Sub", "Multiply": "Mul"}
DEPTH_TO_SPACE_FUNCTIONS = {
    "nn.depth_to_space",
    "compat.v1.nn.depth_to_space",
    "compat.v1.depth_to_space",
    "depth_to_space",
}


def load(path: str | os.PathLike) -> Graph:
    """Read, convert and validate a Keras .h5 model; InvalidModelError for anything malformed."""
    _h5py()
    path = Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidModelError(f"{where}: cannot read: {exc.strerror or exc}") from None
    text, version, stored = _read_isolated(path, where, size)
    try:
        config = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidModelError(f"{where}: model_config is not JSON: {exc}") from None
    weights: dict[str, list] = {}
    for owner, variable, array in stored:
        weights.setdefault(owner, []).append((variable, array))
    return _Converter(config, weights, version, where).run()


# -- conversion ---------------------------------------------------------------------------------


class _Converter:
    def __init__(self, config: Any, weights: dict[str, list], version: str, where: str):
        self.config = config
        self.weights = weights
        self.where = where
        self.b = GraphBuilder(where)
        try:
            self.major = int(version.split(".")[0]) if version else 2
        except ValueError:
            self.major = 2
        self.layer = ""
        self._kind = ""

    def fail(self, message: str) -> InvalidModelError:
        at = f" layer '{self.layer}'" if self.layer else ""
        return InvalidModelError(f"{self.where}:{at} {message}")

    def unsupported(self, message: str) -> UnsupportedOpError:
        at = f" layer '{self.layer}'" if self.layer else ""
        return UnsupportedOpError(f"{self.where}:{at} {message}")

    def run(self) -> Graph:
        try:
            return self._run()
        except (InvalidModelError, BackendUnavailableError):
            raise
        except (
            KeyError,
            TypeError,
            ValueError,
            IndexError,
            AttributeError,
            OverflowError,
            RecursionError,
            MemoryError,
        ) as exc:
            # A config that does not have the structure Keras writes.
            raise self.fail(f"malformed model config ({type(exc).__name__}: {exc})") from None

    def _run(self) -> Graph:
        cfg = self.config
        if not isinstance(cfg, dict) or not isinstance(cfg.get("config"), dict):
            raise self.fail("model_config is not a Keras model config")
        kind = cfg.get("class_name")
        body = cfg["config"]
        layers = body.get("layers")
        if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
            raise self.fail("model config has no list of layers")
        unsupported = sorted({_class(x) for x in layers if _class(x) not in self.handlers()})
        if unsupported:
            raise self.unsupported(
                f"Keras layers not supported by tinydl: {', '.join(unsupported)}"
            )
        if kind == "Sequential":
            outputs = self._sequential(body, layers)
        elif kind in ("Functional", "Model"):
            outputs = self._functional(body, layers)
        else:
            raise self.unsupported(
                f"model class {kind!r} (expected Sequential or a functional Model)"
            )
        self.layer = ""
        metadata: dict[str, Any] = {"source_format": "keras", "keras_version": str(self.major)}
        if any(v.shape is not None and len(v.shape) == 4 for v in self.b.inputs):
            metadata["input_layout"] = "NHWC"
        return self.b.finish(outputs, metadata, str(body.get("name") or "keras"))

    def _input(self, name: str, shape: Any, dtype: Any) -> Tensor:
        if not isinstance(shape, list) or not shape or len(shape) > 8:
            raise self.fail(f"input shape {shape!r} is not a batch shape")
        dims = []
        for i, d in enumerate(shape):
            if d is None:
                dims.append("N" if i == 0 else None)
            elif isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31:
                dims.append(d)
            else:
                raise self.fail(f"input shape {shape!r} has an invalid dimension")
        dtype = dtype if isinstance(dtype, str) else "float32"
        if dtype not in ("float32", "float16", "float64"):
            raise self.unsupported(f"input dtype {dtype!r}")
        return self.b.input(name, dtype, tuple(dims))

    def _sequential(self, body: dict, layers: list) -> list[tuple[Tensor, str]]:
        first = layers[0]["config"] if layers else {}
        if layers and _class(layers[0]) == "InputLayer":
            shape = first.get("batch_shape", first.get("batch_input_shape"))
            name, layers = first.get("name", "input"), layers[1:]
        else:
            shape = first.get("batch_input_shape", body.get("build_input_shape"))
            name = "input"
        x = self._input(str(name), shape, first.get("dtype"))
        out = self.b.fresh(str(layers[-1]["config"].get("name", "output")) if layers else "output")
        for spec in layers:
            (x,) = self._layer(spec, [x], {})
        return [(x, out)]

    def _functional(self, body: dict, layers: list) -> list[tuple[Tensor, str]]:
        tensors: dict[tuple[str, int, int], Tensor] = {}
        by_name = {}
        for spec in layers:
            name = spec.get("name", spec["config"].get("name"))
            if not isinstance(name, str) or name in by_name:
                raise self.fail(f"layer name {name!r} is missing or repeated")
            by_name[name] = spec
        for name in _refs_names(body.get("input_layers"), self):
            spec = by_name.get(name)
            if spec is None or _class(spec) != "InputLayer":
                raise self.fail(f"model input '{name}' is not an InputLayer")
            c = spec["config"]
            tensors[(name, 0, 0)] = self._input(
                name, c.get("batch_shape", c.get("batch_input_shape")), c.get("dtype")
            )
        wanted = _refs(body.get("output_layers"), self)
        names = [self.b.fresh(ref[0]) for ref in wanted]
        pending = [
            (spec, k, node)
            for spec in layers
            if _class(spec) != "InputLayer"
            for k, node in enumerate(_nodes(spec, self))
        ]
        while pending:
            rest = []
            for spec, k, node in pending:
                refs, kwargs = node
                if all(r in tensors for r in refs):
                    outs = self._layer(spec, [tensors[r] for r in refs], kwargs)
                    for i, t in enumerate(outs):
                        tensors[(spec["name"], k, i)] = t
                else:
                    rest.append((spec, k, node))
            if len(rest) == len(pending):
                self.layer = str(rest[0][0].get("name"))
                raise self.fail("its inputs are never computed (a dangling or cyclic reference)")
            pending = rest
        outputs = []
        for ref, name in zip(wanted, names, strict=True):
            if ref not in tensors:
                raise self.fail(f"model output {list(ref)} is not computed by any layer")
            outputs.append((tensors[ref], name))
        if not outputs:
            raise self.fail("the model has no outputs")
        return outputs

    # -- layers -------------------------------------------------------------------------------
    def handlers(self) -> dict[str, Any]:
        return {
            "InputLayer": None,
            "Conv2D": self._conv,
            "Convolution2D": self._conv,
            "DepthwiseConv2D": self._depthwise,
            "SeparableConv2D": self._separable,
            "SeparableConvolution2D": self._separable,
            "Dense": self._dense,
            "BatchNormalization": self._batch_norm,
            "Activation": self._activation_layer,
            "ReLU": self._relu,
            "LeakyReLU": self._leaky_relu,
            "PReLU": self._prelu,
            "Softmax": self._softmax_layer,
            "MaxPooling2D": self._pool,
            "MaxPool2D": self._pool,
            "AveragePooling2D": self._pool,
            "AvgPool2D": self._pool,
            "GlobalAveragePooling2D": self._global_pool,
            "GlobalAvgPool2D": self._global_pool,
            "Flatten": self._flatten,
            "Reshape": self._reshape,
            "Permute": self._permute,
            "Add": self._merge,
            "Subtract": self._merge,
            "Multiply": self._merge,
            "Average": self._merge,
            "Concatenate": self._concat,
            "UpSampling2D": self._upsampling,
            "ZeroPadding2D": self._zero_padding,
            "Cropping2D": self._cropping,
            "Rescaling": self._rescaling,
            "DepthToSpace": self._depth_to_space,
            "TFOpLambda": self._tf_op_lambda,
            **{name: self._identity for name in IDENTITY_LAYERS},
        }

    def _layer(self, spec: dict, inputs: list[Tensor], kwargs: dict) -> list[Tensor]:
        kind = _class(spec)
        c = spec.get("config")
        if not isinstance(c, dict):
            raise self.fail("layer config is not an object")
        self.layer = str(c.get("name", spec.get("name", kind)))
        self._kind = kind
        handler = self.handlers().get(kind)
        if handler is None:
            raise self.unsupported(f"Keras layer {kind} is not supported")
        if not inputs:
            raise self.fail("layer has no inputs")
        out = handler(c, inputs, kwargs)
        return out if isinstance(out, list) else [out]

    def _weights(self, *names: str, optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """This layer's weights by variable name (Keras 2 and 3 spell some differently)."""
        stored = self.weights.get(self.layer, [])
        found = {var: arr for var, arr in stored}
        out = {}
        for name in (*names, *optional):
            for alias in _ALIASES.get(name, (name,)):
                if alias in found:
                    out[name] = found[alias]
                    break
        missing = [n for n in names if n not in out]
        if missing:
            raise self.fail(f"weights {missing} not found (stored: {[v for v, _ in stored]})")
        for name, arr in out.items():
            if arr.dtype.kind != "f":
                raise self.fail(f"weight '{name}' is {arr.dtype}, expected floats")
            out[name] = arr.astype(np.float32)  # mixed-precision models store float16
        return out

    def _one(self, inputs: list[Tensor]) -> Tensor:
        if len(inputs) != 1:
            raise self.fail(f"expects one input, got {len(inputs)}")
        return inputs[0]

    def _channels_last(self, c: dict) -> bool:
        fmt = c.get("data_format") or "channels_last"
        if fmt not in ("channels_last", "channels_first"):
            raise self.fail(f"unknown data_format {fmt!r}")
        return fmt == "channels_last"

    def _pair(self, value: Any, what: str) -> list[int]:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value, value]
        if (
            not isinstance(value, list | tuple)
            or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise self.fail(f"{what} must be two ints, got {value!r}")
        return [int(v) for v in value]

    def _padding_mode(self, c: dict) -> str:
        mode = str(c.get("padding", "valid")).lower()
        if mode not in ("valid", "same"):
            raise self.unsupported(f"padding {mode!r}")
        return mode.upper()

    def _activate(self, x: Tensor, activation: Any) -> Tensor:
        name = f"{self.layer}_act"
        if isinstance(activation, dict):  # a serialized activation object (Keras 3)
            activation = activation.get("config", {}).get("name") or activation.get("class_name")
        if activation is None or activation == "linear":
            return x
        if not isinstance(activation, str):
            raise self.fail(f"activation {activation!r} is not a name")
        kind = {"swish": "silu", "hard_silu": "hard_swish"}.get(activation, activation)
        if kind == "softmax":
            return self._softmax(x, -1)
        if kind == "hard_sigmoid":
            # Keras 3: relu6(x + 3) / 6; Keras 2: clip(0.2 x + 0.5, 0, 1).
            alpha = 1 / 6 if self.major >= 3 else 0.2
            return self.b.unary("HardSigmoid", x, {"alpha": alpha, "beta": 0.5}, name)
        if kind == "leaky_relu":
            return self.b.activation(x, kind, name, alpha=0.2)
        if kind in ("relu", "relu6", "sigmoid", "tanh", "hard_swish", "silu"):
            return self.b.activation(x, kind, name)
        raise self.unsupported(f"activation '{activation}' is not supported")

    def _softmax(self, x: Tensor, axis: Any) -> Tensor:
        if not isinstance(axis, int) or not -x.rank <= axis < x.rank:
            raise self.fail(f"softmax axis {axis!r} for rank {x.rank}")
        src = x if x.value is None else Tensor(self.b.at(x, x.perm), x.perm, x.dtype)
        out = self.b.add(
            "Softmax", [src.name], {"axis": src.perm.index(axis % x.rank)}, f"{self.layer}_softmax"
        )
        return Tensor(out, src.perm, x.dtype)

    def _conv_args(self, c: dict) -> tuple[list[int], list[int], str]:
        strides = self._pair(c.get("strides", 1), "strides")
        dilations = self._pair(c.get("dilation_rate", 1), "dilation_rate")
        return strides, dilations, self._padding_mode(c)

    def _rank4(self, x: Tensor) -> None:
        if x.rank != 4:
            raise self.fail(f"expects a 4-D input, got rank {x.rank}")

    def _conv(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        w = self._weights("kernel", optional=("bias",))
        kernel = w["kernel"]
        if kernel.ndim != 4:
            raise self.fail(f"kernel shape {kernel.shape} is not 4-D")
        groups = c.get("groups", 1)
        strides, dilations, padding = self._conv_args(c)
        bias = constant(w["bias"]) if c.get("use_bias", True) and "bias" in w else None
        # Kernel HWIO -> OIHW.
        y = self.b.conv(
            x,
            constant(kernel),
            (3, 2, 0, 1),
            bias,
            strides,
            dilations,
            padding,
            groups,
            self.layer,
            channels_last=self._channels_last(c),
        )
        return self._activate(y, c.get("activation"))

    def _depthwise_kernel(self, kernel: np.ndarray) -> Tensor:
        """(kH, kW, C, M) -> a (kH, kW, 1, C*M) kernel: output channel c*M+m reads channel c."""
        if kernel.ndim != 4:
            raise self.fail(f"depthwise kernel shape {kernel.shape} is not 4-D")
        kh, kw, ch, mult = kernel.shape
        return constant(kernel.reshape(kh, kw, 1, ch * mult))

    def _depthwise(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        w = self._weights("depthwise_kernel", optional=("bias",))
        kernel = self._depthwise_kernel(w["depthwise_kernel"])
        strides, dilations, padding = self._conv_args(c)
        bias = constant(w["bias"]) if c.get("use_bias", True) and "bias" in w else None
        y = self.b.conv(
            x,
            kernel,
            (3, 2, 0, 1),
            bias,
            strides,
            dilations,
            padding,
            w["depthwise_kernel"].shape[2],
            self.layer,
            channels_last=self._channels_last(c),
        )
        return self._activate(y, c.get("activation"))

    def _separable(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        w = self._weights("depthwise_kernel", "pointwise_kernel", optional=("bias",))
        strides, dilations, padding = self._conv_args(c)
        last = self._channels_last(c)
        mid = self.b.conv(
            x,
            self._depthwise_kernel(w["depthwise_kernel"]),
            (3, 2, 0, 1),
            None,
            strides,
            dilations,
            padding,
            w["depthwise_kernel"].shape[2],
            f"{self.layer}_depthwise",
            channels_last=last,
        )
        bias = constant(w["bias"]) if c.get("use_bias", True) and "bias" in w else None
        y = self.b.conv(
            mid,
            constant(w["pointwise_kernel"]),
            (3, 2, 0, 1),
            bias,
            [1, 1],
            [1, 1],
            "VALID",
            1,
            self.layer,
            channels_last=last,
        )
        return self._activate(y, c.get("activation"))

    def _dense(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        w = self._weights("kernel", optional=("bias",))
        kernel = w["kernel"]
        if kernel.ndim != 2:
            raise self.fail(f"kernel shape {kernel.shape} is not 2-D")
        bias = w.get("bias") if c.get("use_bias", True) else None
        xs = self.b.plain(x)
        k = self.b.const(kernel, f"{self.layer}_kernel")
        if x.rank == 2:
            ins = [xs, k] + ([self.b.const(bias, f"{self.layer}_bias")] if bias is not None else [])
            y = Tensor(self.b.add("Gemm", ins, None, self.layer), (0, 1), x.dtype)
        else:
            y = Tensor(self.b.add("MatMul", [xs, k], None, self.layer), identity(x.rank), x.dtype)
            if bias is not None:
                y = self.b.binary("Add", y, constant(bias), f"{self.layer}_bias")
        return self._activate(y, c.get("activation"))

    def _batch_norm(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        axis = c.get("axis", -1)
        if isinstance(axis, list):
            if len(axis) != 1:
                raise self.unsupported(f"normalization over several axes {axis}")
            axis = axis[0]
        if not isinstance(axis, int) or not -x.rank <= axis < x.rank or x.rank < 2:
            raise self.fail(f"axis {axis!r} for a rank-{x.rank} input")
        axis %= x.rank
        w = self._weights("moving_mean", "moving_variance", optional=("gamma", "beta"))
        mean, var = w["moving_mean"].astype(np.float32), w["moving_variance"].astype(np.float32)
        if mean.ndim != 1 or var.shape != mean.shape:
            raise self.fail(f"moving_mean {mean.shape} and moving_variance {var.shape} differ")
        gamma = w["gamma"] if c.get("scale", True) and "gamma" in w else np.ones_like(mean)
        beta = w["beta"] if c.get("center", True) and "beta" in w else np.zeros_like(mean)
        if axis == 0:
            raise self.unsupported("batch normalization over the batch axis")
        # Hold x with the normalized axis at position 1, where BatchNormalization wants it.
        perm = (0, axis, *[a for a in range(1, x.rank) if a != axis])
        ins = [self.b.at(x, perm, self.layer)] + [
            self.b.const(np.asarray(v, np.float32), f"{self.layer}_{n}")
            for n, v in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))
        ]
        eps = c.get("epsilon", 1e-3)
        out = self.b.add("BatchNormalization", ins, {"epsilon": float(eps)}, self.layer)
        return Tensor(out, perm, x.dtype)

    def _activation_layer(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        return self._activate(self._one(inputs), c.get("activation"))

    def _relu(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        hi, slope = c.get("max_value"), c.get("negative_slope") or 0.0
        if c.get("threshold") not in (None, 0, 0.0):
            raise self.unsupported(f"ReLU with threshold {c.get('threshold')}")
        if slope:
            y = self.b.activation(x, "leaky_relu", self.layer, alpha=float(slope))
            return self.b.clip(y, None, float(hi), f"{self.layer}_max") if hi is not None else y
        if hi is not None:
            return self.b.clip(x, 0.0, float(hi), self.layer)
        return self.b.activation(x, "relu", self.layer)

    def _leaky_relu(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        alpha = c.get("negative_slope", c.get("alpha", 0.3))
        return self.b.activation(self._one(inputs), "leaky_relu", self.layer, alpha=float(alpha))

    def _prelu(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        alpha = self._weights("alpha")["alpha"]
        if alpha.ndim >= x.rank:
            raise self.fail(f"alpha shape {alpha.shape} for a rank-{x.rank} input")
        return self.b.binary("PRelu", x, constant(alpha.astype(np.float32)), self.layer)

    def _softmax_layer(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        axis = c.get("axis", -1)
        if isinstance(axis, list) and len(axis) == 1:
            axis = axis[0]
        return self._softmax(self._one(inputs), axis)

    def _pool(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        kernel = self._pair(c.get("pool_size", 2), "pool_size")
        strides = self._pair(c["strides"], "strides") if c.get("strides") is not None else kernel
        op = "MaxPool" if "Max" in self._kind else "AveragePool"
        return self.b.pool(
            op,
            x,
            kernel,
            strides,
            self._padding_mode(c),
            self.layer,
            channels_last=self._channels_last(c),
        )

    def _global_pool(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        axes = [1, 2] if self._channels_last(c) else [2, 3]
        return self.b.reduce_mean(x, axes, bool(c.get("keepdims", False)), self.layer)

    def _flatten(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        if x.rank > 2 and not self._channels_last(c):
            x = self.b.transpose(x, [0, *range(2, x.rank), 1])
        out = self.b.add("Flatten", [self.b.plain(x)], {"axis": 1}, self.layer)
        return Tensor(out, (0, 1), x.dtype)

    def _reshape(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        target = c.get("target_shape")
        if (
            not isinstance(target, list)
            or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= -1 and d != 0
                for d in target
            )
            or target.count(-1) > 1
        ):
            raise self.fail(f"target_shape {target!r} is not a list of sizes")
        return self.b.reshape(self._one(inputs), [0, *target], self.layer)

    def _permute(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        dims = c.get("dims")
        if not isinstance(dims, list) or sorted(dims) != list(range(1, x.rank)):
            raise self.fail(f"dims {dims!r} is not a permutation of axes 1..{x.rank - 1}")
        return self.b.transpose(x, [0, *dims], self.layer)

    def _merge(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        if len(inputs) < 2 and self._kind != "Average":
            raise self.fail(f"merges {len(inputs)} input(s)")
        op = MERGE_OPS.get(self._kind, "Add")
        if self._kind == "Subtract" and len(inputs) != 2:
            raise self.fail(f"Subtract takes exactly 2 inputs, got {len(inputs)}")
        y = inputs[0]
        for i, t in enumerate(inputs[1:], 1):
            y = self.b.binary(
                op,
                y,
                t,
                self.layer
                if i == len(inputs) - 1 and self._kind != "Average"
                else f"{self.layer}_{i}",
            )
        if self._kind == "Average":
            y = self.b.binary("Mul", y, constant(np.array(1 / len(inputs), np.float32)), self.layer)
        return y

    def _concat(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        axis = c.get("axis", -1)
        if not isinstance(axis, int):
            raise self.fail(f"axis {axis!r} is not an int")
        return self.b.concat(inputs, axis, self.layer)

    def _upsampling(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        size = self._pair(c.get("size", 2), "size")
        if min(size) < 1:
            raise self.fail(f"size {size} must be positive")
        mode = c.get("interpolation", "nearest")
        last = self._channels_last(c)
        if mode == "nearest":
            return self.b.resize(
                x, "nearest", "asymmetric", "floor", self.layer, scales=size, channels_last=last
            )
        if mode == "bilinear":
            # tf.image.resize and torch's interpolate(align_corners=False): half-pixel centers.
            return self.b.resize(
                x, "linear", "half_pixel", name=self.layer, scales=size, channels_last=last
            )
        raise self.unsupported(f"UpSampling2D interpolation {mode!r}")

    def _spatial_pairs(self, c: dict, key: str) -> list[list[int]]:
        value = c.get(key, 1)
        if isinstance(value, int) and not isinstance(value, bool):
            return [[value, value], [value, value]]
        if isinstance(value, list | tuple) and len(value) == 2:
            if all(isinstance(v, int) for v in value):
                return [[value[0], value[0]], [value[1], value[1]]]
            return [self._pair(v, key) for v in value]
        raise self.fail(f"{key} {value!r} is not an int, two ints or two pairs")

    def _zero_padding(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        (t, b), (left, r) = self._spatial_pairs(c, "padding")
        if min(t, b, left, r) < 0:
            raise self.fail("negative padding")
        hw = [(t, b), (left, r)]
        widths = [(0, 0), *hw, (0, 0)] if self._channels_last(c) else [(0, 0), (0, 0), *hw]
        return self.b.pad(x, widths, name=self.layer)

    def _cropping(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        self._rank4(x)
        crops = self._spatial_pairs(c, "cropping")
        first = 1 if self._channels_last(c) else 2
        specs = []
        for k, (lo, hi) in enumerate(crops):
            if lo < 0 or hi < 0:
                raise self.fail("negative cropping")
            if lo or hi:
                specs.append((first + k, lo, -hi if hi else 2**63 - 1, 1))
        return self.b.slice(x, specs, self.layer)

    def _rescaling(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        x = self._one(inputs)
        scale = np.asarray(c.get("scale", 1.0), np.float32)
        offset = np.asarray(c.get("offset", 0.0), np.float32)
        y = self.b.binary("Mul", x, constant(scale), f"{self.layer}_scale")
        return self.b.binary("Add", y, constant(offset), self.layer)

    def _depth_to_space(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        block = c.get("block_size")
        return self._d2s(self._one(inputs), block, c.get("data_format", "channels_last"))

    def _d2s(self, x: Tensor, block: Any, data_format: Any) -> Tensor:
        self._rank4(x)
        if not isinstance(block, int) or isinstance(block, bool) or block < 2:
            raise self.fail(f"block_size {block!r} must be an int >= 2")
        last = data_format in ("channels_last", "NHWC", None)
        if not last and data_format not in ("channels_first", "NCHW"):
            raise self.fail(f"unknown data_format {data_format!r}")
        return self.b.nchw_op(
            "DepthToSpace", x, {"blocksize": block, "mode": "DCR"}, self.layer, channels_last=last
        )

    def _tf_op_lambda(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        function = c.get("function")
        if function not in DEPTH_TO_SPACE_FUNCTIONS:
            raise self.unsupported(
                f"TFOpLambda '{function}' (only tf.nn.depth_to_space is understood)"
            )
        block = kwargs.get("block_size")
        if block is None and len(kwargs.get("_args", [])) > 0:
            block = kwargs["_args"][0]
        return self._d2s(self._one(inputs), block, kwargs.get("data_format", "NHWC"))

    def _identity(self, c: dict, inputs: list[Tensor], kwargs: dict) -> Tensor:
        return self._one(inputs)


_ALIASES = {
    "depthwise_kernel": ("depthwise_kernel", "kernel"),
    "kernel": ("kernel",),
}


def _class(spec: dict) -> str:
    """A layer's class name without a registration package prefix ("pkg>DepthToSpace")."""
    name = spec.get("class_name") if isinstance(spec, dict) else None
    if not isinstance(name, str):
        return "?"
    return name.split(">")[-1]


def _is_ref(item: Any) -> bool:
    return (
        isinstance(item, list)
        and len(item) >= 3
        and isinstance(item[0], str)
        and isinstance(item[1], int)
        and isinstance(item[2], int)
    )


def _refs(value: Any, conv: _Converter) -> list[tuple[str, int, int]]:
    """Model input_layers/output_layers: [name, node, tensor] or a list of them."""
    if _is_ref(value):
        return [(value[0], value[1], value[2])]
    if isinstance(value, list) and all(_is_ref(v) for v in value):
        return [(v[0], v[1], v[2]) for v in value]
    raise conv.fail(f"model inputs/outputs {str(value)[:80]} are not layer references")


def _refs_names(value: Any, conv: _Converter) -> list[str]:
    refs = _refs(value, conv)
    if any(r[1:] != (0, 0) for r in refs):
        raise conv.fail("a model input must be an InputLayer's tensor")
    return [r[0] for r in refs]


def _nodes(spec: dict, conv: _Converter) -> list[tuple[list[tuple[str, int, int]], dict]]:
    """A layer's calls: (input tensor references, call keyword arguments) for each."""
    nodes = spec.get("inbound_nodes", [])
    if not isinstance(nodes, list):
        raise conv.fail(f"inbound_nodes of '{spec.get('name')}' is not a list")
    out = []
    for node in nodes:
        if isinstance(node, dict):  # Keras 3: {"args": [...], "kwargs": {...}}
            refs: list[tuple[str, int, int]] = []
            others: list[Any] = []
            _collect(node.get("args", []), refs, others, 0)
            kwargs = dict(node.get("kwargs") or {})
            kwargs["_args"] = others
            out.append((refs, kwargs))
        elif _is_ref(node):  # Keras 2, one input with call arguments (TFOpLambda)
            kwargs = node[3] if len(node) > 3 and isinstance(node[3], dict) else {}
            out.append(([(node[0], node[1], node[2])], dict(kwargs)))
        elif isinstance(node, list) and all(_is_ref(r) for r in node):  # Keras 2
            kwargs = (
                node[0][3] if node and len(node[0]) > 3 and isinstance(node[0][3], dict) else {}
            )
            out.append(([(r[0], r[1], r[2]) for r in node], dict(kwargs)))
        else:
            raise conv.fail(
                f"inbound node {str(node)[:80]} of '{spec.get('name')}' is not understood"
            )
    return out


def _collect(value: Any, refs: list, others: list, depth: int) -> None:
    if depth > 8:
        raise ValueError("call arguments nest too deeply")
    if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
        history = value.get("config", {}).get("keras_history")
        if not _is_ref(history):
            raise ValueError(f"keras tensor without a valid history: {str(value)[:80]}")
        refs.append((history[0], history[1], history[2]))
    elif isinstance(value, list | tuple):
        for v in value:
            _collect(v, refs, others, depth + 1)
    else:
        others.append(value)

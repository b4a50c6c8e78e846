"""ncnn: on the CPU, and on Vulkan when ncnn finds a GPU (`ncnn.get_gpu_count()`).

`write_ncnn` writes the model in ncnn's own text format (.param) and weights (.bin) for the ops
of CNNs such as ESPCN: Conv (Convolution, ConvolutionDepthWise), activations (ReLU, TanH,
Sigmoid, Clip, HardSwish, HardSigmoid), DepthToSpace (PixelShuffle), pooling (Pooling),
elementwise Add/Sub/Mul/Div (BinaryOp), BatchNormalization (BatchNorm) and Concat. ncnn blobs
have no batch axis, so every activation must be 4-D with batch 1; other models are skipped
with the reason.
"""

from __future__ import annotations

import re
import struct
import time
from pathlib import Path

import numpy as np

from tinydl.bench.harness import Config, Model, Skip, Skipped, Target, captured_stderr
from tinydl.bench.peers import installed, missing
from tinydl.ops.activation import activation_params, check_covers

BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}
PASS_THROUGH = {"Identity", "Dropout"}


def _or(value, default):
    return default if value is None else value


# The ncnn layer, and its parameters from the node's (activation_params), per activation op of
# tinydl.ops.activation.ACTIVATIONS; REFUSED_ACTIVATIONS are not written, for the reason given.
ACTIVATIONS = {
    "Relu": ("ReLU", lambda p: {}),
    "LeakyRelu": ("ReLU", lambda p: {0: p["alpha"]}),
    "Tanh": ("TanH", lambda p: {}),
    "Sigmoid": ("Sigmoid", lambda p: {}),
    "Clip": ("Clip", lambda p: {0: _or(p["min"], -3.4e38), 1: _or(p["max"], 3.4e38)}),
    "HardSwish": ("HardSwish", lambda p: {0: 1 / 6, 1: 0.5}),
    "HardSigmoid": ("HardSigmoid", lambda p: {0: p["alpha"], 1: p["beta"]}),
}
REFUSED_ACTIVATIONS = {"PRelu": "PRelu (ncnn's PReLU layer) is not written"}
check_covers("ncnn writer", ACTIVATIONS, REFUSED_ACTIVATIONS, ops_only=True)


class _Writer:
    def __init__(self, model: Model):
        self.model, self.graph = model, model.graph
        self.layers: list[str] = []
        self.weights = bytearray()
        self.blob: dict[str, str] = {}  # value name -> ncnn blob name
        self.blobs: set[str] = set()

    def fail(self, node, why: str) -> Skip:
        return Skip(f"ncnn writer: {node.op} '{node.name}': {why}")

    def new_blob(self, value: str) -> str:
        name = re.sub(r"[^A-Za-z0-9_]", "_", value)[:40] or "v"
        base, k = name, 1
        while name in self.blobs:
            name, k = f"{base}_{k}", k + 1
        self.blobs.add(name)
        self.blob[value] = name
        return name

    def layer(self, kind: str, ins: list[str], outs: list[str], params: dict | None = None):
        text = " ".join(f"{k}={_param(v)}" for k, v in (params or {}).items())
        self.layers.append(
            f"{kind:<20} l{len(self.layers)} {len(ins)} {len(outs)} "
            f"{' '.join(ins + outs)} {text}".rstrip()
        )

    def tensor(self, array, flag: bool) -> None:
        """Append weights: with flag, ncnn's 4-byte type tag (0 = raw float32) goes first."""
        if flag:
            self.weights += struct.pack("<I", 0)
        self.weights += np.ascontiguousarray(array, "<f4").tobytes()

    def chw(self, name: str) -> tuple[int, int, int]:
        shape = self.model.shape(name)
        if len(shape) != 4 or shape[0] != 1:
            raise Skip(
                f"ncnn writer: '{name}' has shape {shape}; ncnn blobs are C,H,W "
                "(4-D tensors with batch 1 only)"
            )
        return shape[1], shape[2], shape[3]

    def const_operand(self, name: str) -> tuple[str | None, float | None]:
        """A constant operand of a binary op: (blob of a MemoryData layer, or None; scalar)."""
        a = self.graph.initializers[name]
        if a.size == 1:
            return None, float(a.reshape(()))
        shape = (1,) * (4 - a.ndim) + a.shape
        if len(shape) != 4 or shape[0] != 1:
            raise Skip(f"ncnn writer: constant '{name}' of shape {a.shape} is not C,H,W")
        c, h, w = shape[1:]
        out = self.new_blob(name)
        self.layer("MemoryData", [], [out], {0: w, 1: h, 2: c})
        self.tensor(a, flag=False)
        return out, None

    def write(self) -> tuple[str, bytes, list[str], list[str]]:
        g = self.graph
        inputs = []
        for v in g.inputs:
            c, h, w = self.chw(v.name)
            inputs.append(self.new_blob(v.name))
            self.layer("Input", [], [inputs[-1]], {0: w, 1: h, 2: c})
        uses: dict[str, int] = {}
        for node in g.nodes:
            for i in node.inputs:
                if i and i not in g.initializers:
                    uses[i] = uses.get(i, 0) + 1
        splits: dict[str, list[str]] = {}
        self._split_inputs(uses, splits)
        for node in g.nodes:
            self.node(node, splits)
            for out in node.outputs:
                self._split(out, uses, splits)
        outputs = [self.blob[v.name] for v in g.outputs]
        header = f"7767517\n{len(self.layers)} {len(self.blobs)}\n"
        return header + "\n".join(self.layers) + "\n", bytes(self.weights), inputs, outputs

    def _split_inputs(self, uses, splits) -> None:
        for v in self.graph.inputs:
            self._split(v.name, uses, splits)

    def _split(self, value: str, uses, splits) -> None:
        """ncnn needs a Split layer for a blob that several layers read."""
        n = uses.get(value, 0)
        if n > 1 and value in self.blob:
            src = self.blob[value]
            copies = [self.new_blob(f"{value}_s{k}") for k in range(n)]
            self.layer("Split", [src], copies)
            splits[value] = copies

    def take(self, value: str, splits) -> str:
        copies = splits.get(value)
        return copies.pop(0) if copies else self.blob[value]

    def node(self, node, splits) -> None:
        op, a, g = node.op, node.attrs, self.graph
        acts = [i for i in node.inputs if i and i not in g.initializers]
        if op in PASS_THROUGH:
            self.blob[node.outputs[0]] = self.take(node.inputs[0], splits)
            return
        for out in node.outputs:
            if out:
                self.chw(out)
        if op == "Conv":
            self.conv(node, splits)
        elif op in ACTIVATIONS:
            params = activation_params(node, g.initializers.get)
            if params is None:
                raise self.fail(node, "computed min/max")
            layer, layer_params = ACTIVATIONS[op]
            self.layer(
                layer,
                [self.take(node.inputs[0], splits)],
                [self.new_blob(node.outputs[0])],
                layer_params(params),
            )
        elif op in REFUSED_ACTIVATIONS:
            raise self.fail(node, REFUSED_ACTIVATIONS[op])
        elif op == "DepthToSpace":
            mode = 0 if a.get("mode", "DCR") == "CRD" else 1
            self.layer(
                "PixelShuffle",
                [self.take(node.inputs[0], splits)],
                [self.new_blob(node.outputs[0])],
                {0: a["blocksize"], 1: mode},
            )
        elif op in ("MaxPool", "AveragePool"):
            self.pool(node, splits)
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            raise self.fail(node, "global pooling gives ncnn a 1-D blob (not written)")
        elif op in BINARY_OPS:
            self.binary(node, splits, acts)
        elif op == "BatchNormalization":
            scale, bias, mean, var = (g.initializers.get(n) for n in node.inputs[1:5])
            if any(t is None for t in (scale, bias, mean, var)):
                raise self.fail(node, "statistics are not constants")
            self.layer(
                "BatchNorm",
                [self.take(node.inputs[0], splits)],
                [self.new_blob(node.outputs[0])],
                {0: scale.size, 1: a.get("epsilon", 1e-5)},
            )
            for t in (scale, mean, var, bias):
                self.tensor(t, flag=False)
        elif op == "Concat":
            axis = a["axis"] % 4
            if axis == 0 or len(acts) != len(node.inputs):
                raise self.fail(node, "only concatenation of activations along C, H or W")
            self.layer(
                "Concat",
                [self.take(i, splits) for i in node.inputs],
                [self.new_blob(node.outputs[0])],
                {0: axis - 1},
            )
        else:
            raise self.fail(node, "op not covered")

    def conv(self, node, splits) -> None:
        a, g = node.attrs, self.graph
        w = g.initializers.get(node.inputs[1])
        if w is None or w.ndim != 4:
            raise self.fail(node, "not a 2-D conv with constant weights")
        if a.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
            raise self.fail(node, f"auto_pad {a['auto_pad']}")
        b = g.initializers.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if len(node.inputs) > 2 and node.inputs[2] and b is None:
            raise self.fail(node, "computed bias")
        top, left, bottom, right = a.get("pads") or (0, 0, 0, 0)
        sh, sw = a.get("strides") or (1, 1)
        dh, dw = a.get("dilations") or (1, 1)
        group = a.get("group", 1)
        params = {
            0: w.shape[0],
            1: w.shape[3],
            11: w.shape[2],
            2: dw,
            12: dh,
            3: sw,
            13: sh,
            4: left,
            15: right,
            14: top,
            16: bottom,
            5: int(b is not None),
            6: w.size,
        }
        if group != 1:
            params[7] = group
        self.layer(
            "Convolution" if group == 1 else "ConvolutionDepthWise",
            [self.take(node.inputs[0], splits)],
            [self.new_blob(node.outputs[0])],
            params,
        )
        self.tensor(w, flag=True)
        if b is not None:
            self.tensor(b, flag=False)

    def pool(self, node, splits) -> None:
        a = node.attrs
        kh, kw = a["kernel_shape"]
        if any(d != 1 for d in a.get("dilations") or (1, 1)):
            raise self.fail(node, "dilated pooling")
        top, left, bottom, right = a.get("pads") or (0, 0, 0, 0)
        sh, sw = a.get("strides") or (1, 1)
        params = {
            0: 0 if node.op == "MaxPool" else 1,
            1: kw,
            11: kh,
            2: sw,
            12: sh,
            3: left,
            14: right,
            13: top,
            15: bottom,
            5: 0 if a.get("ceil_mode", 0) else 1,
        }  # 0: full (ceil), 1: valid (floor)
        if node.op == "AveragePool":
            params[6] = int(a.get("count_include_pad", 0))
        self.layer(
            "Pooling", [self.take(node.inputs[0], splits)], [self.new_blob(node.outputs[0])], params
        )

    def binary(self, node, splits, acts) -> None:
        g = self.graph
        op = BINARY_OPS[node.op]
        x, y = node.inputs[:2]
        if not acts:
            raise self.fail(node, "both operands are constants")
        if x in g.initializers or y in g.initializers:
            const = x if x in g.initializers else y
            act = y if const == x else x
            blob, scalar = self.const_operand(const)
            if scalar is not None:
                if const == x and node.op in ("Sub", "Div"):
                    op += 6  # RSUB, RDIV: scalar - x, scalar / x
                self.layer(
                    "BinaryOp",
                    [self.take(act, splits)],
                    [self.new_blob(node.outputs[0])],
                    {0: op, 1: 1, 2: scalar},
                )
                return
            ins = [self.take(act, splits), blob] if const == y else [blob, self.take(act, splits)]
        else:
            ins = [self.take(x, splits), self.take(y, splits)]
        self.layer("BinaryOp", ins, [self.new_blob(node.outputs[0])], {0: op})


def _param(v) -> str:
    if isinstance(v, float):
        return f"{v:.9e}"
    return str(int(v))


def write_ncnn(model: Model, param: Path, weights: Path) -> tuple[list[str], list[str]]:
    """Write .param/.bin for the model at its input's shapes; the input and output blobs."""
    text, data, inputs, outputs = _Writer(model).write()
    param.write_text(text)
    weights.write_bytes(data)
    return inputs, outputs


class NcnnTarget(Target):
    engine = "ncnn"

    def __init__(self, model: Model, config: Config, vulkan: bool):
        super().__init__(f"ncnn/{'vulkan' if vulkan else 'cpu'}", model, config)
        self.vulkan = vulkan
        self.param = model.workdir / f"{model.stem}.ncnn.param"
        self.bin = model.workdir / f"{model.stem}.ncnn.bin"
        if vulkan:
            self.gpu_note = "n/a: the ncnn Python API has no device timestamps"
            self.transfer_note = "n/a: the ncnn Python API copies inside each run"
        self.info["model_load"] = "tinydl-bench's ncnn writer (ncnn reads the files in compile)"

    def device_init(self) -> None:
        with captured_stderr() as log:
            import ncnn

            self.ncnn = ncnn
            if self.vulkan:
                if ncnn.get_gpu_count() == 0:
                    raise Skip("ncnn finds no Vulkan GPU (ncnn.get_gpu_count() == 0)")
                ncnn.create_gpu_instance()
                self.device = (
                    f"Vulkan: {ncnn.get_gpu_info(ncnn.get_default_gpu_index()).device_name()}"
                )
            else:
                self.device = f"CPU, {self.config.cpu_threads} threads"
        self.info["ncnn"] = getattr(ncnn, "__version__", "")
        del log

    def load(self) -> None:
        t0 = time.perf_counter()
        self.ins, self.outs = write_ncnn(self.model, self.param, self.bin)
        self.info["convert_s"] = time.perf_counter() - t0

    def compile(self):
        ncnn = self.ncnn
        net = ncnn.Net()
        opt = net.opt
        opt.num_threads = self.config.cpu_threads
        half = self.vulkan and self.config.precision == "fp16"
        opt.use_fp16_packed = opt.use_fp16_storage = opt.use_fp16_arithmetic = half
        opt.use_bf16_storage = False
        opt.use_vulkan_compute = self.vulkan
        with captured_stderr() as log:
            failed = net.load_param(str(self.param)) != 0 or net.load_model(str(self.bin)) != 0
        if failed:
            raise RuntimeError("ncnn could not load the written model: " + " ".join(log[-3:]))
        return net

    def run(self, inst, feeds) -> list[np.ndarray]:
        ex = inst.create_extractor()
        for v, blob in zip(self.model.graph.inputs, self.ins, strict=True):
            ex.input(blob, self.ncnn.Mat(np.ascontiguousarray(feeds[v.name][0])))
        outs = []
        for ref, blob in zip(self.model.reference, self.outs, strict=True):
            ret, mat = ex.extract(blob)
            if ret != 0:
                raise RuntimeError(f"ncnn extract '{blob}' failed ({ret})")
            outs.append(np.array(mat).reshape(ref.shape))
        return outs


def targets(model: Model, config: Config) -> list[Target | Skipped]:
    if not installed("ncnn"):
        return [missing("ncnn", "ncnn/cpu", "ncnn")]
    return [NcnnTarget(model, config, vulkan=False), NcnnTarget(model, config, vulkan=True)]

"""LiteRT (ai-edge-litert): the CompiledModel API on the CPU accelerator (XNNPACK) and on the
GPU accelerator.

`write_tflite` builds the .tflite without TensorFlow, through the flatbuffer schema module that
ai-edge-litert ships, for CNN graphs at the input's fixed shapes: Conv (CONV_2D,
DEPTHWISE_CONV_2D, PAD where the pads are not SAME/VALID), activations (RELU, RELU6,
LEAKY_RELU, TANH, LOGISTIC, HARD_SWISH, Clip as MAXIMUM/MINIMUM), DepthToSpace
(DEPTH_TO_SPACE: DCR order, or CRD with one output channel, where the two agree), MaxPool and
AveragePool with SAME/VALID pads, GlobalAveragePool (MEAN), Add/Sub/Mul/Div, BatchNormalization
(MUL + ADD) and Concat. Activations are NHWC in the file; the target transposes NCHW inputs and
outputs inside each timed run, as a user with NCHW data would.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tinydl.bench.harness import Config, Model, Skip, Skipped, Target, captured_stderr
from tinydl.bench.peers import installed, missing
from tinydl.ops.activation import activation_params, check_covers

NHWC = (0, 2, 3, 1)
NCHW = (0, 3, 1, 2)
# The builtin per activation op of tinydl.ops.activation.ACTIVATIONS (LeakyRelu and Clip have
# their own writers); REFUSED_ACTIVATIONS are not written, for the reason given.
ACTIVATIONS = {
    "Relu": "RELU",
    "Tanh": "TANH",
    "Sigmoid": "LOGISTIC",
    "HardSwish": "HARD_SWISH",
    "LeakyRelu": "LEAKY_RELU",
    "Clip": None,
}
REFUSED_ACTIVATIONS = {
    "PRelu": "PRelu (PRELU) is not written",
    "HardSigmoid": "HardSigmoid has no tflite builtin",
}
check_covers("tflite writer", ACTIVATIONS, REFUSED_ACTIVATIONS, ops_only=True)


def _tf_same(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TensorFlow's SAME padding (before, after) for one axis."""
    eff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


class _Writer:
    def __init__(self, model: Model):
        from ai_edge_litert import schema_py_generated as s

        self.s, self.model, self.graph = s, model, model.graph
        self.m = s.ModelT()
        self.m.version = 3
        self.m.description = "tinydl-bench"
        self.m.buffers = [s.BufferT()]  # buffer 0: the empty sentinel
        self.m.operatorCodes = []
        self.sg = s.SubGraphT()
        self.sg.tensors, self.sg.operators, self.sg.name = [], [], "main"
        self.codes: dict[int, int] = {}
        self.index: dict[str, int] = {}  # value name -> tensor index

    def fail(self, node, why: str) -> Skip:
        return Skip(f"tflite writer: {node.op} '{node.name}': {why}")

    def tensor(self, name: str, shape, data: np.ndarray | None = None, dtype=None) -> int:
        s = self.s
        t = s.TensorT()
        t.name, t.shape = name, [int(d) for d in shape]
        kind = np.dtype(dtype or (data.dtype if data is not None else np.float32))
        t.type = {
            np.dtype(np.float32): s.TensorType.FLOAT32,
            np.dtype(np.int32): s.TensorType.INT32,
        }[kind]
        t.buffer = 0
        if data is not None:
            b = s.BufferT()
            raw = np.ascontiguousarray(data, kind.newbyteorder("<")).tobytes()
            b.data = np.frombuffer(raw, np.uint8)
            self.m.buffers.append(b)
            t.buffer = len(self.m.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def const(self, name: str, array: np.ndarray) -> int:
        """A constant operand in NHWC: 4-D (or lower, NCHW-broadcast) arrays are transposed."""
        a = np.asarray(array, np.float32)
        if a.ndim > 4:
            raise Skip(f"tflite writer: constant '{name}' has {a.ndim} dims")
        if a.size > 1:
            a = a.reshape((1,) * (4 - a.ndim) + a.shape).transpose(NHWC)
        else:
            a = a.reshape(())
        return self.tensor(name, a.shape, a)

    def value(self, name: str) -> int:
        if name not in self.index:
            if name in self.graph.initializers:
                return self.const(name, self.graph.initializers[name])
            raise KeyError(name)
        return self.index[name]

    def activation(self, name: str) -> int:
        shape = self.model.shape(name)
        if len(shape) != 4:
            raise Skip(f"tflite writer: '{name}' has shape {shape}; only 4-D activations")
        self.index[name] = self.tensor(name, [shape[i] for i in NHWC])
        return self.index[name]

    def op(self, code: int, ins: list[int], outs: list[int], kind: int = 0, options=None):
        s = self.s
        if code not in self.codes:
            oc = s.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
            self.codes[code] = len(self.m.operatorCodes)
            self.m.operatorCodes.append(oc)
        o = s.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self.codes[code], ins, outs
        o.builtinOptionsType, o.builtinOptions = kind, options
        self.sg.operators.append(o)

    def padding(self, node, name: str, k, strides, dil) -> tuple[int, int]:
        """(tensor to read, padding enum): SAME, VALID, or an explicit PAD then VALID."""
        s = self.s
        pads = list(node.attrs.get("pads") or (0, 0, 0, 0))
        if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
            raise self.fail(node, f"auto_pad {node.attrs['auto_pad']}")
        src = self.value(name)
        if not any(pads):
            return src, s.Padding.VALID
        _, _, h, w = self.model.shape(name)
        (t, b), (left, r) = (
            _tf_same(n, kk, ss, dd) for n, kk, ss, dd in zip((h, w), k, strides, dil, strict=True)
        )
        if pads == [t, left, b, r]:
            return src, s.Padding.SAME
        if node.op != "Conv":
            raise self.fail(node, f"pads {pads} are neither SAME nor VALID")
        paddings = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
        n_, c_, h_, w_ = self.model.shape(name)
        padded = self.tensor(
            f"{name}_padded", [n_, h_ + pads[0] + pads[2], w_ + pads[1] + pads[3], c_]
        )
        p = s.PadOptionsT()
        self.op(
            s.BuiltinOperator.PAD,
            [src, self.tensor(f"{name}_pads", [4, 2], paddings)],
            [padded],
            s.BuiltinOptions.PadOptions,
            p,
        )
        return padded, s.Padding.VALID

    def write(self) -> bytes:
        s, g = self.s, self.graph
        inputs = [self.activation(v.name) for v in g.inputs]
        for node in g.nodes:
            self.node(node)
        outputs = [self.value(v.name) for v in g.outputs]
        self.sg.inputs, self.sg.outputs = inputs, outputs
        self.m.subgraphs = [self.sg]
        sig = s.SignatureDefT()
        sig.signatureKey, sig.subgraphIndex = "serving_default", 0
        sig.inputs, sig.outputs = [], []
        for names, idx, into in ((g.inputs, inputs, sig.inputs), (g.outputs, outputs, sig.outputs)):
            for v, i in zip(names, idx, strict=True):
                tm = s.TensorMapT()
                tm.name, tm.tensorIndex = v.name, i
                into.append(tm)
        self.m.signatureDefs = [sig]
        import flatbuffers

        builder = flatbuffers.Builder(1024)
        builder.Finish(self.m.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    def node(self, node) -> None:
        s, g, a, op = self.s, self.graph, node.attrs, node.op
        B = s.BuiltinOperator
        if op in ("Identity", "Dropout"):
            self.index[node.outputs[0]] = self.value(node.inputs[0])
            return
        x = node.inputs[0]
        if op == "Conv":
            return self.conv(node)
        if op in ("MaxPool", "AveragePool"):
            k = a["kernel_shape"]
            if a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations") or (1, 1)):
                raise self.fail(node, "ceil_mode or dilation")
            strides = a.get("strides") or (1, 1)
            src, pad = self.padding(node, x, k, strides, (1, 1))
            if op == "AveragePool" and pad == s.Padding.SAME and a.get("count_include_pad", 0):
                raise self.fail(node, "count_include_pad with padding")
            o = s.Pool2DOptionsT()
            o.padding, o.strideH, o.strideW = pad, strides[0], strides[1]
            o.filterHeight, o.filterWidth = k
            o.fusedActivationFunction = s.ActivationFunctionType.NONE
            code = B.MAX_POOL_2D if op == "MaxPool" else B.AVERAGE_POOL_2D
            return self.op(
                code, [src], [self.activation(node.outputs[0])], s.BuiltinOptions.Pool2DOptions, o
            )
        if op in ACTIVATIONS:
            params = activation_params(node, g.initializers.get)
            if params is None:
                raise self.fail(node, "computed min/max")
            if op == "Clip":
                return self.clip(node, params["min"], params["max"])
            code = getattr(B, ACTIVATIONS[op])
            if op != "LeakyRelu":
                return self.op(code, [self.value(x)], [self.activation(node.outputs[0])])
            o = s.LeakyReluOptionsT()
            o.alpha = params["alpha"]
            return self.op(
                code,
                [self.value(x)],
                [self.activation(node.outputs[0])],
                s.BuiltinOptions.LeakyReluOptions,
                o,
            )
        if op in REFUSED_ACTIVATIONS:
            raise self.fail(node, REFUSED_ACTIVATIONS[op])
        if op == "DepthToSpace":
            r = a["blocksize"]
            c_out = self.model.shape(node.outputs[0])[1]
            if a.get("mode", "DCR") == "CRD" and c_out != 1:
                raise self.fail(node, "CRD order with more than one output channel")
            o = s.DepthToSpaceOptionsT()
            o.blockSize = r
            return self.op(
                B.DEPTH_TO_SPACE,
                [self.value(x)],
                [self.activation(node.outputs[0])],
                s.BuiltinOptions.DepthToSpaceOptions,
                o,
            )
        if op in ("Add", "Sub", "Mul", "Div"):
            if all(i in g.initializers for i in node.inputs):
                raise self.fail(node, "both operands are constants")
            kinds = {
                "Add": (B.ADD, "AddOptions"),
                "Sub": (B.SUB, "SubOptions"),
                "Mul": (B.MUL, "MulOptions"),
                "Div": (B.DIV, "DivOptions"),
            }
            code, opt_name = kinds[op]
            o = getattr(s, f"{opt_name}T")()
            o.fusedActivationFunction = s.ActivationFunctionType.NONE
            return self.op(
                code,
                [self.value(i) for i in node.inputs[:2]],
                [self.activation(node.outputs[0])],
                getattr(s.BuiltinOptions, opt_name),
                o,
            )
        if op == "GlobalAveragePool":
            o = s.ReducerOptionsT()
            o.keepDims = True
            axes = self.tensor(f"{node.name}_axes", [2], np.array([1, 2], np.int32))
            return self.op(
                B.MEAN,
                [self.value(x), axes],
                [self.activation(node.outputs[0])],
                s.BuiltinOptions.ReducerOptions,
                o,
            )
        if op == "BatchNormalization":
            scale, bias, mean, var = (g.initializers.get(n) for n in node.inputs[1:5])
            if any(t is None for t in (scale, bias, mean, var)):
                raise self.fail(node, "statistics are not constants")
            k = scale / np.sqrt(var.astype(np.float64) + a.get("epsilon", 1e-5))
            shift = bias - mean * k
            c = scale.size
            mid = self.tensor(f"{node.name}_scaled", [self.model.shape(x)[i] for i in NHWC])
            mo, ao = s.MulOptionsT(), s.AddOptionsT()
            mo.fusedActivationFunction = ao.fusedActivationFunction = 0
            self.op(
                B.MUL,
                [self.value(x), self.const(f"{node.name}_k", k.reshape(1, c, 1, 1))],
                [mid],
                s.BuiltinOptions.MulOptions,
                mo,
            )
            return self.op(
                B.ADD,
                [mid, self.const(f"{node.name}_b", shift.reshape(1, c, 1, 1))],
                [self.activation(node.outputs[0])],
                s.BuiltinOptions.AddOptions,
                ao,
            )
        if op == "Concat":
            o = s.ConcatenationOptionsT()
            o.axis = {0: 0, 1: 3, 2: 1, 3: 2}[a["axis"] % 4]
            o.fusedActivationFunction = s.ActivationFunctionType.NONE
            return self.op(
                B.CONCATENATION,
                [self.value(i) for i in node.inputs],
                [self.activation(node.outputs[0])],
                s.BuiltinOptions.ConcatenationOptions,
                o,
            )
        raise self.fail(node, "op not covered")

    def clip(self, node, lo: float | None, hi: float | None) -> None:
        s = self.s
        B = s.BuiltinOperator
        out = node.outputs[0]
        if (lo, hi) in ((0.0, 6.0), (0.0, None)):
            code = B.RELU6 if hi == 6.0 else B.RELU
            return self.op(code, [self.value(node.inputs[0])], [self.activation(out)])
        src = self.value(node.inputs[0])
        steps = [(B.MAXIMUM, lo), (B.MINIMUM, hi)]
        steps = [(c, v) for c, v in steps if v is not None]
        for k, (code, v) in enumerate(steps):
            last = k == len(steps) - 1
            dst = (
                self.activation(out)
                if last
                else self.tensor(f"{out}_lo", [self.model.shape(out)[i] for i in NHWC])
            )
            bound = self.tensor(f"{out}_b{k}", [], np.array(v, np.float32))
            self.op(
                code,
                [src, bound],
                [dst],
                s.BuiltinOptions.MaximumMinimumOptions,
                s.MaximumMinimumOptionsT(),
            )
            src = dst
        if not steps:
            self.index[out] = src

    def conv(self, node) -> None:
        s, g, a = self.s, self.graph, node.attrs
        B = s.BuiltinOperator
        w = g.initializers.get(node.inputs[1])
        if w is None or w.ndim != 4:
            raise self.fail(node, "not a 2-D conv with constant weights")
        bname = node.inputs[2] if len(node.inputs) > 2 else ""
        if bname and bname not in g.initializers:
            raise self.fail(node, "computed bias")
        bias = g.initializers[bname] if bname else np.zeros(w.shape[0], np.float32)
        group = a.get("group", 1)
        c_in = self.model.shape(node.inputs[0])[1]
        strides = a.get("strides") or (1, 1)
        dil = a.get("dilations") or (1, 1)
        src, pad = self.padding(node, node.inputs[0], w.shape[2:], strides, dil)
        out = self.activation(node.outputs[0])
        bt = self.tensor(f"{node.name}_bias", [w.shape[0]], np.asarray(bias, np.float32))
        if group == 1:
            wt = self.tensor(f"{node.name}_w", [w.shape[i] for i in NHWC], w.transpose(NHWC))
            o = s.Conv2DOptionsT()
            code, kind = B.CONV_2D, s.BuiltinOptions.Conv2DOptions
        elif group == c_in and w.shape[1] == 1:
            filt = w.transpose(1, 2, 3, 0)  # (1, kh, kw, C_out)
            wt = self.tensor(f"{node.name}_w", filt.shape, filt)
            o = s.DepthwiseConv2DOptionsT()
            o.depthMultiplier = w.shape[0] // c_in
            code, kind = B.DEPTHWISE_CONV_2D, s.BuiltinOptions.DepthwiseConv2DOptions
        else:
            raise self.fail(node, f"grouped conv (group={group}) that is not depthwise")
        o.padding, o.strideH, o.strideW = pad, strides[0], strides[1]
        o.dilationHFactor, o.dilationWFactor = dil
        o.fusedActivationFunction = s.ActivationFunctionType.NONE
        self.op(code, [src, wt, bt], [out], kind, o)


def _why(log: list[str]) -> str:
    """The informative lines of LiteRT's log: why a delegate failed (not the vendor plugins it
    could not find, nor source locations)."""
    words = ("Failed to initialize", "No adapters", "required", "not supported")
    keep = [
        line.split("] ", 1)[-1].strip()
        for line in log
        if any(w in line for w in words) and "plugin" not in line
    ]
    return "; ".join(dict.fromkeys(keep[-3:]))


def write_tflite(model: Model, path) -> None:
    path.write_bytes(_Writer(model).write())


class LiteRTTarget(Target):
    engine = "litert"

    def __init__(self, model: Model, config: Config, gpu: bool):
        super().__init__(f"litert/{'gpu' if gpu else 'cpu'}", model, config)
        self.gpu = gpu
        # A .tflite model is LiteRT's own file: it runs as it is, in its own layout (tinydl's
        # importer keeps the file's inputs and outputs); other models go through the writer.
        self.native = Path(model.path).suffix.lower() == ".tflite"
        if self.native:
            self.path = Path(model.path)
            self.info["model_load"] = "the model's own .tflite file (LiteRT reads it in compile)"
        else:
            self.path = model.workdir / f"{model.stem}.tflite"
            self.info["model_load"] = (
                "tinydl-bench's .tflite writer (LiteRT reads the file in compile)"
            )
        self.instances: list = []
        if gpu:
            self.gpu_note = "n/a: LiteRT's Python API has no device timestamps"
            self.transfer_note = "n/a: LiteRT's Python API copies inside each run"

    def device_init(self) -> None:
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.cpu_options import CpuOptions
        from ai_edge_litert.gpu_options import GpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import Options

        self.CompiledModel = CompiledModel
        if self.gpu:
            self.options = Options(
                HardwareAccelerator.GPU,
                gpu_options=GpuOptions(enforce_f32=self.config.precision == "fp32"),
            )
            self.device = "GPU accelerator"
        else:
            self.options = Options(
                HardwareAccelerator.CPU, cpu_options=CpuOptions(num_threads=self.config.cpu_threads)
            )
            self.device = f"CPU (XNNPACK), {self.config.cpu_threads} threads"

    def load(self) -> None:
        if self.native:
            return
        t0 = time.perf_counter()
        write_tflite(self.model, self.path)
        self.info["convert_s"] = time.perf_counter() - t0

    def compile(self):
        error = None
        with captured_stderr() as log:
            try:
                cm = self.CompiledModel.from_file(str(self.path), options=self.options)
            except RuntimeError as exc:  # LiteRT raises RuntimeError; its log says why
                error = exc
        if error is not None:
            detail = _why(log) or " ".join(str(error).split())
            if self.gpu:
                raise Skip(f"the GPU accelerator did not start: {detail}")
            raise RuntimeError(detail)
        self.info["fully_accelerated"] = bool(cm.is_fully_accelerated())
        if self.gpu and not cm.is_fully_accelerated():
            raise Skip("the GPU accelerator does not take the whole model")
        inst = (cm, cm.create_input_buffers(0), cm.create_output_buffers(0))
        self.instances.append(inst)
        return inst

    def run(self, inst, feeds) -> list[np.ndarray]:
        cm, ins, outs = inst
        for v, buf in zip(self.model.graph.inputs, ins, strict=True):
            x = feeds[v.name]
            buf.write(np.ascontiguousarray(x if self.native else x.transpose(NHWC)))
        cm.run_by_index(0, ins, outs)
        result = []
        for ref, buf in zip(self.model.reference, outs, strict=True):
            if self.native:
                result.append(buf.read(ref.size, np.float32).reshape(ref.shape))
                continue
            n, c, h, w = ref.shape
            y = buf.read(ref.size, np.float32).reshape(n, h, w, c)
            result.append(np.ascontiguousarray(y.transpose(NCHW)))
        return result

    def close(self) -> None:
        import gc

        with captured_stderr():
            self.instances.clear()
            gc.collect()


def targets(model: Model, config: Config) -> list[Target | Skipped]:
    if not installed("ai_edge_litert"):
        return [missing("ai-edge-litert", "litert/cpu", "ai-edge-litert")]
    return [LiteRTTarget(model, config, gpu=False), LiteRTTarget(model, config, gpu=True)]

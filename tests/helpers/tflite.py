"""Writing TFLite models without TensorFlow (the flatbuffer schema classes LiteRT ships) and
running them in LiteRT's own interpreter, or in MediaPipe's runtime (for MediaPipe's custom ops).
Importing this skips the test module where LiteRT (ai-edge-litert) is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

S = pytest.importorskip("ai_edge_litert.schema_py_generated", reason="pip install 'tinydl[test]'")
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

SAME, VALID = 0, 1  # TFLite's Padding values


def litert(
    model: bytes | Path,
    feeds: list[np.ndarray],
    resolver=OpResolverType.BUILTIN_REF,
    all_tensors: bool = False,
):
    kw = {"model_path": str(model)} if isinstance(model, Path) else {"model_content": bytes(model)}
    it = Interpreter(
        **kw, experimental_op_resolver_type=resolver, experimental_preserve_all_tensors=all_tensors
    )
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it


class TFLiteModel:
    """A TFLite model written with the schema classes LiteRT ships (no TensorFlow needed)."""

    def __init__(self):
        self.m = S.ModelT()
        self.m.version = 3
        self.m.buffers = [S.BufferT()]
        self.m.operatorCodes = []
        self.g = S.SubGraphT()
        self.g.tensors, self.g.operators, self.g.name = [], [], "main"
        self.codes: dict[int, int] = {}

    def tensor(
        self,
        shape,
        dtype=np.float32,
        data=None,
        name=None,
        sparsity=None,
        quant=None,
        signature=None,
    ) -> int:
        t = S.TensorT()
        t.name = name or f"t{len(self.g.tensors)}"
        t.shape = [int(d) for d in shape]
        t.type = {
            np.dtype(np.float32): S.TensorType.FLOAT32,
            np.dtype(np.float16): S.TensorType.FLOAT16,
            np.dtype(np.int32): S.TensorType.INT32,
            np.dtype(np.int64): S.TensorType.INT64,
            np.dtype(np.int8): S.TensorType.INT8,
        }[np.dtype(dtype)]
        if signature is not None:
            t.shapeSignature = list(signature)
        t.buffer = 0
        if data is not None:
            b = S.BufferT()
            b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
            self.m.buffers.append(b)
            t.buffer = len(self.m.buffers) - 1
        t.sparsity, t.quantization = sparsity, quant
        self.g.tensors.append(t)
        return len(self.g.tensors) - 1

    def const(self, array, name=None) -> int:
        array = np.asarray(array)
        return self.tensor(array.shape, array.dtype, array, name)

    def op(self, name: str, ins, n_out: int = 1, options=None, out_shapes=None) -> int | list[int]:
        code = getattr(S.BuiltinOperator, name)
        if code not in self.codes:
            oc = S.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
            self.codes[code] = len(self.m.operatorCodes)
            self.m.operatorCodes.append(oc)
        outs = [self.tensor(out_shapes[i] if out_shapes else [1]) for i in range(n_out)]
        o = S.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self.codes[code], list(ins), outs
        if options is not None:
            o.builtinOptionsType = getattr(S.BuiltinOptions, type(options).__name__[:-1])
            o.builtinOptions = options
        self.g.operators.append(o)
        return outs[0] if n_out == 1 else outs

    def custom(self, name: str, ins, out_shape, options: bytes = b"", version: int = 1) -> int:
        """A custom op (LiteRT cannot run it, so its output shape is given)."""
        oc = S.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode = S.BuiltinOperator.CUSTOM, 32
        oc.customCode, oc.version = name, version
        self.m.operatorCodes.append(oc)
        o = S.OperatorT()
        o.opcodeIndex, o.inputs = len(self.m.operatorCodes) - 1, list(ins)
        o.outputs = [self.tensor(out_shape)]
        o.customOptions = list(options)
        self.g.operators.append(o)
        return o.outputs[0]

    def build(self, inputs, outputs, feeds) -> bytes:
        """Serialize; output shapes are taken from a LiteRT run, so cases need not spell them."""
        self.g.inputs, self.g.outputs = list(inputs), list(outputs)
        self.m.subgraphs = [self.g]
        data = self._bytes()
        it = litert(data, feeds, all_tensors=True)
        for i, t in enumerate(self.g.tensors):
            if t.buffer == 0 and i not in inputs:
                t.shape = list(it.get_tensor(i).shape)
        return self._bytes()

    def serialize(self, inputs, outputs) -> bytes:
        """The model as it stands, without a LiteRT run (all shapes given)."""
        self.g.inputs, self.g.outputs = list(inputs), list(outputs)
        self.m.subgraphs = [self.g]
        return self._bytes()

    def _bytes(self) -> bytes:
        import flatbuffers

        builder = flatbuffers.Builder(1024)
        builder.Finish(self.m.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


def options(kind: str, **fields):
    opts = getattr(S, f"{kind}OptionsT")()
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


def zeros(m, n):
    """A zero bias: LiteRT's reference conv kernels want one."""
    return m.const(np.zeros(n, np.float32))


def sparsity(dims, order, block_map=()):
    sp = S.SparsityParametersT()
    sp.traversalOrder, sp.blockMap, sp.dimMetadata = list(order), list(block_map), []
    for fmt, dense, seg, idx in dims:
        d = S.DimensionMetadataT()
        d.format, d.denseSize = fmt, dense
        if fmt == S.DimensionType.SPARSE_CSR:
            d.arraySegmentsType = d.arrayIndicesType = S.SparseIndexVector.Int32Vector
            d.arraySegments, d.arrayIndices = S.Int32VectorT(), S.Int32VectorT()
            d.arraySegments.values, d.arrayIndices.values = list(seg), list(idx)
        sp.dimMetadata.append(d)
    return sp


def mediapipe_runtime(model: Path, image: np.ndarray, low: float, high: float, outputs: int):
    """Run a MediaPipe model file in MediaPipe's own runtime, with its custom ops: an
    ImageToTensorCalculator turns the uint8 RGB image (at the model's input size) into a float
    tensor in [low, high], an InferenceCalculator with MediaPipe's op resolver runs the model.
    Returns the input tensor it fed and the output tensors, flat, in the model's order."""
    import sys

    from helpers.models import mediapipe_root

    root = str(mediapipe_root())  # the unpacked wheel: installing it would break `pip check`
    if root not in sys.path:
        sys.path.append(root)
    from mediapipe.python import packet_creator, packet_getter
    from mediapipe.python._framework_bindings import calculator_graph, image_frame

    h, w = image.shape[:2]
    ranges = " ".join(f"ranges {{ begin: {i} end: {i + 1} }}" for i in range(outputs))
    streams = " ".join(f'output_stream: "part{i}"' for i in range(outputs))
    config = f"""
      input_stream: "image"
      output_stream: "input"
      node {{ calculator: "ImageToTensorCalculator" input_stream: "IMAGE:image"
        output_stream: "TENSORS:x"
        options {{ [mediapipe.ImageToTensorCalculatorOptions.ext] {{
          output_tensor_width: {w} output_tensor_height: {h}
          output_tensor_float_range {{ min: {low} max: {high} }} }} }} }}
      node {{ calculator: "TensorsToFloatsCalculator" input_stream: "TENSORS:x"
        output_stream: "FLOATS:input" }}
      node {{ calculator: "TfLiteCustomOpResolverCalculator"
        output_side_packet: "OP_RESOLVER:op_resolver" }}
      node {{ calculator: "InferenceCalculator" input_stream: "TENSORS:x"
        output_stream: "TENSORS:y" input_side_packet: "OP_RESOLVER:op_resolver"
        options {{ [mediapipe.InferenceCalculatorOptions.ext] {{
          model_path: "{model}" delegate {{ tflite {{}} }} }} }} }}
      node {{ calculator: "SplitTensorVectorCalculator" input_stream: "y" {streams}
        options {{ [mediapipe.SplitVectorCalculatorOptions.ext] {{ {ranges} }} }} }}
    """
    for i in range(outputs):
        config += f"""
      node {{ calculator: "TensorsToFloatsCalculator" input_stream: "TENSORS:part{i}"
        output_stream: "FLOATS:out{i}" }}
      output_stream: "out{i}"
    """
    graph = calculator_graph.CalculatorGraph(graph_config=config)
    got: dict[str, np.ndarray] = {}
    for name in ["input", *(f"out{i}" for i in range(outputs))]:
        graph.observe_output_stream(
            name, lambda s, p: got.__setitem__(s, np.array(packet_getter.get_float_list(p)))
        )
    graph.start_run()
    frame = packet_creator.create_image_frame(
        image_format=image_frame.ImageFormat.SRGB, data=np.ascontiguousarray(image)
    )
    graph.add_packet_to_input_stream("image", frame.at(0))
    graph.close()
    return got["input"].astype(np.float32), [
        got[f"out{i}"].astype(np.float32) for i in range(outputs)
    ]

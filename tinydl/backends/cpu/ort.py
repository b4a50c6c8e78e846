"""The onnxruntime backend: CPU partitions handed to onnxruntime's CPU execution provider, the
way TFLite hands CPU work to XNNPACK.

A partition is written as ONNX by tinydl's exporter (tinydl.exporters.onnx) and run by an
onnxruntime InferenceSession; values stay in host memory, so moving between this backend and
the NumPy one costs nothing. tinydl's own fused ops (tinydl.FusedConv) have no ONNX spelling, so
a session with this backend first keeps Conv + activation apart (the optimizer asks each
backend before it fuses) and onnxruntime fuses them its own way.

Options (backend_options={"onnxruntime": {...}}): "threads" (intra-op threads; default:
`default_threads()`, as for the NumPy backend; `tinydl.compile(threads=N)` sets both),
"optimization" ("all" (default), "extended", "basic", "none": onnxruntime's graph
optimization level).
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import numpy as np

from tinydl.backends.base import (
    HOST,
    Backend,
    CompileOptions,
    Kernel,
    Support,
    cpu_model,
    threads_option,
)
from tinydl.errors import BackendUnavailableError, OpError, UnsupportedOpError
from tinydl.ir.graph import Graph, Node
from tinydl.ops import schema_of

LEVELS = ("none", "basic", "extended", "all")


class OrtKernel(Kernel):
    def __init__(self, graph: Graph, options: CompileOptions):
        from tinydl.exporters.onnx import to_onnx

        self.level = options.extra.get("optimization", "all")
        if self.level not in LEVELS:
            raise ValueError(f"onnxruntime option optimization: expected one of {LEVELS}")
        self.threads = threads_option(options)
        self.graph = graph
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        # The partition for the session cache (tinydl/snapshot.py), until the session is kept:
        # onnxruntime's optimized model when the session will be kept (a later start loads it
        # with the optimizations off), else the ONNX tinydl wrote.
        self._model: np.ndarray | None = None
        self._optimized = False
        self._folder = None  # (a partition past protobuf's 2 GB: its ONNX and weights' files)
        try:
            # onnxruntime checks the model itself; onnx's checker would refuse a boundary value
            # whose rank tinydl's inference does not know (PP-OCRv4 rec's output)
            from google.protobuf.message import EncodeError

            proto = to_onnx(graph, check=False)
            try:
                model = proto.SerializeToString()
            except (EncodeError, ValueError):  # past protobuf's 2 GB: weights in a file beside it
                self._start_large(proto)
                return
            if options.extra.get("snapshot"):
                self._start_keeping(model)
            else:
                self._start(model, self.level)
        except UnsupportedOpError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors are plain exceptions
            raise UnsupportedOpError(
                f"onnxruntime cannot run this partition ({len(graph.nodes)} nodes): {exc}"
            ) from exc

    def _start(self, model: bytes | str, level: str, save_to: str | None = None) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel,
            {"none": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC"}.get(
                level, f"ORT_ENABLE_{level.upper()}"
            ),
        )
        so.intra_op_num_threads = self.threads
        so.log_severity_level = 4  # failures come back as exceptions; nothing on stderr
        if save_to is not None:
            so.optimized_model_filepath = save_to
        self.session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    def _start_large(self, proto) -> None:
        """A partition whose ONNX is past protobuf's 2 GB (folded index tensors of MViTv2's
        attention, or a large model's weights): written with its tensors in a file beside it,
        in a temporary folder kept with the kernel, and loaded from there."""
        import tempfile

        import onnx

        self._folder = tempfile.TemporaryDirectory(prefix="tinydl-ort-")
        path = os.path.join(self._folder.name, "partition.onnx")
        onnx.save_model(
            proto, path, save_as_external_data=True, location="partition.data", size_threshold=1024
        )
        self._start(path, self.level)

    def _start_keeping(self, model: bytes) -> None:
        """Start, onnxruntime writing the model it optimized (its own optimizations depend on
        the CPU: the session cache's key names it); a model it cannot write is kept as given."""
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "optimized.onnx")
            try:
                self._start(model, self.level, save_to=path)
                self._model, self._optimized = np.fromfile(path, np.uint8), True
            except Exception:  # noqa: BLE001 - e.g. a model past protobuf's 2 GB: not written
                self._start(model, self.level)
                self._model = np.frombuffer(model, np.uint8)

    # -- kept between processes: the (optimized) model; the InferenceSession made again -------
    snapshot = True

    def __getstate__(self) -> dict:
        if self._model is None:
            raise TypeError("an onnxruntime partition whose ONNX was not kept")
        return {k: v for k, v in self.__dict__.items() if k != "session"}

    def restored(self) -> None:
        # (the model stays, mapped, until snapshot_done drops it)
        self._start(self._model.tobytes(), "none" if self._optimized else self.level)

    def snapshot_done(self, later: bool = False) -> None:
        if not later:  # (`later`: the session is kept again after its first run)
            self._model = None

    def run(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        try:
            outs = self.session.run(self.output_names, {n: inputs[n] for n in self.input_names})
        except Exception as exc:  # noqa: BLE001 - reported as tinydl's error, naming the node
            raise OpError(_failed(str(exc), inputs)) from exc
        return dict(zip(self.output_names, outs, strict=True))


def _failed(message: str, inputs: dict[str, Any]) -> str:
    """onnxruntime's failure as tinydl says it: the node, its op and what it was given."""
    given = ", ".join(f"{n} {a.dtype}{tuple(a.shape)}" for n, a in inputs.items())
    found = re.search(r"running (\S+) node\. Name:'([^']*)' Status Message: (.*)", message, re.S)
    if found is None:
        return f"onnxruntime failed on inputs [{given}]: {message.strip()}"
    op, name, status = found.groups()
    status = status.strip().split(" was false. ")[-1]  # drop the source location and check
    return f"node '{name}' ({op}) failed in onnxruntime (partition inputs [{given}]): {status}"


class OrtBackend(Backend):
    name = "onnxruntime"
    memory = HOST

    def available(self) -> bool:
        return not self.unavailable_reason()

    def unavailable_reason(self) -> str:
        missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
        if missing:
            return f"{', '.join(missing)} not installed: pip install 'tinydl[cpu]'"
        return ""

    def devices(self) -> list[str]:
        if not self.available():
            return []
        import onnxruntime as ort

        return [
            f"onnxruntime {ort.__version__} CPUExecutionProvider ({os.cpu_count()} cores of "
            f"{cpu_model()})"
        ]

    def supports(self, node: Node, graph: Graph) -> Support:
        if node.op.startswith("tinydl."):
            return Support(False, f"{node.op} is tinydl's own op (no ONNX spelling)")
        if schema_of(node.op) is None:
            return Support(False, f"no ONNX op {node.op}")
        if node.op in ("LSTM", "GRU", "RNN") and node.attrs.get("layout"):
            return Support(False, "onnxruntime's CPU provider has no batch-first (layout=1) RNNs")
        if node.op == "BatchNormalization" and node.attrs.get("training_mode"):
            return Support(False, "onnxruntime runs no training-mode BatchNormalization here")
        return Support(True)

    def compile(self, subgraph: Graph, options: CompileOptions) -> Kernel:
        if not self.available():
            raise BackendUnavailableError(self.unavailable_reason())
        return OrtKernel(subgraph, options)

"""onnxruntime: the CPU execution provider, and CUDA when the installed build has it
(onnxruntime-gpu). Reads the model's .onnx file, or the graph exported by `export_onnx`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinydl.bench.harness import Config, Model, Skip, Skipped, Target
from tinydl.bench.peers import installed, missing

# Canonical tinydl ops are the newest ONNX forms (e.g. ReduceMean's axes as an input: opset 18).
EXPORT_OPSET = 18


def export_onnx(graph, path: Path) -> Path:
    """Write an ir.Graph of standard ONNX ops as an .onnx file (weights inline)."""
    import onnx
    from onnx import helper, numpy_helper

    from tinydl.errors import UnsupportedOpError

    private = sorted({n.op for n in graph.nodes if "." in n.op})
    if private:
        raise UnsupportedOpError(f"ops outside the ONNX domain cannot be exported: {private}")

    def attr(value):
        if isinstance(value, np.ndarray):
            return numpy_helper.from_array(value)
        return value

    def info(v):
        dtype = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype or "float32"))
        shape = None if v.shape is None else [d if d is not None else "" for d in v.shape]
        return helper.make_tensor_value_info(v.name, dtype, shape)

    nodes = [
        helper.make_node(
            n.op,
            n.inputs,
            n.outputs,
            name=n.name,
            **{
                k: attr(v)
                for k, v in n.attrs.items()
                if v is not None and not (isinstance(v, list) and not v)
            },
        )
        for n in graph.nodes
    ]
    proto = helper.make_graph(
        nodes,
        graph.name,
        [info(v) for v in graph.inputs],
        [info(v) for v in graph.outputs],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in graph.initializers.items()],
    )
    model = helper.make_model(
        proto, opset_imports=[helper.make_opsetid("", EXPORT_OPSET)], producer_name="tinydl-bench"
    )
    model.ir_version = 8  # readable by every onnxruntime since 1.10
    onnx.save(model, str(path))
    return path


class OrtTarget(Target):
    engine = "onnxruntime"

    def __init__(self, model: Model, config: Config, provider: str):
        super().__init__(
            f"onnxruntime/{'cuda' if provider.startswith('CUDA') else 'cpu'}", model, config
        )
        self.provider = provider
        self.data: bytes | None = None
        if provider.startswith("CUDA"):
            self.gpu_note = "n/a: onnxruntime exposes no device timestamps"

    def device_init(self) -> None:
        import onnxruntime as ort

        self.ort = ort
        if self.provider not in ort.get_available_providers():
            raise Skip(
                f"this onnxruntime build has no {self.provider} (pip install "
                "onnxruntime-gpu on an NVIDIA machine)"
            )
        self.device = f"{self.provider} (onnxruntime {ort.__version__})"

    def load(self) -> None:
        path = self.model.path
        if path.suffix.lower() != ".onnx":
            self.info["model_load"] = "the graph exported to .onnx by tinydl-bench, then read"
            path = export_onnx(self.model.graph, self.model.workdir / f"{path.stem}.onnx")
        self.data = path.read_bytes()

    def compile(self):
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = self.config.cpu_threads
        so.log_severity_level = 3
        provider: str | tuple = self.provider
        if self.provider.startswith("CUDA") and self.config.precision == "fp32":
            provider = (self.provider, {"use_tf32": "0"})  # fp32 convolutions, not TF32
        sess = self.ort.InferenceSession(self.data, so, providers=[provider])
        used = sess.get_providers()[0]
        if used != self.provider:
            raise RuntimeError(f"onnxruntime fell back to {used}")
        return sess

    def run(self, inst, feeds) -> list[np.ndarray]:
        return inst.run(None, feeds)


def targets(model: Model, config: Config) -> list[Target | Skipped]:
    if not installed("onnxruntime"):
        return [missing("onnxruntime", "onnxruntime/cpu", "onnxruntime")]
    return [OrtTarget(model, config, p) for p in ("CPUExecutionProvider", "CUDAExecutionProvider")]

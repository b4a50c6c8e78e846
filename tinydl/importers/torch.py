"""PyTorch importer: `tinydl.from_torch(module, example_inputs)` exports the module to ONNX in
memory with `torch.onnx.export` and reads that with the ONNX importer.

torch is imported only when this is called. The default exporter is TorchScript-based
(`dynamo=False`), which needs nothing beyond torch and onnx; pass `dynamo=True` to use the
torch.export-based exporter (it needs the `onnxscript` package).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

from tinydl.errors import BackendUnavailableError
from tinydl.ir.graph import Graph

OPSET = 17


def from_torch(
    module: Any,
    example_inputs: Any,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    **export_kwargs: Any,
) -> Graph:
    """Convert a `torch.nn.Module` into a validated ir.Graph.

    `example_inputs` is a tensor (or NumPy array) or a tuple of them, as the module's forward
    takes them; their shapes become the graph's input shapes (pass `dynamic_axes`, as
    torch.onnx.export takes it, for symbolic dims). Inputs are named `input` (or `input_0`,
    `input_1`, ...) and outputs `output` (or `output_0`, ...) unless names are given. Other
    keyword arguments go to `torch.onnx.export` (e.g. `opset_version`, `dynamo`).
    """
    try:
        import torch
    except ImportError:
        raise BackendUnavailableError(
            "from_torch needs PyTorch: pip install 'tinydl[torch]'"
        ) from None
    try:
        import onnx  # noqa: F401

        from tinydl.importers import onnx as onnx_importer
    except ImportError:
        raise BackendUnavailableError(
            "from_torch needs the 'onnx' package: pip install 'tinydl[onnx]'"
        ) from None
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    args = tuple(torch.as_tensor(a) if not isinstance(a, torch.Tensor) else a for a in args)
    if input_names is None:
        input_names = ["input"] if len(args) == 1 else [f"input_{i}" for i in range(len(args))]
    options = {"opset_version": OPSET, "dynamo": False, **export_kwargs}
    buffer = io.BytesIO()
    was_training = module.training
    module.train(False)  # eval mode: BatchNorm uses its running statistics
    try:
        if output_names is None:
            with torch.no_grad():
                result = module(*args)
            count = len(result) if isinstance(result, tuple | list) else 1
            output_names = ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
        with warnings.catch_warnings():
            # Choosing the TorchScript exporter is ours to make, not the caller's to be warned of.
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            torch.onnx.export(
                module,
                args,
                buffer,
                input_names=list(input_names),
                output_names=list(output_names),
                **options,
            )
    finally:
        module.train(was_training)
    graph = onnx_importer.from_bytes(buffer.getvalue(), where=f"torch {type(module).__name__}")
    graph.metadata["source_format"] = "torch"
    graph.metadata["producer"] = f"torch {torch.__version__}"
    return graph

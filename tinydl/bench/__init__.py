"""`tinydl bench`: latency, transfer overhead and init cost of a model on tinydl's backends
and on peer runtimes (onnxruntime, PyTorch, ncnn, LiteRT), measured in one run on the same
model and input, each peer's output checked against tinydl's before its time counts.

    from tinydl.bench import Config, run_bench, report
    result = run_bench("model.onnx", backends=["cpu", "webgpu"], peers=["onnxruntime"],
                       input_shapes={"y": (1, 1, 64, 96)}, config=Config(runs=20))
    print(report.text(result))

Modules: harness (what is measured and how), inputs (the default input), engine (tinydl
backends as targets), peers/ (one module per peer runtime, each importing its library lazily),
machine (machine and versions), report (tables, Markdown, JSON, charts).
"""

_LAZY = {
    "SCHEMA": "tinydl.bench.harness",
    "Config": "tinydl.bench.harness",
    "run_bench": "tinydl.bench.harness",
    "report": None,
}


def __getattr__(name: str):
    # Lazy, so the CLI's --help reads tinydl.bench.inputs without loading NumPy.
    if name not in _LAZY:
        raise AttributeError(f"module 'tinydl.bench' has no attribute {name!r}")
    import importlib

    if _LAZY[name] is None:
        return importlib.import_module(f"tinydl.bench.{name}")
    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = ["SCHEMA", "Config", "report", "run_bench"]

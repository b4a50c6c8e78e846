"""Every op case (helpers/cases.py) on each GPU backend vs the op's NumPy reference, fp32 and fp16.

Each case runs on fresh random inputs (seeded by the case id, the same for every backend). fp32
uses the case's tolerances (1e-5 relative in most cases). fp16 wraps the op between Identity
copies, so that the op reads and writes fp16 intermediates (a one-node graph has only fp32 inputs
and outputs), and compares at 1e-2. A case whose node the backend refuses is skipped with the
backend's own reason, so the skips list exactly what falls back to the cpu backend.

Parametrized over the GPU backends (helpers/gpu.py); a backend that is not available skips its
cases with its own reason. webgpu runs on Mesa's lavapipe in CI; cuda needs an NVIDIA GPU and CuPy
(test_cuda_codegen.py still compiles every cuda kernel without a GPU). cuda also runs LARGE.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cases import CASES, F16_ATOL, REFERENCE_CASES, N, i64
from helpers.gpu import GPU_BACKENDS, gpu_backend, require_f16
from helpers.opcheck import backend_case, compare, run_reference, wrap_fp16

from tinydl.backends.base import CompileOptions
from tinydl.ir.graph import Graph

F16 = {"rtol": 1e-2, "atol": 1e-2}


def _case(id, op, attrs=None, consts=(), rtol=1e-5, atol=1e-5, **inputs):
    return pytest.param(op, inputs, attrs or {}, set(consts), rtol, atol, id=id)


# cuda only: shapes past the small ones of the shared cases, for its kernels' other paths: a block
# (not a warp) per mean or softmax row, rows held in registers or read again, several matmul tiles
# and K-slices with ragged edges, transposed operands that load along the other axis.
K3S2 = {"kernel_shape": [3, 3], "strides": [2, 2]}
LARGE = [
    _case("Softmax-row-7000", "Softmax", {"axis": -1}, x=N(4, 7000, scale=3)),
    _case("Softmax-row-1500", "Softmax", {"axis": 1}, x=N(3, 1500, scale=3)),
    _case("Softmax-strided-row-20000", "Softmax", {"axis": 1}, x=N(2, 20000, 3, scale=3)),
    _case("GlobalAveragePool-120x120", "GlobalAveragePool", x=N(1, 8, 120, 120)),
    _case("ReduceMean-block", "ReduceMean", x=N(2, 3, 40, 40), axes=i64(2, 3), consts={"axes"}),
    _case("ReduceMean-outer-axis", "ReduceMean", x=N(1100, 5), axes=i64(0), consts={"axes"}),
    _case("MaxPool-65x67", "MaxPool", K3S2, x=N(2, 4, 65, 67)),
    _case("MatMul-tiles", "MatMul", atol=1e-4, a=N(2, 130, 70), b=N(70, 100)),
    _case("MatMul-tiles-const-a", "MatMul", consts={"a"}, atol=1e-4, a=N(67, 33), b=N(3, 33, 129)),
    _case(
        "Gemm-tiles-transposed",
        "Gemm",
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        {"b", "c"},
        atol=1e-4,
        a=N(70, 130),
        b=N(100, 70),
        c=N(100),
    ),
]


def _per_backend(cases, backends):
    """Each case once per backend, with its id as the seed of its inputs (the case id alone, so
    every backend gets the inputs the case had when each backend had a file of its own)."""
    return [
        pytest.param(name, c.id, *c.values, id=f"{name}-{c.id}", marks=c.marks)
        for name in backends
        for c in cases
    ]


ARGS = ("name", "case_id", "op", "inputs", "attrs", "consts", "rtol", "atol")
PARAMS = _per_backend(CASES + REFERENCE_CASES, GPU_BACKENDS) + _per_backend(LARGE, ("cuda",))


def _run(backend, graph: Graph, feeds, precision: str) -> list[np.ndarray]:
    kernel = backend.compile(graph, CompileOptions(precision=precision))
    tensors = {k: backend.to_device(v) for k, v in feeds.items()}
    names = [v.name for v in graph.outputs]
    out = kernel.run_host(tensors, set(names))
    return [out[n] for n in names]


@pytest.mark.parametrize(ARGS, PARAMS)
def test_op_fp32(name, case_id, op, inputs, attrs, consts, rtol, atol):
    backend = gpu_backend(name)
    model, graph, feeds = backend_case(backend, op, inputs, attrs, consts, case_id)
    want = run_reference(model, feeds)
    for i, (g, w) in enumerate(zip(_run(backend, graph, feeds, "fp32"), want, strict=True)):
        compare(g, w, rtol, atol, f"output {i}", against="the reference")


@pytest.mark.parametrize(ARGS, PARAMS)
def test_op_fp16(name, case_id, op, inputs, attrs, consts, rtol, atol):
    backend = gpu_backend(name)
    require_f16(name)
    model, graph, feeds = backend_case(backend, op, inputs, attrs, consts, case_id)
    want = run_reference(model, feeds)
    got = _run(backend, wrap_fp16(graph), feeds, "fp16")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        # A float input rounded to fp16 may cross an integer, so a cast to int may move by 1.
        int_atol = 1 if not np.issubdtype(w.dtype, np.floating) else 0
        compare(
            g,
            w,
            max(rtol, F16["rtol"]),
            max(atol, F16_ATOL.get(case_id, F16["atol"]), int_atol),
            f"output {i} (fp16)",
            against="the reference",
        )


@pytest.mark.parametrize("name", GPU_BACKENDS)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_layer_normalization_mean_and_inv_std_dev(name, precision):
    """The optional Mean and InvStdDev outputs (not requested by the shared cases), on a row
    longer than a workgroup."""
    from helpers.opcheck import node_model

    from tinydl.importers.onnx import from_model

    backend = gpu_backend(name)
    rng = np.random.default_rng(11)
    x, s, b = N(3, 2, 700).draw(rng), N(2, 700).draw(rng), N(2, 700).draw(rng)
    model, feeds = node_model(
        "LayerNormalization", {"x": x, "s": s, "b": b}, {"axis": 1}, {"s", "b"}, outputs=3
    )
    graph = from_model(model)
    assert backend.supports(graph.nodes[0], graph)
    if precision == "fp16":
        require_f16(name)
        graph = wrap_fp16(graph)
    want = run_reference(model, feeds)
    tol = 1e-4 if precision == "fp32" else F16["atol"]
    for i, (g, w) in enumerate(zip(_run(backend, graph, feeds, precision), want, strict=True)):
        compare(g, w, tol, tol, f"output {i}", against="the reference")

"""What every GPU backend must do alike, parametrized over them (helpers/gpu.py): PP-OCRv4 det vs
onnxruntime in fp32 and fp16, a plan per input shape, and per-shape tables that match the cpu
backend. Backend-specific behaviour (fusion, device tensors, submissions, CUDA graphs, adapters)
is tested in test_webgpu.py and test_cuda.py.

A backend that is not available skips with its own reason: webgpu runs on Mesa's lavapipe in CI,
cuda needs an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.gpu import GPU_BACKENDS, gpu_backend, require_f16
from helpers.models import espcn, kernel_of, rel_err, shape_tables_graph

import tinydl as td


@pytest.fixture(params=GPU_BACKENDS)
def backend(request) -> str:
    """The name of a GPU backend that is available here (the test skips otherwise)."""
    gpu_backend(request.param)
    return request.param


# -- real models ---------------------------------------------------------------------------------


def test_ppocrv4_det_matches_onnxruntime(backend, ppocr_det):
    """PP-OCRv4 det wholly on the backend (no fallback) within 1e-4 of onnxruntime."""
    path, x, ref = ppocr_det
    sess = td.compile(td.load(path), backends=(backend,), strict=True)
    (prob,) = sess.run({"x": x}).values()
    assert prob.shape == ref.shape == (1, 1, 192, 384)
    assert rel_err(prob, ref) <= 1e-4
    assert set(sess.placement.nodes.values()) == {backend}


def test_ppocrv4_det_fp16_against_fp32(backend, ppocr_det):
    """fp16 storage (fp32 accumulation): the text mask is what fp32 finds."""
    require_f16(backend)
    path, x, ref = ppocr_det
    sess = td.compile(td.load(path), backends=(backend,), precision="fp16", strict=True)
    (prob,) = sess.run({"x": x}).values()
    assert np.abs(prob - ref).max() < 0.15
    assert ((prob > 0.3) == (ref > 0.3)).mean() > 0.995


# -- symbolic shapes -----------------------------------------------------------------------------


def test_symbolic_shapes_make_a_plan_per_shape(backend, tmp_path, rng):
    sess = td.compile(espcn(tmp_path, rng, scale=2), backends=(backend,), strict=True)
    for h, w in ((8, 12), (10, 7), (8, 12)):
        y = rng.random((1, 1, h, w), dtype=np.float32)
        assert sess.run({"y": y})["out"].shape == (1, 1, 2 * h, 2 * w)
    assert len(kernel_of(sess, backend).plans) == 2


def test_each_input_shape_gets_its_own_tables(backend, rng):
    """Resize taps and gather offsets depend on the input shape: a session fed several shapes
    (a plan each, one shape again) matches the cpu backend at every one, in any order."""
    graph = shape_tables_graph()
    cpu = td.compile(graph, backends=("cpu",))
    dev = td.compile(graph, backends=(backend,), strict=True)
    for h, w in ((5, 7), (9, 4), (6, 6), (5, 7)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(
            dev.run({"x": x})["y"], cpu.run({"x": x})["y"], rtol=1e-5, atol=1e-5
        )

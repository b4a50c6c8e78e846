import os
from pathlib import Path

import numpy as np
import pytest

# Compiled sessions and imported models are not kept between tests (tests/test_snapshot.py
# turns the caches on where it checks them): a test that changes a module's constant must not
# be handed a session another test compiled.
os.environ.setdefault("TINYDL_SESSION_CACHE", "off")
os.environ.setdefault("TINYDL_MODEL_CACHE", "off")


def pytest_report_header(config):
    return f"tinydl backend under test: {os.environ.get('TINYDL_BACKEND', 'cpu')}"


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: fresh random data per test, reproducible."""
    seed = (
        abs(hash(request.node.nodeid)) % (2**32)
        if os.environ.get("TINYDL_RANDOM_SEED")
        else (sum(map(ord, request.node.nodeid)) * 7919 % (2**32))
    )
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def rapidocr_models() -> Path:
    """The PP-OCR ONNX models shipped inside the rapidocr-onnxruntime package."""
    rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="pip install 'tinydl[test]'")
    return Path(rapidocr.__file__).parent / "models"


@pytest.fixture(scope="session")
def ppocr_det(rapidocr_models):
    """PP-OCRv4 det, a real page at 384x192, and onnxruntime's probability map for it."""
    import onnxruntime as ort
    from helpers.models import ocr_input, page_image

    path = rapidocr_models / "ch_PP-OCRv4_det_infer.onnx"
    x = ocr_input(page_image(), 384, 192)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return path, x, ref[0]

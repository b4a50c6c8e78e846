"""tools/zoo.py's reference: onnxruntime, or PyTorch's outputs saved at export where onnxruntime
cannot run the file (the table says which)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from helpers.models import espcn_onnx

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def zoo():
    spec = importlib.util.spec_from_file_location("zoo_tool", ROOT / "tools" / "zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def exported(tmp_path, rng):
    """An exported-looking zoo entry "tiny": the .onnx, its feeds, and onnxruntime's outputs
    (standing in for PyTorch's, which the export saves)."""
    import onnxruntime as ort

    espcn_onnx(tmp_path / "tiny.onnx", 2, rng)
    feeds = {"y": rng.random((1, 1, 12, 16), dtype=np.float32)}
    np.savez(tmp_path / "tiny.npz", **feeds)
    sess = ort.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"])
    return tmp_path, sess.run(None, feeds)


def _refuse(monkeypatch):
    import onnxruntime as ort

    def refused(*args, **kwargs):
        raise RuntimeError("this file's If branch declares the wrong shape")

    monkeypatch.setattr(ort, "InferenceSession", refused)


def test_onnxruntime_is_the_reference_where_it_runs(zoo, exported):
    onnx_dir, _ = exported
    rows = zoo.run_model("tiny", onnx_dir, ["numpy"], ["fp32"])
    assert rows[0]["backend"] == "onnxruntime" and rows[0]["placement"] == "reference"
    assert rows[1]["relerr"] < 1e-5, rows[1]


def test_pytorch_outputs_are_the_reference_where_onnxruntime_fails(zoo, exported, monkeypatch):
    onnx_dir, outs = exported
    _refuse(monkeypatch)
    np.savez(onnx_dir / "tiny-torch.npz", **{f"o{i}": o for i, o in enumerate(outs)})
    rows = zoo.run_model("tiny", onnx_dir, ["numpy"], ["fp32"])
    assert "wrong shape" in rows[0]["error"] and "PyTorch" in rows[0]["error"]
    assert rows[1]["backend"] == "numpy" and rows[1]["relerr"] < 1e-5, rows[1]
    assert "PyTorch" in zoo.markdown(rows)
    # (a reference that differs shows: the rows are judged against it)
    np.savez(onnx_dir / "tiny-torch.npz", **{f"o{i}": 1.5 * o for i, o in enumerate(outs)})
    rows = zoo.run_model("tiny", onnx_dir, ["numpy"], ["fp32"])
    assert rows[1]["relerr"] > 0.1, rows[1]


def test_no_reference_at_all_is_one_error_row(zoo, exported, monkeypatch):
    onnx_dir, _ = exported
    _refuse(monkeypatch)
    rows = zoo.run_model("tiny", onnx_dir, ["numpy"], ["fp32"])
    assert len(rows) == 1 and "export it again" in rows[0]["error"], rows


class _Tensor:
    """What _flat asks of a torch tensor: detach().cpu().numpy()."""

    def __init__(self, value):
        self.value = np.asarray(value, np.float32)

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.value


def test_outputs_flatten_in_the_export_order(zoo):
    """Tuples and lists in order, dicts by their values (a detector's list of dicts of boxes,
    scores and labels), nested ones flattened."""
    a, b, c = _Tensor([0.0]), _Tensor([1.0, 1.0]), _Tensor([2.0, 2.0, 2.0])
    flat = zoo._flat([{"boxes": a, "scores": b}, (c,)])
    assert [x.tolist() for x in flat] == [[0.0], [1.0, 1.0], [2.0, 2.0, 2.0]]

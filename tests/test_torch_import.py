"""PyTorch importer: td.from_torch exports through ONNX; results match PyTorch's own."""

import os
import sys

import numpy as np
import pytest

import tinydl as td

torch = pytest.importorskip("torch", reason="pip install 'tinydl[test]'")
pytest.importorskip("onnx", reason="pip install 'tinydl[onnx]'")

BACKEND = os.environ.get("TINYDL_BACKEND", "numpy")


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


class ESPCN(torch.nn.Module):
    """ESPCN (Shi et al. 2016): 5x5->64 tanh, 3x3->32 tanh, 3x3->r^2, pixel shuffle."""

    def __init__(self, scale: int):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 64, 5, padding=2)
        self.c2 = torch.nn.Conv2d(64, 32, 3, padding=1)
        self.c3 = torch.nn.Conv2d(32, scale * scale, 3, padding=1)
        self.shuffle = torch.nn.PixelShuffle(scale)

    def forward(self, x):
        return self.shuffle(self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x))))))


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, stride=2),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU6(),
            torch.nn.AvgPool2d(2),
        )
        self.head = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(32 * 3 * 3, 24),
            torch.nn.Hardswish(),
            torch.nn.Dropout(0.5),
            torch.nn.Linear(24, 10),
        )

    def forward(self, x):
        return torch.softmax(self.head(self.features(x)), dim=1)


def randomize_statistics(module: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(0)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 1.5 + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=g))
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.5)


def compare(module, *xs, limit=1e-5, **kwargs):
    graph = td.from_torch(module, tuple(torch.from_numpy(x) for x in xs), **kwargs)
    with torch.no_grad():
        ref = module.eval()(*[torch.from_numpy(x) for x in xs])
    refs = ref if isinstance(ref, tuple) else (ref,)
    feeds = {v.name: x for v, x in zip(graph.inputs, xs, strict=True)}
    got = td.compile(graph, backends=(BACKEND,)).run(feeds)
    for (name, g), r in zip(got.items(), refs, strict=True):
        err = rel_err(g, r.numpy())
        assert g.shape == tuple(r.shape), name
        assert err <= limit, f"{name}: relative error {err:.2e}"
    return graph


@pytest.mark.parametrize("scale", [2, 3])
def test_espcn_matches_torch(rng, scale):
    torch.manual_seed(scale)
    graph = compare(ESPCN(scale), rng.random((1, 1, 36, 64), dtype=np.float32))
    assert graph.op_counts() == {"Conv": 3, "Tanh": 2, "DepthToSpace": 1}
    assert [v.name for v in graph.inputs] == ["input"]
    assert graph.metadata["source_format"] == "torch"


def test_small_cnn_with_batch_norm_matches_torch(rng):
    torch.manual_seed(0)
    model = SmallCNN()
    randomize_statistics(model)
    x = rng.random((2, 3, 28, 28), dtype=np.float32)
    model.train()  # from_torch exports in eval mode and gives the module back as it was
    td.from_torch(model, torch.from_numpy(x))
    assert model.training
    compare(model, x)


def test_names_and_dynamic_axes_pass_through(rng):
    class TwoWay(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a * b

    x, y = (rng.random((2, 3), dtype=np.float32) for _ in range(2))
    graph = compare(TwoWay(), x, y)
    assert [v.name for v in graph.inputs] == ["input_0", "input_1"]
    assert [v.name for v in graph.outputs] == ["output_0", "output_1"]
    graph = td.from_torch(
        ESPCN(2),
        torch.rand(1, 1, 8, 8),
        input_names=["lr"],
        output_names=["hr"],
        dynamic_axes={"lr": {0: "N", 2: "H", 3: "W"}},
    )
    assert graph.inputs[0].name == "lr" and graph.inputs[0].shape == ("N", 1, "H", "W")
    out = td.compile(graph, backends=("numpy",)).run(
        {"lr": rng.random((2, 1, 5, 7), dtype=np.float32)}
    )
    assert out["hr"].shape == (2, 1, 10, 14)


def test_missing_torch_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(td.BackendUnavailableError, match=r"tinydl\[torch\]"):
        td.from_torch(object(), ())

"""Keras importer: .h5 files saved by Keras 3 (torch backend) and written in the Keras 2 layout,
checked against Keras's own predictions."""

import json
import os
import sys

import numpy as np
import pytest

import tinydl as td

os.environ.setdefault("KERAS_BACKEND", "torch")  # TensorFlow is not installed here
h5py = pytest.importorskip("h5py", reason="pip install 'tinydl[keras]'")
keras = pytest.importorskip("keras", reason="pip install 'tinydl[test]'")
L = keras.layers
ops = keras.ops

BACKEND = os.environ.get("TINYDL_BACKEND", "numpy")
# Keras's torch backend trips a NumPy 2 deprecation on every predict; it is theirs, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


@keras.saving.register_keras_serializable(package="tinydl_tests")
class DepthToSpace(L.Layer):
    """tf.nn.depth_to_space (DCR order) in keras.ops, so it runs on any Keras backend."""

    def __init__(self, block_size, **kwargs):
        super().__init__(**kwargs)
        self.block_size = block_size

    def call(self, x):
        b = self.block_size
        _, h, w, c = ops.shape(x)
        x = ops.reshape(x, (-1, h, w, b, b, c // (b * b)))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, h * b, w * b, c // (b * b)))

    def compute_output_shape(self, shape):
        b = self.block_size
        grow = [None if d is None else d * b for d in shape[1:3]]
        return (shape[0], *grow, shape[3] // (b * b))

    def get_config(self):
        return {**super().get_config(), "block_size": self.block_size}


def randomize_statistics(model, rng):
    """BatchNormalization starts as the identity; give it real statistics."""
    for w in model.weights:
        if "moving_variance" in w.path:
            w.assign(rng.uniform(0.5, 2, w.shape).astype("float32"))
        elif any(k in w.path for k in ("moving_mean", "gamma", "beta")):
            w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))


def compare(model, x, tmp_path, limit=1e-5):
    path = tmp_path / f"{model.name}.h5"
    model.save(path)
    ref = model.predict(x, verbose=0)
    refs = ref if isinstance(ref, list) else [ref]
    graph = td.load(path)
    got = td.compile(graph, backends=(BACKEND,)).run({graph.inputs[0].name: x})
    assert len(got) == len(refs)
    for (name, g), r in zip(got.items(), refs, strict=True):
        r = np.asarray(r)
        assert g.shape == r.shape, (name, g.shape, r.shape)
        err = rel_err(g, r)
        assert err <= limit, f"{name}: relative error {err:.2e}"
    return graph


def espcn(scale: int, shape=(None, None, 1)):
    """ESPCN (Shi et al. 2016): 5x5->64 tanh, 3x3->32 tanh, 3x3->r^2, depth_to_space."""
    x = inp = keras.Input(shape, name="y")
    x = L.Conv2D(64, 5, padding="same", activation="tanh")(x)
    x = L.Conv2D(32, 3, padding="same", activation="tanh")(x)
    x = L.Conv2D(scale * scale, 3, padding="same")(x)
    return keras.Model(inp, DepthToSpace(scale, name="depth_to_space")(x), name=f"espcn{scale}")


@pytest.mark.parametrize("scale", [2, 3])
def test_espcn_matches_keras(tmp_path, rng, scale):
    x = rng.random((1, 36, 64, 1), dtype=np.float32)
    graph = compare(espcn(scale), x, tmp_path)
    assert graph.metadata["input_layout"] == "NHWC"
    assert graph.inputs[0].shape == ("N", None, None, 1)
    assert graph.op_counts()["DepthToSpace"] == 1


def small_cnn():
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            L.Conv2D(16, 3, padding="same", use_bias=False),
            L.BatchNormalization(),
            L.ReLU(),
            L.MaxPooling2D(),
            L.Conv2D(32, 3, strides=2, padding="valid"),
            L.BatchNormalization(),
            L.Activation("relu"),
            L.AveragePooling2D(2),
            L.Flatten(),
            L.Dense(24, activation="relu"),
            L.Dropout(0.5),
            L.Dense(10, activation="softmax"),
        ],
        name="small_cnn",
    )


def test_small_cnn_matches_keras(tmp_path, rng):
    model = small_cnn()
    randomize_statistics(model, rng)
    graph = compare(model, rng.random((2, 32, 32, 3), dtype=np.float32), tmp_path)
    # One Transpose after the input, one before Flatten (it flattens in NHWC order).
    assert graph.op_counts()["Transpose"] == 2


def test_layer_zoo_matches_keras(tmp_path, rng):
    inp = keras.Input((12, 10, 4), name="image")
    a = L.SeparableConv2D(6, 3, padding="same", depth_multiplier=2)(inp)
    a = L.BatchNormalization()(a)
    a = L.PReLU(shared_axes=[1, 2])(a)
    b = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, activation="relu6")(inp)
    b = L.Conv2D(6, 1, activation="hard_sigmoid")(b)
    c = L.Add()([a, b])
    c = L.LeakyReLU(negative_slope=0.1)(c)
    d = L.Subtract()([a, b])
    e = L.Multiply()([c, L.Activation("sigmoid")(d)])
    e = L.Average()([e, c, d])
    e = L.ReLU(max_value=2.0)(e)
    up = L.UpSampling2D(2, interpolation="bilinear")(e)  # 24x20
    up = L.ZeroPadding2D(((1, 0), (2, 1)))(up)  # 25x23
    up = L.AveragePooling2D(3, strides=2, padding="same")(up)  # 13x12
    up = L.MaxPooling2D(2)(L.Cropping2D(((1, 0), (0, 1)))(up))  # 6x5
    near = L.UpSampling2D((1, 2))(L.Cropping2D(((0, 1), (1, 2)))(e))  # 11x14
    near = L.MaxPooling2D(2, padding="same")(near)  # 6x7
    near = L.Rescaling(0.5, offset=-0.1)(L.Cropping2D(((0, 0), (1, 1)))(near))  # 6x5
    cat = L.Concatenate()([up, near])
    cat = L.Activation("hard_swish")(cat)
    g = L.GlobalAveragePooling2D(keepdims=False)(cat)
    g = L.Dense(8, activation="tanh")(g)
    g = L.Reshape((2, 4))(g)
    g = L.Permute((2, 1))(g)
    g = L.Softmax(axis=1, name="probs")(g)
    p = L.Permute((3, 1, 2))(cat)
    p = L.Conv2D(5, 3, padding="same", data_format="channels_first", activation="silu")(p)
    p = L.BatchNormalization(axis=1)(p)
    p = L.Flatten(name="features")(p)
    model = keras.Model(inp, [g, p], name="zoo")
    randomize_statistics(model, rng)
    graph = compare(model, rng.random((2, 12, 10, 4), dtype=np.float32), tmp_path)
    assert [v.name for v in graph.outputs] == ["probs", "features"]


def test_channels_first_model_matches_keras(tmp_path, rng):
    model = keras.Sequential(
        [
            keras.Input((3, 16, 16)),
            L.Conv2D(8, 3, padding="same", data_format="channels_first"),
            L.BatchNormalization(axis=1),
            L.ReLU(),
            L.MaxPooling2D(data_format="channels_first"),
            L.UpSampling2D(2, data_format="channels_first"),
            L.ZeroPadding2D(1, data_format="channels_first"),
            L.GlobalAveragePooling2D(data_format="channels_first"),
        ],
        name="channels_first",
    )
    randomize_statistics(model, rng)
    graph = compare(model, rng.random((2, 3, 16, 16), dtype=np.float32), tmp_path)
    assert "Transpose" not in graph.op_counts()


# -- the Keras 2 (tf.keras) layout, written by hand ------------------------------------------------


def keras2_espcn_file(path, model, scale):
    """The same ESPCN as tf.keras 2 saves it: nested inbound nodes, ':0' weight names, and
    tf.nn.depth_to_space recorded as a TFOpLambda layer."""
    layers = [
        {
            "class_name": "InputLayer",
            "name": "y",
            "inbound_nodes": [],
            "config": {
                "batch_input_shape": [None, None, None, 1],
                "dtype": "float32",
                "name": "y",
                "sparse": False,
                "ragged": False,
            },
        }
    ]
    previous = "y"
    convs = [lyr for lyr in model.layers if isinstance(lyr, L.Conv2D)]
    for lyr in convs:
        cfg = {
            k: lyr.get_config()[k]
            for k in (
                "name",
                "filters",
                "kernel_size",
                "strides",
                "padding",
                "data_format",
                "dilation_rate",
                "groups",
                "activation",
                "use_bias",
            )
        }
        layers.append(
            {
                "class_name": "Conv2D",
                "name": lyr.name,
                "config": cfg,
                "inbound_nodes": [[[previous, 0, 0, {}]]],
            }
        )
        previous = lyr.name
    layers.append(
        {
            "class_name": "TFOpLambda",
            "name": "tf.nn.depth_to_space",
            "config": {
                "name": "tf.nn.depth_to_space",
                "trainable": True,
                "dtype": "float32",
                "function": "nn.depth_to_space",
            },
            "inbound_nodes": [[previous, 0, 0, {"block_size": scale, "name": None}]],
        }
    )
    config = {
        "class_name": "Functional",
        "config": {
            "name": "espcn",
            "layers": layers,
            "input_layers": [["y", 0, 0]],
            "output_layers": [["tf.nn.depth_to_space", 0, 0]],
        },
    }
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = b"2.13.1"
        f.attrs["backend"] = b"tensorflow"
        f.attrs["model_config"] = json.dumps(config).encode()
        root = f.create_group("model_weights")
        names = ["y", *[lyr.name for lyr in convs], "tf.nn.depth_to_space"]
        root.attrs["layer_names"] = np.array([n.encode() for n in names])
        for name in names:
            group = root.create_group(name)
            lyr = next((c for c in convs if c.name == name), None)
            weights = [] if lyr is None else [("kernel:0", lyr.kernel), ("bias:0", lyr.bias)]
            group.attrs["weight_names"] = np.array([f"{name}/{w}".encode() for w, _ in weights])
            for w, value in weights:
                group.create_dataset(f"{name}/{w}", data=np.asarray(value))


def test_keras2_layout_with_tf_op_lambda_depth_to_space(tmp_path, rng):
    model = espcn(3)
    keras2_espcn_file(tmp_path / "k2.h5", model, 3)
    x = rng.random((1, 20, 30, 1), dtype=np.float32)
    graph = td.load(tmp_path / "k2.h5")
    got = td.compile(graph, backends=(BACKEND,)).run({"y": x})
    ref = model.predict(x, verbose=0)
    assert got["tf.nn.depth_to_space"].shape == (1, 60, 90, 1)
    assert rel_err(got["tf.nn.depth_to_space"], ref) <= 1e-5


# -- refusals ------------------------------------------------------------------------------------


def test_lambda_layers_are_refused_without_running_them(tmp_path):
    inp = keras.Input((4, 4, 1))
    model = keras.Model(inp, L.Lambda(lambda t: t * 2)(inp))
    model.save(tmp_path / "lambda.h5")
    with pytest.raises(td.UnsupportedOpError, match="Lambda"):
        td.load(tmp_path / "lambda.h5")


def test_weights_only_and_linked_files_are_refused(tmp_path):
    model = small_cnn()
    model.save_weights(tmp_path / "only.weights.h5")
    with pytest.raises(td.InvalidModelError, match="model_config"):
        td.load(tmp_path / "only.weights.h5")
    model.save(tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "a") as f:
        group = f["model_weights"][model.layers[-1].name]
        name = group.attrs["weight_names"][0]
        name = name.decode() if isinstance(name, bytes) else name
        del group[name]
        group[name] = h5py.ExternalLink(str(tmp_path / "only.weights.h5"), "/x")
    with pytest.raises(td.InvalidModelError, match="link"):
        td.load(tmp_path / "m.h5")


def test_missing_h5py_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "m.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(td.BackendUnavailableError, match=r"tinydl\[keras\]"):
        td.load(tmp_path / "m.h5")

"""The `tinydl` command: every subcommand in-process through `main`, plus one real `--help` run."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import tinydl as td
from tinydl.cli import main
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

onnx = pytest.importorskip("onnx")


def conv_model(path, channels=3, batch=1, seed=0):
    """Conv(channels -> 4, 3x3, pads 1) + Relu on [batch, channels, 8, 8], opset 17."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, channels, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node(
                "Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, name="conv"
            ),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "tiny_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tinydl-tests"
    )
    model.ir_version = 8  # onnxruntime rejects the newest IR versions
    onnx.save(model, str(path))
    return path


@pytest.fixture
def model(tmp_path):
    return conv_model(tmp_path / "conv.onnx")


def reference_run(model_path, x):
    return td.compile(td.load(model_path), backends=("numpy",)).run({"x": x})["y"]


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- help --------------------------------------------------------------------------------------


def test_help_runs_without_importing_numpy():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tinydl", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for command in ("info", "convert", "inspect", "run"):
        assert command in proc.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert not [m for m in imported if m.split(".")[0] in ("numpy", "onnx", "PIL")]


@pytest.mark.parametrize("command", ["info", "convert", "inspect", "run"])
def test_subcommand_help_has_an_example(capsys, command):
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0
    assert f"tinydl {command}" in out and "example" in out


def test_no_command_prints_help_and_fails(capsys):
    code, _, err = run_cli(capsys)
    assert code == 2
    assert "usage: tinydl" in err


# -- info --------------------------------------------------------------------------------------


def test_info_text(capsys):
    code, out, _ = run_cli(capsys, "info")
    assert code == 0
    assert f"tinydl {td.__version__}" in out
    assert f"NumPy  {np.__version__}" in out
    # The numpy backend's row says "available" and names its device; "unavailable" cannot match.
    assert re.search(r"^\s*numpy\s+available\s+\S", out, re.M), out


def test_info_json(capsys):
    code, out, _ = run_cli(capsys, "info", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["tinydl"] == td.__version__
    assert report["numpy"] == np.__version__
    assert report["backends"]["numpy"]["available"] is True
    assert report["backends"]["numpy"]["devices"]


def test_info_reports_the_cache(capsys, tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    (folder / "sessions").mkdir(parents=True)
    (folder / "sessions" / "a.snap").write_bytes(b"x" * 3000)
    (folder / "cuda").mkdir()
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(folder))
    monkeypatch.setenv("TINYDL_SESSION_CACHE", "off")
    monkeypatch.setenv("TINYDL_MODEL_CACHE", "on")
    code, out, _ = run_cli(capsys, "info", "--json")
    assert code == 0
    cache = json.loads(out)["cache"]
    assert cache["folder"] == str(folder)
    assert cache["folders"] == {
        "cuda": {"files": 0, "bytes": 0},
        "sessions": {"files": 1, "bytes": 3000},
    }
    assert (cache["models"], cache["sessions"]) == ("on", "off")
    code, out, _ = run_cli(capsys, "info")
    assert "sessions 1 files" in out and "compiled sessions kept: off" in out


def many_ops_model(path):
    """A chain of 14 elementwise ops of long names: a partition whose op list needs wrapping."""
    ops = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Softplus", "HardSwish", "Softsign"]
    ops += ["Ceil", "Floor", "Round", "Reciprocal", "HardSigmoid"]
    nodes, x = [], "x"
    for k, op in enumerate(ops):
        nodes.append(Node(op, [x], [f"v{k}"], name=f"n{k}_{op.lower()}"))
        x = f"v{k}"
    graph = validate(
        Graph([Value("x", "float32", (2, 3))], [Value(x, "float32", (2, 3))], nodes, name="many")
    )
    td.save(graph, path)
    return ops


@pytest.mark.parametrize("command", ["info", "inspect"])
def test_tables_wrap_between_words(capsys, tmp_path, monkeypatch, command):
    """At 60 columns every line fits, and every op name and reason word comes out whole."""
    ops = many_ops_model(tmp_path / "many.tdl")
    monkeypatch.setenv("COLUMNS", "60")
    argv = [command] if command == "info" else [command, tmp_path / "many.tdl", "-v"]
    argv += [] if command == "info" else ["--backends", "webgpu,numpy"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 60, out
    assert "…" not in out
    words = set(out.split())
    if command == "inspect":
        for op in ops:
            assert op in words or f"{op}," in words, (op, out)
        for k, op in enumerate(ops):
            assert f"n{k}_{op.lower()}" in words, out
    else:
        from tinydl.backends import list_backends

        for info in list_backends():
            text = " ".join([*info.devices, info.reason])
            for word in text.split():
                assert word in words, (word, out)


# -- convert -----------------------------------------------------------------------------------


def test_convert_to_tdl_keeps_outputs(capsys, tmp_path, model, rng):
    out_path = tmp_path / "conv.tdl"
    code, out, err = run_cli(capsys, "convert", model, "-o", out_path)
    assert code == 0, err
    assert "2 nodes" in out and "112 parameters" in out
    assert f"{out_path.stat().st_size:,} bytes" in out
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    converted = td.compile(td.load(out_path), backends=("numpy",)).run({"x": x})["y"]
    np.testing.assert_allclose(converted, reference_run(model, x), rtol=1e-6)


def test_convert_json_to_file_and_stdout(capsys, tmp_path, model):
    out_path = tmp_path / "conv.json"
    code, _, err = run_cli(capsys, "convert", model, "--json", "-o", out_path)
    assert code == 0, err
    doc = json.loads(out_path.read_text())
    assert [n["op"] for n in doc["nodes"]] == ["Conv", "Relu"]

    code, out, err = run_cli(capsys, "convert", model, "--json", "-o", "-")
    assert code == 0
    assert json.loads(out) == doc
    assert "2 nodes" in err  # the summary stays off stdout


def test_convert_tdl_to_stdout_is_refused(capsys, model):
    code, out, err = run_cli(capsys, "convert", model, "-o", "-")
    assert code == 2 and out == ""
    assert err.startswith("error:") and "--json" in err


# -- inspect -----------------------------------------------------------------------------------


def test_inspect_text(capsys, model):
    code, out, err = run_cli(capsys, "inspect", model, "--backends", "numpy")
    assert code == 0, err
    assert "onnx, opset 17, producer tinydl-tests" in out
    assert re.search(r"^input\s+x\s+float32\[1,3,8,8\]", out, re.M), out
    assert re.search(r"^output\s+y\s+float32\[1,4,8,8\]", out, re.M), out
    assert re.search(r"^Conv\s+1\s*$", out, re.M) and re.search(r"^Relu\s+1\s*$", out, re.M)
    assert "parameters: 112 (448 bytes)" in out
    # Conv + Relu become one tinydl.FusedConv.
    assert "optimized (all): 2 -> 1 nodes (rewrites: conv_activation_fusion 1)" in out
    assert "placement (numpy): numpy 1 nodes in 1 partition(s)" in out
    assert re.search(r"^0\s+numpy\s+1\s+tinydl\.FusedConv 1\s*$", out, re.M), out
    assert "moved per run: 0 bytes in 0 transfer(s)" in out
    assert "refused by" not in out  # the per-node table only with --verbose


def test_inspect_verbose_lists_every_node(capsys, model):
    argv = ("inspect", model, "--backends", "numpy", "--optimize", "none", "--verbose")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert "optimized (none): 2 -> 2 nodes" in out
    table = out[out.index("refused by") :]
    assert "conv" in table and "relu" in table


def test_inspect_json(capsys, model):
    code, out, _ = run_cli(capsys, "inspect", model, "--json", "--backends", "numpy")
    assert code == 0
    report = json.loads(out)
    assert report["source_format"] == "onnx" and report["opset"] == 17
    assert report["inputs"] == [
        {"name": "x", "dtype": "float32", "shape": [1, 3, 8, 8], "type": "float32[1,3,8,8]"}
    ]
    assert report["op_counts"] == {"Conv": 1, "Relu": 1}
    assert report["parameters"] == 112 and report["weight_bytes"] == 448
    assert report["optimization"]["nodes_before"] == 2
    assert report["optimization"]["nodes_after"] == 1
    assert report["placement"]["counts"] == {"numpy": 1}
    assert report["placement"]["fallbacks"] == {}
    assert report["placement"]["transfers"] == [] and report["placement"]["bytes_per_run"] == 0


# -- run ---------------------------------------------------------------------------------------


def test_run_npy_input_saves_outputs(capsys, tmp_path, model, rng):
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys, "run", model, "--input", f"x={tmp_path / 'x.npy'}", "--out-dir", out_dir
    )
    assert code == 0, err
    expected = reference_run(model, x)
    np.testing.assert_allclose(np.load(out_dir / "y.npy"), expected, rtol=1e-5, atol=1e-6)
    row = next(line for line in out.splitlines() if line.startswith("y "))
    assert row.split()[1:3] == ["float32", "[1,4,8,8]"]
    assert float(row.split()[4]) == pytest.approx(expected.max(), rel=1e-5)


@pytest.mark.parametrize("channels,size", [(3, (8, 8)), (3, (13, 10)), (1, (8, 8))])
def test_run_image_input(capsys, tmp_path, rng, channels, size):
    from PIL import Image

    model = conv_model(tmp_path / "conv.onnx", channels=channels)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    code, _, err = run_cli(
        capsys, "run", model, "--input", tmp_path / "in.png", "--out-dir", tmp_path
    )
    assert code == 0, err
    image = Image.open(tmp_path / "in.png").convert("RGB" if channels == 3 else "L")
    image = image.resize((8, 8), Image.Resampling.BILINEAR) if size != (8, 8) else image
    x = np.asarray(image, np.float32).reshape(8, 8, channels).transpose(2, 0, 1)[None] / 255
    np.testing.assert_allclose(
        np.load(tmp_path / "y.npy"), reference_run(model, x), rtol=1e-5, atol=1e-6
    )


def test_run_without_inputs_uses_seeded_random_data(capsys, model):
    code, out, err = run_cli(capsys, "run", model, "--seed", 7)
    assert code == 0
    assert "random inputs (seed 7): x float32[1,3,8,8]" in err
    assert run_cli(capsys, "run", model, "--seed", 7)[1] == out


def test_run_symbolic_shape_needs_an_input_or_shape(capsys, tmp_path):
    model = conv_model(tmp_path / "conv.onnx", batch="N")
    code, _, err = run_cli(capsys, "run", model)
    assert code == 2
    assert "float32[N,3,8,8]" in err and "--shape x=" in err
    code, out, err = run_cli(capsys, "run", model, "--shape", "x=2,3,8,8")
    assert code == 0, err
    assert "[2,4,8,8]" in out


def test_run_time_prints_statistics(capsys, model):
    code, out, _ = run_cli(capsys, "run", model, "--time", "--repeat", 3, "--warmup", 1)
    assert code == 0
    assert "3 run(s) after 1 warmup" in out
    timing = out.splitlines()[-1]
    for stat in ("mean", "median", "p90", "min"):
        assert stat in timing and "ms" in timing


def test_run_sanitizes_output_file_names(capsys, tmp_path):
    graph = validate(
        Graph(
            inputs=[Value("x", "float32", (2, 3))],
            outputs=[Value("../out:0", "float32", (2, 3))],
            nodes=[Node("Relu", ["x"], ["../out:0"], name="relu")],
        )
    )
    td.save(graph, tmp_path / "relu.tdl")
    code, out, _ = run_cli(capsys, "run", tmp_path / "relu.tdl", "--out-dir", tmp_path / "out")
    assert code == 0
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["_out_0.npy"]


def test_run_o_is_a_npy_or_json_file(capsys, tmp_path, model, rng):
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    expected = reference_run(model, x)
    code, _, err = run_cli(capsys, "run", model, "-i", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-6)
    code, _, err = run_cli(
        capsys, "run", model, "-i", tmp_path / "x.npy", "-o", tmp_path / "y.json"
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "y.json").read_text())
    assert (
        list(doc) == ["y"] and doc["y"]["dtype"] == "float32" and doc["y"]["shape"] == [1, 4, 8, 8]
    )
    np.testing.assert_allclose(np.array(doc["y"]["data"]), expected, rtol=1e-5, atol=1e-6)

    two = validate(
        Graph(
            inputs=[Value("x", "float32", (2, 3))],
            outputs=[Value("a", "float32", (2, 3)), Value("b", "float32", (2, 3))],
            nodes=[Node("Relu", ["x"], ["a"]), Node("Neg", ["x"], ["b"])],
        )
    )
    td.save(two, tmp_path / "two.tdl")
    code, _, err = run_cli(capsys, "run", tmp_path / "two.tdl", "-o", tmp_path / "two.npy")
    assert code == 2 and "2 outputs" in err and "-o FILE.json" in err
    assert not (tmp_path / "two.npy").exists()
    code, _, err = run_cli(capsys, "run", tmp_path / "two.tdl", "-o", tmp_path / "two.json")
    assert code == 0, err
    assert list(json.loads((tmp_path / "two.json").read_text())) == ["a", "b"]


def test_run_old_folder_spellings_warn(capsys, tmp_path, model):
    for flag in ("--output-dir", "-o"):
        folder = tmp_path / flag.strip("-")
        code, _, err = run_cli(capsys, "run", model, flag, folder)
        assert code == 0, err
        assert "deprecated" in err and f"use --out-dir {folder}" in err
        assert [p.name for p in folder.iterdir()] == ["y.npy"]
    code, _, err = run_cli(capsys, "run", model, "--out-dir", tmp_path / "new")
    assert code == 0 and "warning" not in err


def test_run_image_preprocessing(capsys, tmp_path, rng):
    from PIL import Image

    model = conv_model(tmp_path / "conv.onnx")
    pixels = rng.integers(0, 256, (10, 13, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "in.png")
    mean, std = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]
    code, _, err = run_cli(
        capsys,
        "run",
        model,
        "-i",
        tmp_path / "in.png",
        "--resize",
        "8x8",
        "--bgr",
        "--mean",
        ",".join(map(str, mean)),
        "--std",
        ",".join(map(str, std)),
        "-o",
        tmp_path / "y.npy",
    )
    assert code == 0, err
    image = Image.open(tmp_path / "in.png").resize((8, 8), Image.Resampling.BILINEAR)
    bgr = np.asarray(image, np.float32)[..., ::-1] / 255
    x = ((bgr - mean) / std).astype(np.float32).transpose(2, 0, 1)[None]
    np.testing.assert_allclose(
        np.load(tmp_path / "y.npy"), reference_run(model, x), rtol=1e-4, atol=1e-5
    )
    image_args = ["-i", tmp_path / "in.png"]
    for args, message in (
        (["--mean", "0.5"], "--mean: for image inputs only"),
        ([*image_args, "--resize", "16x16"], "takes 8x8 images, not --resize 16x16"),
        ([*image_args, "--std", "0.5,0,0.5"], "divide by 0"),
        ([*image_args, "--mean", "0.5,0.5"], "2 values for 3 channel"),
        ([*image_args, "--resize", "8by8"], "WIDTHxHEIGHT"),
        ([*image_args, "--mean", "a,b,c"], "expected numbers"),
    ):
        code, _, err = run_cli(capsys, "run", model, *args)
        assert code == 2 and message in err, (args, err)


# -- user errors: exit 2, one line, no traceback ------------------------------------------------


def _garbage(tmp_path):
    (tmp_path / "garbage.onnx").write_bytes(b"\x08\x07this is not a protobuf \xff\xff\xff")
    return ["inspect", tmp_path / "garbage.onnx"]


def _wrong_shape(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 9, 8), np.float32))
    return ["run", tmp_path / "conv.onnx", "--input", tmp_path / "x.npy"]


def _not_npy(tmp_path):
    (tmp_path / "x.npy").write_text("hello")
    return ["run", tmp_path / "conv.onnx", "--input", f"x={tmp_path / 'x.npy'}"]


@pytest.mark.parametrize(
    "argv,expected",
    [
        (lambda p: ["run", p / "missing.onnx"], "no such file"),
        (lambda p: ["convert", p / "missing.onnx", "-o", p / "out.tdl"], "no such file"),
        (_garbage, "not a valid ONNX"),
        (_wrong_shape, "dim 2 must be 8"),
        (_not_npy, "not a valid .npy"),
        (lambda p: ["run", p / "conv.onnx", "--input", p / "none.npy"], "no such file"),
        (lambda p: ["run", p / "conv.onnx", "--input", f"z={p / 'conv.onnx'}"], "NAME=FILE"),
        (lambda p: ["run", p / "conv.onnx", "--shape", "x=1,three"], "expected sizes"),
        (lambda p: ["inspect", p / "conv.onnx", "--backends", "nosuch"], "unknown backend"),
        (lambda p: ["run", p / "conv.onnx", "--backends", "cpu,nosuch"], "unknown backend"),
        (lambda p: ["run", p / "conv.onnx", "--out-dir", p / "conv.onnx"], "expected a folder"),
        (lambda p: ["convert", p / "conv.onnx", "-o", p / "no" / "dir.tdl"], "does not exist"),
    ],
    ids=[
        "missing-model",
        "missing-convert",
        "garbage",
        "wrong-shape",
        "not-npy",
        "missing-input",
        "unknown-input",
        "bad-shape",
        "unknown-backend",
        "unknown-backend-run",
        "output-dir-is-file",
        "missing-folder",
    ],
)
def test_user_errors_exit_2_without_traceback(capsys, tmp_path, model, argv, expected):
    code, _, err = run_cli(capsys, *argv(tmp_path))
    assert code == 2
    assert err.startswith("error: ") and expected in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_run_image_into_an_nhwc_input(capsys, tmp_path, rng):
    """TFLite/Keras models keep NHWC inputs; an image fills them without a transpose."""
    from PIL import Image

    graph = validate(
        Graph(
            inputs=[Value("img", "float32", (1, 5, 7, 3))],
            outputs=[Value("y")],
            nodes=[Node("Identity", ["img"], ["y"], name="id")],
            metadata={"input_layout": "NHWC"},
        )
    )
    td.save(graph, tmp_path / "nhwc.tdl")
    pixels = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "img.png")
    code, _, err = run_cli(
        capsys,
        "run",
        str(tmp_path / "nhwc.tdl"),
        "--input",
        str(tmp_path / "img.png"),
        "-o",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    got = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(got, pixels[None].astype(np.float32) / 255.0, rtol=1e-6)


def test_an_op_failing_at_run_time_is_a_clear_error(tmp_path, capsys):
    """Inputs that fit the model's symbolic dims but not its ops: `tinydl run` prints one
    `error:` line naming the node, op and shapes (no NumPy traceback); --debug adds the
    traceback; the library raises OpError."""
    from helpers.models import reshape_mismatch_graph

    graph = reshape_mismatch_graph()
    model = tmp_path / "m.tdl"
    td.save(graph, model)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((3, 4), np.float32))
    code, out, err = run_cli(capsys, "run", str(model), "--input", f"x={x}")
    assert code == 2
    assert err.startswith("error: node 'reshape' (Reshape) failed"), err
    assert "(3, 4)" in err
    assert "Traceback" not in err
    with pytest.raises(td.OpError, match="reshape"):
        main(["--debug", "run", str(model), "--input", f"x={x}"])
    sess = td.compile(graph, backends=("numpy",))
    with pytest.raises(td.OpError, match=r"Reshape\) failed"):
        sess.run({"x": np.ones((3, 4), np.float32)})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "tinydl:espcn_x3", "--tolerance", "nan"], "finite number"),
        (["pipeline", "run", "examples/apps/superres4.yaml", "--timeout", "-1"], "positive"),
        (["superres", "--demo", "--crf", "99"], "0 to 51"),
        (["pipeline", "run", "examples/apps/superres4.yaml", "--set", "nosuch=1"], "nosuch"),
        (["inspect", "tinydl:espcn_x9"], "shipped: tinydl:espcn_x2, tinydl:espcn_x3"),
    ],
    ids=["tolerance-nan", "timeout-negative", "crf-99", "unknown-set", "unknown-shipped"],
)
def test_bad_arguments_are_refused_with_one_line(capsys, argv, message):
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    cwd = os.getcwd()
    os.chdir(root)
    try:
        code, out, err = run_cli(capsys, *argv)
    finally:
        os.chdir(cwd)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_shipped_models_by_name_and_clear_file_errors(tmp_path, capsys):
    """tinydl:NAME works in run, inspect and convert; a decompression bomb and an unwritable
    output are one `error:` line each."""
    from pathlib import Path

    from PIL import Image

    code, out, err = run_cli(capsys, "run", "tinydl:espcn_x3", "--shape", "y=1,1,8,8")
    assert code == 0 and "[1,1,24,24]" in out
    code, out, _ = run_cli(capsys, "inspect", "tinydl:espcn_x2")
    assert code == 0 and "DepthToSpace" in out
    dst = tmp_path / "espcn.tdl"
    assert run_cli(capsys, "convert", "tinydl:espcn_x3", "-o", dst)[0] == 0 and dst.is_file()
    bomb = tmp_path / "bomb.png"
    Image.new("L", (1, 1)).save(bomb)
    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = 0  # any image is then over twice the limit: Pillow's bomb error
    try:
        code, _, err = run_cli(capsys, "run", "tinydl:espcn_x3", "--input", f"y={bomb}")
    finally:
        Image.MAX_IMAGE_PIXELS = previous
    assert code == 2 and "larger than Pillow's limit" in err and "Traceback" not in err
    # Not writable even by root (CI runs as root): the kernel's /proc.
    target = Path("/proc/tinydl-cannot-write.tdl")
    if not target.parent.is_dir():
        pytest.skip("no /proc here to write into")
    code, _, err = run_cli(capsys, "convert", "tinydl:espcn_x3", "-o", target)
    assert code == 2 and "cannot write" in err and "Traceback" not in err


def test_backends_and_backend_are_one_option_everywhere(capsys):
    """--backends and --backend name the same option in every command that takes backends."""
    from tinydl.cli import build_parser

    parser = build_parser()
    for command in ("run", "inspect", "bench"):
        for flag in ("--backends", "--backend"):
            args = parser.parse_args([command, "tinydl:espcn_x3", flag, "numpy"])
            assert args.backends == "numpy", (command, flag)
    for flag in ("--backends", "--backend"):
        assert parser.parse_args(["superres", "--demo", flag, "numpy"]).backend == "numpy"


def test_precision_auto_in_inspect_and_run(capsys, tmp_path):
    from helpers.models import fp16_fragile_graph

    path = tmp_path / "fragile.tdl"
    td.save(fp16_fragile_graph(), path)
    assert main(["inspect", str(path), "--precision", "auto", "--json", "--verbose"]) == 0
    report = json.loads(capsys.readouterr().out)["precision"]
    assert "big" in report["fp32"] and report["overflow"] == ["big"]
    assert report["error"] <= report["tolerance"] and report["nodes"]["big"] == "fp32"
    assert main(["run", str(path), "--precision", "auto"]) == 0
    assert "note: precision auto:" in capsys.readouterr().err
    assert main(["run", str(path), "--partition", "cost", "--backends", "numpy"]) == 0

"""`tinydl bench`: the CPU run on ESPCN x3 (tables, JSON, Markdown, charts; every timing positive,
every peer's output matched), and the peers' model writers on small CNN graphs."""

import importlib.util
import json
import os

import numpy as np
import pytest
from helpers.models import espcn_onnx

import tinydl as td
from tinydl.bench import SCHEMA, Config, run_bench
from tinydl.bench.harness import PHASES
from tinydl.cli import main
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

STATUSES = {"ok", "skipped", "mismatch", "error"}
STATS = {"n", "mean_ms", "median_ms", "p90_ms", "min_ms", "max_ms", "std_ms"}
# The peers the CPU run must measure when their library is installed (tinydl[test] has them).
CPU_PEERS = {"onnxruntime/cpu": "onnxruntime", "ncnn/cpu": "ncnn", "litert/cpu": "ai_edge_litert"}
GPU_PEERS = {
    "onnxruntime/cuda": "onnxruntime",
    "ncnn/vulkan": "ncnn",
    "litert/gpu": "ai_edge_litert",
}


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def webgpu_available() -> bool:
    from tinydl.backends import get_backend

    return get_backend("webgpu").available()


def check_stats(s: dict, where: str) -> None:
    assert set(s) == STATS, where
    assert s["n"] >= 1, where
    for key in STATS - {"n", "std_ms"}:
        assert s[key] > 0, f"{where}: {key} = {s[key]}"
    assert s["min_ms"] <= s["median_ms"] <= s["p90_ms"] <= s["max_ms"], where


def check_report(report: dict) -> dict[str, dict]:
    """The JSON schema; returns the targets by name."""
    assert report["schema"] == SCHEMA
    for key in ("created", "command", "model", "config", "machine", "versions", "targets"):
        assert key in report, key
    model = report["model"]
    assert model["inputs"] and model["outputs"] and model["parameters"] > 0
    assert {"cpu", "cores", "memory_gb", "gpus", "platform"} <= set(report["machine"])
    assert report["versions"]["tinydl"] == td.__version__
    assert report["config"]["runs"] >= 1 and report["config"]["tolerance"] > 0
    targets = {}
    for t in report["targets"]:
        name = t["name"]
        assert name not in targets, f"{name} twice"
        targets[name] = t
        assert t["status"] in STATUSES, name
        if t["status"] != "ok":
            assert t["reason"], f"{name}: {t['status']} without a reason"
            continue
        check = t["check"]
        assert check["matched"] and check["rel_err"] <= check["tolerance"], name
        check_stats(t["latency"]["host"], f"{name} host latency")
        if t["latency"]["gpu"] is not None:
            check_stats(t["latency"]["gpu"], f"{name} GPU latency")
        else:
            assert t["latency"]["gpu_note"].startswith("n/a"), name
        assert list(t["init"]) == list(PHASES), name
        for phase, p in t["init"].items():
            assert p["seconds"] > 0, f"{name} {phase}"
            assert p["rss_mb"] > 0, f"{name} {phase}"
        for row in t["transfers"]:
            assert row["direction"] in ("h2d", "d2h") and row["bytes"] > 0, name
            assert row["median_ms"] > 0 and row["gb_per_s"] > 0, name
        assert t["transfers"] or t["transfer_note"], name
    return targets


def test_bench_espcn_on_cpu_peers(tmp_path, rng, capsys):
    path = tmp_path / "espcn_x3.onnx"
    espcn_onnx(path, 3, rng)
    out, json_path = tmp_path / "out", tmp_path / "results.json"
    code = main(
        [
            "bench",
            str(path),
            "--input-shape",
            "1,1,64,96",
            "--backends",
            "cpu,webgpu",
            "--peers",
            "onnxruntime,ncnn,litert",
            "--warmup",
            "1",
            "--runs",
            "3",
            "--transfer-runs",
            "2",
            "--transfer-sizes",
            "720p",
            "--out-dir",
            str(out),
            "-o",
            str(json_path),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = json.loads(json_path.read_text())
    assert json.loads((out / "bench.json").read_text()) == report
    targets = check_report(report)
    assert report["model"]["inputs"] == [{"name": "y", "shape": [1, 1, 64, 96], "dtype": "float32"}]
    assert report["model"]["outputs"][0]["shape"] == [1, 1, 192, 288]
    assert report["command"].startswith(f"tinydl bench {path} --input-shape 1,1,64,96")

    assert targets["tinydl/cpu"]["status"] == "ok"
    assert targets["tinydl/cpu"]["transfer_note"].startswith("not applicable")
    for name, module in CPU_PEERS.items():
        if installed(module):
            assert targets[name]["status"] == "ok", targets[name]["reason"]
        else:
            assert targets[name]["status"] == "skipped"
            assert "not installed" in targets[name]["reason"]
    webgpu = targets["tinydl/webgpu"]
    if webgpu_available():
        assert webgpu["status"] == "ok", webgpu["reason"]
        sizes = {(r["size"], r["direction"]) for r in webgpu["transfers"]}
        assert sizes == {
            (s, d) for s in ("720p RGBA32F", "input 'y'", "output 'out'") for d in ("h2d", "d2h")
        }
    else:
        assert webgpu["status"] == "skipped" and webgpu["reason"]
    # A peer's GPU variant is listed whether or not this machine has a GPU: never dropped.
    for name, module in GPU_PEERS.items():
        if installed(module):
            assert targets[name]["status"] in ("ok", "skipped"), targets[name]["reason"]

    md = (out / "bench.md").read_text()
    for name in targets:
        assert f"| {name} |" in md, name
    assert "| target | status | host median ms |" in md
    for chart in ("latency.png", "init.png"):
        assert (out / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", chart
    assert (out / "transfer.png").exists() == bool(webgpu["transfers"])
    assert "latency (host:" in printed and "init cost" in printed
    for name in targets:
        assert name in printed


# -- the peers' writers on small CNN graphs ------------------------------------------------------


def conv(name, x, w, b=None, **attrs):
    k = list(w.shape[2:])
    inputs = [x, f"{name}.w"] + ([f"{name}.b"] if b is not None else [])
    return Node("Conv", inputs, [name], {"kernel_shape": k, **attrs}, name=name)


def cnn_graph(rng) -> Graph:
    """Conv, ReLU, depthwise conv, HardSwish, a skip Add (a blob read twice), per-channel Mul,
    MaxPool and AveragePool joined by Concat, BatchNormalization, Clip, 1x1 conv, LeakyRelu,
    DepthToSpace (DCR) and Sigmoid."""

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    inits = {
        "c1.w": w(8, 3, 3, 3),
        "c1.b": w(8),
        "dw.w": w(8, 1, 3, 3),
        "dw.b": w(8),
        "scale": rng.random((1, 8, 1, 1), dtype=np.float32) + 0.5,
        "bn.s": rng.random(16, dtype=np.float32) + 0.5,
        "bn.b": w(16),
        "bn.m": w(16),
        "bn.v": rng.random(16, dtype=np.float32) + 0.5,
        "lo": np.array(0, np.float32),
        "hi": np.array(6, np.float32),
        "c2.w": w(12, 16, 1, 1),
        "c2.b": w(12),
    }
    nodes = [
        conv("c1", "x", inits["c1.w"], inits["c1.b"], pads=[1, 1, 1, 1]),
        Node("Relu", ["c1"], ["r1"]),
        conv("dw", "r1", inits["dw.w"], inits["dw.b"], pads=[1, 1, 1, 1], group=8),
        Node("HardSwish", ["dw"], ["hs"]),
        Node("Add", ["hs", "r1"], ["skip"]),
        Node("Mul", ["skip", "scale"], ["scaled"]),
        Node("MaxPool", ["scaled"], ["mp"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        Node("AveragePool", ["scaled"], ["ap"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        Node("Concat", ["mp", "ap"], ["cat"], {"axis": 1}),
        Node("BatchNormalization", ["cat", "bn.s", "bn.b", "bn.m", "bn.v"], ["bn"]),
        Node("Clip", ["bn", "lo", "hi"], ["clip"]),
        conv("c2", "clip", inits["c2.w"], inits["c2.b"]),
        Node("LeakyRelu", ["c2"], ["lr"], {"alpha": 0.1}),
        Node("DepthToSpace", ["lr"], ["d2s"], {"blocksize": 2, "mode": "DCR"}),
        Node("Sigmoid", ["d2s"], ["y"]),
    ]
    return validate(
        Graph(
            [Value("x", "float32", (1, 3, 16, 16))],
            [Value("y", "float32", None)],
            nodes,
            inits,
            name="cnn",
        )
    )


def strided_graph(rng) -> Graph:
    """A stride-2 conv whose symmetric pads are not TensorFlow's SAME (an explicit PAD in
    TFLite), Tanh, padded 3x3 max and average pools (padding left out of the average), a 5x5
    conv and a CRD DepthToSpace with one output channel."""
    inits = {
        "a.w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 5,
        "b.w": rng.standard_normal((4, 4, 5, 5)).astype(np.float32) / 10,
        "b.b": rng.standard_normal(4).astype(np.float32),
    }
    nodes = [
        conv("a", "x", inits["a.w"], pads=[1, 1, 1, 1], strides=[2, 2]),
        Node("Tanh", ["a"], ["t"]),
        Node("MaxPool", ["t"], ["mp"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        Node("AveragePool", ["mp"], ["ap"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        conv("b", "ap", inits["b.w"], inits["b.b"], pads=[2, 2, 2, 2]),
        Node("DepthToSpace", ["b"], ["y"], {"blocksize": 2, "mode": "CRD"}),
    ]
    return validate(
        Graph(
            [Value("x", "float32", ("N", 3, "H", "W"))],
            [Value("y", "float32", None)],
            nodes,
            inits,
            name="strided",
        )
    )


def softmax_graph(rng) -> Graph:
    inits = {"c.w": rng.standard_normal((4, 3, 1, 1)).astype(np.float32)}
    nodes = [conv("c", "x", inits["c.w"]), Node("Softmax", ["c"], ["y"], {"axis": 1})]
    return validate(
        Graph(
            [Value("x", "float32", (1, 3, 8, 8))],
            [Value("y", "float32", None)],
            nodes,
            inits,
            name="softmax",
        )
    )


PEER_MODULES = {
    "onnxruntime/cpu": "onnxruntime",
    "torch/cpu": "torch",
    "ncnn/cpu": "ncnn",
    "litert/cpu": "ai_edge_litert",
}


def bench_graph(tmp_path, graph: Graph, shapes=None) -> dict[str, dict]:
    path = tmp_path / f"{graph.name}.tdl"
    td.save(graph, path)
    report = run_bench(
        path,
        backends=["numpy"],
        peers=["onnxruntime", "torch", "ncnn", "litert"],
        input_shapes=shapes,
        config=Config(warmup=0, runs=1, transfer_runs=0),
    )
    return check_report(report)


@pytest.mark.parametrize("make", [cnn_graph, strided_graph], ids=["cnn", "strided"])
def test_peer_writers_match_tinydl(tmp_path, rng, make):
    targets = bench_graph(
        tmp_path, make(rng), {"x": (1, 3, 16, 20)} if make is strided_graph else None
    )
    for name, module in PEER_MODULES.items():
        if installed(module):
            assert targets[name]["status"] == "ok", f"{name}: {targets[name]['reason']}"


def test_ops_a_writer_lacks_are_skips_with_the_reason(tmp_path, rng):
    targets = bench_graph(tmp_path, softmax_graph(rng))
    if installed("ncnn"):
        assert targets["ncnn/cpu"]["status"] == "skipped"
        assert "Softmax" in targets["ncnn/cpu"]["reason"]
    if installed("ai_edge_litert"):
        assert targets["litert/cpu"]["status"] == "skipped"
        assert "Softmax" in targets["litert/cpu"]["reason"]
    if installed("onnxruntime"):
        assert targets["onnxruntime/cpu"]["status"] == "ok"


def activation_graph(rng, ops) -> Graph:
    """A conv, then each activation op of `ops` in a row (Clip with a lower bound only,
    LeakyRelu and HardSigmoid with their default parameters, PRelu with a slope per channel)."""
    inits = {
        "c.w": (rng.standard_normal((4, 3, 3, 3)) / 5).astype(np.float32),
        "lo": np.array(-0.5, np.float32),
        "slope": rng.uniform(0.1, 0.3, (4, 1, 1)).astype(np.float32),
    }
    extra = {"Clip": ["lo"], "PRelu": ["slope"]}
    nodes, x = [conv("c", "x", inits["c.w"], pads=[1, 1, 1, 1])], "c"
    for k, op in enumerate(ops):
        nodes.append(Node(op, [x, *extra.get(op, [])], [f"a{k}"], name=f"{op}_{k}"))
        x = f"a{k}"
    nodes.append(Node("Identity", [x], ["y"]))
    return validate(
        Graph([Value("x", "float32", (1, 3, 8, 8))], [Value("y", "float32", None)], nodes, inits)
    )


@pytest.mark.parametrize("case", ["all-but-PRelu", "PRelu"])
def test_peers_write_the_activations_or_give_their_reason(tmp_path, rng, case):
    """Each peer runs every activation of tinydl's table it does not refuse (compared with
    tinydl by the harness), and skips a graph with one it refuses, giving its reason."""
    from tinydl.bench.peers import litert, ncnn
    from tinydl.bench.peers import torch as torch_peer
    from tinydl.ops.activation import ACTIVATION_OPS

    ops = ["PRelu"] if case == "PRelu" else [op for op in ACTIVATION_OPS if op != "PRelu"]
    graph = activation_graph(rng, ops)
    graph.name = case
    targets = bench_graph(tmp_path, graph)
    peers = {
        "torch/cpu": ("torch", torch_peer.REFUSED_ACTIVATIONS),
        "ncnn/cpu": ("ncnn", ncnn.REFUSED_ACTIVATIONS),
        "litert/cpu": ("ai_edge_litert", litert.REFUSED_ACTIVATIONS),
    }
    for name, (module, refused) in peers.items():
        if not installed(module):
            continue
        first = next((op for op in ops if op in refused), None)
        if first is None:
            assert targets[name]["status"] == "ok", f"{name}: {targets[name]['reason']}"
        else:
            assert targets[name]["status"] == "skipped", name
            assert refused[first] in targets[name]["reason"], targets[name]["reason"]


def test_a_wrong_peer_output_is_a_mismatch_without_times(tmp_path, rng, monkeypatch):
    from tinydl.bench.peers import onnxruntime as ort_peer

    run = ort_peer.OrtTarget.run
    monkeypatch.setattr(
        ort_peer.OrtTarget, "run", lambda self, inst, feeds: [y + 1 for y in run(self, inst, feeds)]
    )
    path = tmp_path / "espcn.onnx"
    espcn_onnx(path, 2, rng)
    pytest.importorskip("onnxruntime")
    report = run_bench(
        path,
        backends=[],
        peers=["onnxruntime"],
        input_shapes={"y": (1, 1, 8, 8)},
        config=Config(warmup=0, runs=1, transfer_runs=0),
    )
    ort = {t["name"]: t for t in report["targets"]}["onnxruntime/cpu"]
    assert ort["status"] == "mismatch" and "relative error" in ort["reason"]
    assert ort["latency"]["host"] is None


def test_bench_cli_rejects_unknown_peers_and_backends(tmp_path, rng, capsys):
    path = tmp_path / "espcn.onnx"
    espcn_onnx(path, 2, rng)
    assert main(["bench", str(path), "--peers", "tensorflow"]) == 2
    assert "unknown peer(s) ['tensorflow']" in capsys.readouterr().err
    assert main(["bench", str(path), "--backends", "cpu,vulkan"]) == 2
    assert "unknown backend(s) ['vulkan']" in capsys.readouterr().err


def test_output_check_has_an_absolute_floor():
    """An output that is ~1e-9 everywhere is judged by its absolute error (a relative error of
    it says nothing); one of ordinary size still needs the relative tolerance."""
    from tinydl.bench.harness import compare

    tiny = np.full((4, 4), 1e-9, np.float32)
    assert compare([tiny + 1.3e-7], [tiny], 1e-3)["matched"]
    ref = np.linspace(0.0, 1.0, 16, dtype=np.float32).reshape(4, 4)
    check = compare([ref + 0.01], [ref], 1e-3)
    assert not check["matched"] and "absolute" in check["reason"]
    assert compare([ref + 1e-4], [ref], 1e-3)["matched"]


# -- defaults: the input, where files go, what the cpu target says it ran on -------------------


def line_recognizer(rng) -> Graph:
    """PP-OCR rec's input: [N, 3, 48, W], a fixed height and a symbolic width."""
    w = (rng.standard_normal((4, 3, 3, 3)) / 5).astype(np.float32)
    return validate(
        Graph(
            [Value("x", "float32", ("N", 3, 48, "W"))],
            [Value("y", "float32", None)],
            [Node("Conv", ["x", "w"], ["c"], {"kernel_shape": [3, 3]}), Node("Relu", ["c"], ["y"])],
            {"w": w},
            name="rec",
        )
    )


def test_default_input_fills_only_symbolic_dims(tmp_path, rng):
    from tinydl.bench.inputs import default_dims

    path = tmp_path / "rec.tdl"
    td.save(line_recognizer(rng), path)
    report = run_bench(path, backends=["numpy"], peers=[], config=Config(warmup=0, runs=1))
    assert report["model"]["inputs"][0]["shape"] == [1, 3, 48, 320]
    assert {t["name"]: t["status"] for t in report["targets"]} == {"tinydl/numpy": "ok"}
    cases = {
        ("N", 3, "H", "W"): (1, 3, 360, 640),
        ("N", 3, 32, "W"): (1, 3, 32, 216),
        ("N", 3, 224, "W"): (1, 3, 224, 224),
        ("N", 3, "H", 100): (1, 3, 100, 100),
        (2, 1, 24, 40): (2, 1, 24, 40),
    }
    for shape, dims in cases.items():
        assert default_dims(Value("x", "float32", shape)) == dims, shape
    assert default_dims(Value("x", "float32", ("N", "H", 48, 3)), "NHWC") == (1, 48, 48, 3)
    with pytest.raises(td.InvalidInputError, match="dim 1 is not fixed"):
        default_dims(Value("x", "float32", ("N", "seq")))


def test_bench_writes_nothing_unless_asked(tmp_path, rng, capsys, monkeypatch):
    model = tmp_path / "m" / "espcn.onnx"
    model.parent.mkdir()
    espcn_onnx(model, 2, rng)
    monkeypatch.chdir(tmp_path)
    quick = ["--backends", "numpy", "--peers", "none", "--warmup", "0", "--runs", "1"]
    quick += ["--input-shape", "1,1,8,8", "--no-charts"]
    assert main(["bench", str(model), *quick]) == 0
    captured = capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert "wrote" not in captured.out

    assert main(["bench", str(model), *quick, "--out-dir", "res", "-o", "r/one.json"]) == 0
    assert sorted(p.name for p in (tmp_path / "res").iterdir()) == ["bench.json", "bench.md"]
    assert json.loads((tmp_path / "r" / "one.json").read_text())["schema"] == SCHEMA
    assert "warning" not in capsys.readouterr().err

    # the old spellings work for one release, with a warning naming the new one
    for old, folder in (["--out", "old1"], "old1"), (["-o", "old2"], "old2"):
        assert main(["bench", str(model), *quick, *old]) == 0
        err = capsys.readouterr().err
        assert "deprecated" in err and f"--out-dir {folder}" in err
        assert (tmp_path / folder / "bench.json").is_file()
    assert main(["bench", str(model), *quick, "--json", "old3.json"]) == 0
    assert "use -o old3.json" in capsys.readouterr().err
    assert (tmp_path / "old3.json").is_file()


def test_cpu_target_names_the_path_that_ran(tmp_path, rng):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "espcn.onnx"
    espcn_onnx(path, 2, rng)
    report = run_bench(
        path,
        backends=["cpu", "numpy"],
        peers=[],
        input_shapes={"y": (1, 1, 8, 8)},
        config=Config(warmup=0, runs=1, transfer_runs=0, threads=1),
    )
    targets = {t["name"]: t for t in report["targets"]}
    cpu = targets["tinydl/cpu"]
    assert cpu["status"] == "ok", cpu["reason"]
    assert cpu["info"]["placement"] == {"onnxruntime": len(td.load(path).nodes)}
    assert "CPUExecutionProvider" in cpu["device"] and "NumPy" not in cpu["device"]
    assert "NumPy" in targets["tinydl/numpy"]["device"]


def test_docs_embed_only_images_that_exist():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", text) + re.findall(
            r"<img[^>]+src=\"([^\"]+)\"", text
        ):
            if "://" not in target and not (doc.parent / target).is_file():
                missing.append(f"{doc.relative_to(root)}: {target}")
    assert not missing, missing


def test_litert_runs_a_tflite_model_from_its_own_file(tmp_path, capsys):
    """Given a .tflite file (MediaPipe's face detector: NHWC input, two 3-D outputs), LiteRT
    runs that file as it is, not a rewrite, and matches tinydl's output."""
    pytest.importorskip("ai_edge_litert", reason="pip install 'tinydl[bench]'")
    from helpers.models import mediapipe_model

    path = mediapipe_model("face_detection/face_detection_short_range.tflite")
    json_path = tmp_path / "results.json"
    argv = ["bench", str(path), "--backends", "numpy", "--peers", "litert", "--warmup", "1"]
    argv += ["--runs", "2", "--transfer-runs", "0", "--no-charts", "-o", str(json_path)]
    assert main(argv) == 0, capsys.readouterr().out
    targets = {t["name"]: t for t in json.loads(json_path.read_text())["targets"]}
    cpu = targets["litert/cpu"]
    assert cpu["status"] == "ok", cpu.get("reason")
    assert cpu["info"]["model_load"].startswith("the model's own .tflite file")


@pytest.mark.parametrize("session_cache", [False, True])
def test_the_init_phases_read_nothing_back_unless_asked(tmp_path, rng, monkeypatch, session_cache):
    """Two benches of one file: the second compiles again (its init measures the work) unless
    --session-cache lets it read the session back (the state of each run's first compile)."""
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TINYDL_SESSION_CACHE", "on")
    monkeypatch.setenv("TINYDL_MODEL_CACHE", "on")
    from tinydl import snapshot

    path = tmp_path / "espcn.onnx"
    espcn_onnx(path, 2, rng)
    config = Config(warmup=0, runs=1, transfer_runs=0, session_cache=session_cache)
    states = []
    for _ in range(2):
        report = run_bench(
            path, backends=["numpy"], peers=[], input_shapes={"y": (1, 1, 8, 8)}, config=config
        )
        snapshot.wait_for_writes()
        (target,) = report["targets"]
        assert target["status"] == "ok", target["reason"]
        states.append(target["info"]["session_cache"])
    assert states == (["saved", "hit"] if session_cache else ["off", "off"])
    assert os.environ["TINYDL_SESSION_CACHE"] == "on"  # (the caller's setting comes back)

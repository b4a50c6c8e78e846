"""Warm starts (tinydl/tinydl/snapshot.py): imported models and compiled sessions kept in the
cache folder, read back by the next load or compile of the same file with the same arguments,
and never used when anything they were made from differs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinydl as td
from tinydl import snapshot

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Both caches on, in a folder of this test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("TINYDL_CACHE_DIR", str(folder))
    monkeypatch.setenv(snapshot.SESSION_ENV, "on")
    monkeypatch.setenv(snapshot.MODEL_ENV, "on")
    yield folder
    snapshot.wait_for_writes()


def small_cnn(path: Path, rng, static: bool = True, external: bool = False) -> Path:
    """Conv-ReLU-Conv + shortcut, global pool, Gemm: the shape of a classifier, small."""
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    w3 = rng.standard_normal((8, 3, 1, 1)).astype(np.float32) * 0.3
    fc = rng.standard_normal((5, 8)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "w1"), (w2, "w2"), (w3, "w3")]]
    inits += [numpy_helper.from_array(fc, "fc"), numpy_helper.from_array(b, "b")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4),
        helper.make_node("Conv", ["x", "w3"], ["s"]),
        helper.make_node("Add", ["c2", "s"], ["a"]),
        helper.make_node("Relu", ["a"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "b"], ["y"], transB=1),
    ]
    shape = [1, 3, 12, 16] if static else ["N", 3, "H", "W"]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], 5])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if external:
        onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    else:
        onnx.save(model, path)
    return path


def feeds(rng, shape=(1, 3, 12, 16)):
    return {"x": rng.standard_normal(shape).astype(np.float32)}


def compile_twice(path, **kw):
    first = td.compile(td.load(path), **kw)
    snapshot.wait_for_writes()
    second = td.compile(td.load(path), **kw)
    return first, second


def cache_state(sess) -> str:
    return sess.profile()["init"]["cache"]


def read_back_plans(path, **kw):
    """A session saved, then read back; both with their one plan."""
    first, second = compile_twice(path, **kw)
    assert (cache_state(first), cache_state(second)) == ("saved", "hit")
    (p1,) = first.partitions[0].kernel.plans.values()
    (p2,) = second.partitions[0].kernel.plans.values()
    return first, second, p1, p2


# -- sessions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("static", [True, False])
def test_a_session_is_read_back_and_runs_alike(caches, tmp_path, rng, static):
    path = small_cnn(tmp_path / "m.onnx", rng, static)
    first, second = compile_twice(path, backends=("numpy",))
    assert cache_state(first) == "saved"
    assert cache_state(second) == "hit"
    assert second.source_graph is not first.source_graph
    for shape in [(1, 3, 12, 16)] + ([] if static else [(2, 3, 9, 7)]):
        x = feeds(rng, shape)
        np.testing.assert_array_equal(second.run(x)["y"], first.run(x)["y"])
    assert [n.op for n in second.graph.nodes] == [n.op for n in first.graph.nodes]
    assert len(list((caches / "sessions").iterdir())) == 1


def test_a_new_process_reads_the_session_back(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    x = feeds(rng)
    np.save(tmp_path / "x.npy", x["x"])
    # The start that reads the session back imports no optimizer pass and starts no process
    # (platform.processor() would run `uname -p`).
    code = (
        "import json, subprocess, sys, numpy as np, tinydl as td\n"
        "started = []\n"
        "subprocess.Popen.__init__ = lambda self, *a, **k: started.append(a)\n"
        "s = td.compile(td.load(sys.argv[1]), backends=('numpy',))\n"
        "y = s.run({'x': np.load(sys.argv[2])})['y']\n"
        "np.save(sys.argv[3], y)\n"
        "passes = sorted(m for m in sys.modules if m.startswith('tinydl.passes.'))\n"
        "print(json.dumps([s.profile()['init']['cache'], passes, len(started)]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    states, outs = [], []
    for k in range(2):
        out = tmp_path / f"y{k}.npy"
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(out)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        states.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        outs.append(np.load(out))
    assert [state for state, _, _ in states] == ["saved", "hit"]
    assert states[0][1] and not states[1][1]  # the passes ran in the first start only
    assert states[1][2] == 0
    np.testing.assert_array_equal(outs[1], outs[0])
    want = td.compile(td.load(path), backends=("numpy",)).run(x)["y"]
    np.testing.assert_array_equal(outs[1], want)


def test_other_arguments_or_environment_compile_again(caches, tmp_path, rng, monkeypatch):
    path = small_cnn(tmp_path / "m.onnx", rng)
    base = td.compile(td.load(path), backends=("numpy",))
    snapshot.wait_for_writes()
    assert cache_state(base) == "saved"
    other = td.compile(td.load(path), backends=("numpy",), optimize="none")
    snapshot.wait_for_writes()
    assert cache_state(other) == "saved"
    assert len(other.graph.nodes) > len(base.graph.nodes)
    monkeypatch.setenv("TINYDL_WEBGPU_DEPTHWISE", "off")  # any TINYDL_ variable is in the key
    assert cache_state(td.compile(td.load(path), backends=("numpy",))) == "saved"
    snapshot.wait_for_writes()
    assert len(list((caches / "sessions").iterdir())) == 3


def test_a_changed_file_is_compiled_again(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, _ = compile_twice(path, backends=("numpy",))
    small_cnn(path, np.random.default_rng(99))  # other weights, same structure
    os.utime(path, ns=(1, 1))  # (an mtime of its own even where the clock is coarse)
    changed = td.compile(td.load(path), backends=("numpy",))
    assert cache_state(changed) == "saved"
    x = feeds(rng)
    assert not np.allclose(changed.run(x)["y"], first.run(x)["y"])
    fresh = td.compile(td.load(path), backends=("numpy",), optimize="all")
    np.testing.assert_array_equal(changed.run(x)["y"], fresh.run(x)["y"])


def test_a_change_to_tinydl_compiles_again(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    snapshot.code_fingerprint.cache_clear()  # (the code as it is now, not at this process's start)
    compile_twice(path, backends=("numpy",))
    source = Path(snapshot.__file__).parent / "ops" / "conv.py"
    st = source.stat()
    try:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
        snapshot.code_fingerprint.cache_clear()
        assert cache_state(td.compile(td.load(path), backends=("numpy",))) == "saved"
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
        snapshot.code_fingerprint.cache_clear()
    assert cache_state(td.compile(td.load(path), backends=("numpy",))) == "hit"


def test_a_graph_changed_after_loading_is_not_cached(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    compile_twice(path, backends=("numpy",))
    model = td.load(path)
    model.initializers["fc"] = np.zeros((5, 8), np.float32)
    sess = td.compile(model, backends=("numpy",))
    assert cache_state(sess) == "on, not for this model"
    np.testing.assert_allclose(
        sess.run(feeds(rng))["y"], np.broadcast_to(model.initializers["b"], (1, 5))
    )
    model = td.load(path)
    model.nodes[1].op = "Sigmoid"
    assert cache_state(td.compile(model, backends=("numpy",))) == "on, not for this model"
    # and a graph made in memory never is
    made = td.load(path)
    del made.origin
    assert cache_state(td.compile(made, backends=("numpy",))) == "on, not for this model"


def test_the_weights_of_a_loaded_graph_are_read_only(caches, tmp_path, rng):
    model = td.load(small_cnn(tmp_path / "m.onnx", rng))
    assert model.origin is not None
    with pytest.raises(ValueError, match="read-only"):
        model.initializers["fc"][0, 0] = 1.0


def test_a_damaged_entry_is_compiled_again(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, _ = compile_twice(path, backends=("numpy",))
    (entry,) = (caches / "sessions").iterdir()
    entry.write_bytes(entry.read_bytes()[:200])
    again = td.compile(td.load(path), backends=("numpy",))
    assert cache_state(again) == "saved"
    snapshot.wait_for_writes()
    x = feeds(rng)
    np.testing.assert_array_equal(again.run(x)["y"], first.run(x)["y"])
    assert cache_state(td.compile(td.load(path), backends=("numpy",))) == "hit"


def test_a_snapshot_others_could_write_is_not_read(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    compile_twice(path, backends=("numpy",))
    (entry,) = (caches / "sessions").iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600
    entry.chmod(0o620)
    assert cache_state(td.compile(td.load(path), backends=("numpy",))) == "saved"
    snapshot.wait_for_writes()
    assert entry.stat().st_mode & 0o777 == 0o600  # replaced
    assert cache_state(td.compile(td.load(path), backends=("numpy",))) == "hit"


def test_off_keeps_nothing(caches, tmp_path, rng, monkeypatch):
    monkeypatch.setenv(snapshot.SESSION_ENV, "off")
    monkeypatch.setenv(snapshot.MODEL_ENV, "off")
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, second = compile_twice(path, backends=("numpy",))
    assert cache_state(first) == cache_state(second) == "off"
    assert not caches.exists()


def test_an_onnxruntime_session_is_read_back_and_runs_alike(caches, tmp_path, rng):
    pytest.importorskip("onnxruntime")
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, second = compile_twice(path, backends=("cpu",))
    assert (cache_state(first), cache_state(second)) == ("saved", "hit")
    assert second.partitions[0].backend == "onnxruntime"
    x = feeds(rng)
    np.testing.assert_array_equal(second.run(x)["y"], first.run(x)["y"])
    for sess in (first, second):  # the partition's ONNX is not kept once the session is
        assert sess.partitions[0].kernel._model is None


def test_the_cache_stays_within_its_size(caches, tmp_path, rng, monkeypatch):
    monkeypatch.setenv(snapshot.SIZE_ENV, "0.01")  # 10 KB: one small session at a time
    paths = [small_cnn(tmp_path / f"m{k}.onnx", rng) for k in range(3)]
    for p in paths:
        td.compile(td.load(p), backends=("numpy",))
        snapshot.wait_for_writes()
    kept = list((caches / "sessions").iterdir())
    assert len(kept) == 1  # the last one written stays even over the limit
    assert cache_state(td.compile(td.load(paths[-1]), backends=("numpy",))) == "hit"
    assert cache_state(td.compile(td.load(paths[0]), backends=("numpy",))) == "saved"


# -- imported models -----------------------------------------------------------------------------


def test_an_imported_model_is_read_back_without_its_importer(caches, tmp_path, rng, monkeypatch):
    from tinydl.importers import onnx as importer
    from tinydl.ir.tdl import graph_json_text
    from tinydl.ops import base

    path = small_cnn(tmp_path / "m.onnx", rng, static=False)
    first = td.load(path)
    snapshot.wait_for_writes()  # (the copy is written on a thread)
    assert len(list((caches / "models").iterdir())) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("imported again")

    monkeypatch.setattr(importer, "load", refuse)
    monkeypatch.setattr(base, "infer_graph", refuse)  # kept validated, its types inferred
    second = td.load(path)
    assert graph_json_text(second) == graph_json_text(first)
    assert {n: (v.dtype, v.shape) for n, v in second.values.items()} == {
        n: (v.dtype, v.shape) for n, v in first.values.items()
    }
    for name, a in first.initializers.items():
        np.testing.assert_array_equal(second.initializers[name], a)
        assert not second.initializers[name].flags.writeable
    assert second.origin[0] == first.origin[0]
    os.utime(path, ns=(1, 1))
    with pytest.raises(AssertionError, match="imported again"):
        td.load(path)


@pytest.mark.parametrize("damage", ["truncated", "not a graph", "others may write it"])
def test_a_kept_import_that_cannot_be_trusted_is_imported_again(caches, tmp_path, rng, damage):
    path = small_cnn(tmp_path / "m.onnx", rng)
    first = td.load(path)
    snapshot.wait_for_writes()
    (kept,) = (caches / "models").iterdir()
    if damage == "truncated":
        kept.write_bytes(kept.read_bytes()[:100])
    elif damage == "not a graph":
        snapshot.dump({"nodes": []}, kept)
    else:
        kept.chmod(0o666)
    second = td.load(path)
    assert [n.op for n in second.nodes] == [n.op for n in first.nodes]
    x = feeds(rng)
    want = td.compile(first, backends=("numpy",)).run(x)["y"]
    np.testing.assert_array_equal(td.compile(second, backends=("numpy",)).run(x)["y"], want)
    snapshot.wait_for_writes()
    assert snapshot.load(next((caches / "models").iterdir())).nodes  # kept again, readable


def test_external_weights_are_part_of_the_identity(caches, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng, external=True)
    first, second = compile_twice(path, backends=("numpy",))
    assert cache_state(second) == "hit"
    assert not (caches / "models").exists()  # imported each time: its weights are elsewhere
    weights = tmp_path / "w.bin"
    data = bytearray(weights.read_bytes())
    data[:4] = np.float32(7.0).tobytes()
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(1, 1))
    changed = td.compile(td.load(path), backends=("numpy",))
    assert cache_state(changed) == "saved"
    x = feeds(rng)
    assert not np.allclose(changed.run(x)["y"], first.run(x)["y"])


def test_a_tdl_file_is_kept_too(caches, tmp_path, rng):
    path = tmp_path / "m.tdl"
    td.save(td.load(small_cnn(tmp_path / "m.onnx", rng)), path)
    first, second = compile_twice(path, backends=("numpy",))
    assert (cache_state(first), cache_state(second)) == ("saved", "hit")


def test_weights_read_back_from_a_tdl_file_are_kept_out_of_band(caches, tmp_path, rng):
    """A .tdl file's tensors map the file; they are plain ndarrays, which a snapshot keeps
    beside its pickle (an np.memmap would go into it, copied: a session of an imported model
    read back from the model cache did so)."""
    path = tmp_path / "m.tdl"
    td.save(td.load(small_cnn(tmp_path / "m.onnx", rng)), path)
    graph = td.load(path)
    weights = [t for t in graph.initializers.values() if t.size > 1]
    assert weights and all(type(w) is np.ndarray and not w.flags.writeable for w in weights)
    target = tmp_path / "graph.snap"
    snapshot.dump(graph, target)
    data = target.read_bytes()
    size, count = struct.unpack_from("<QQ", data, len(snapshot.MAGIC))
    assert count >= len(weights)
    start = len(snapshot.MAGIC) + 16 + 16 * count
    stream = data[start : start + size]
    assert not [w.shape for w in weights if w.tobytes() in stream]
    back = snapshot.load(target)
    for name, w in graph.initializers.items():
        np.testing.assert_array_equal(back.initializers[name], w)
    # and a session kept of that graph (as one compiled from the model cache is)
    first = td.compile(graph, backends=("numpy",))
    snapshot.wait_for_writes()
    assert cache_state(first) == "saved"
    (kept,) = (caches / "sessions").rglob("*.snap")
    data = kept.read_bytes()
    size, count = struct.unpack_from("<QQ", data, len(snapshot.MAGIC))
    start = len(snapshot.MAGIC) + 16 + 16 * count
    stream = data[start : start + size]
    assert not [w.shape for w in weights if w.tobytes() in stream]


@pytest.mark.parametrize(
    "name",
    [
        "face_detection/face_detection_short_range.tflite",
        "palm_detection/palm_detection_lite.tflite",
        "pose_detection/pose_detection.tflite",
    ],
)
def test_mediapipe_models_read_back_alike(caches, rng, monkeypatch, name):
    """TFLite files (their importer's graphs through the .tdl copy, then the session): the same
    graph, the same outputs as a compile with both caches off."""
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers.models import mediapipe_model

    from tinydl.ir.tdl import graph_json_text

    path = mediapipe_model(name)
    imported = td.load(path)
    snapshot.wait_for_writes()
    cached = td.load(path)
    assert graph_json_text(cached) == graph_json_text(imported)
    first, second = compile_twice(path, backends=("numpy",))
    assert cache_state(second) == "hit"
    (v,) = second.inputs
    x = {v.name: rng.uniform(-1, 1, v.shape).astype(np.float32)}
    monkeypatch.setenv(snapshot.SESSION_ENV, "off")
    monkeypatch.setenv(snapshot.MODEL_ENV, "off")
    want = td.compile(td.load(path), backends=("numpy",)).run(x)
    got = second.run(x)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


# -- cuda plans (the stand-in context: compiled by NVRTC, never launched) -------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    pytest.importorskip("cupy")
    pytest.importorskip("jinja2")
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers.cuda_fake import FakeContext

    import tinydl.backends as backends
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda import CUDABackend

    monkeypatch.setitem(context._contexts, 0, FakeContext())
    backend = CUDABackend()
    backend._reason = ""
    monkeypatch.setitem(backends._instances, "cuda", backend)
    return backend


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_cuda_plan_is_read_back_as_planned(caches, fake_cuda, tmp_path, rng, precision):
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, second, p1, p2 = read_back_plans(path, backends=("cuda",), precision=precision)
    # The first compile ran generic convolution kernels while their own compiled; the session
    # read back finds those compiled and runs them from the start.
    assert p1.generic_steps > 0 and p2.generic_steps == 0
    assert p1.upgrade(wait=True) and p1.upgraded_at is not None
    assert not any(getattr(step, "upgrade", None) for step in p1.steps + p2.steps)
    assert len(p2.steps) == len(p1.steps) > 3
    for a, b in zip(p1.steps, p2.steps, strict=True):
        assert (a.grid, a.block, a.smem, a.label) == (b.grid, b.block, b.smem, b.label)
        assert a.fn.source == b.fn.source and a.fn.name == b.fn.name
        assert len(a.args) == len(b.args)
        for x, y in zip(a.args, b.args, strict=True):
            if isinstance(x, str):
                assert x == y
            else:
                np.testing.assert_array_equal(np.asarray(y), np.asarray(x))

    # values that shared a buffer still share one; none that did not
    def sharing(plan):
        return sorted(
            sorted(r for r, b in plan.buffers.items() if b is buf)
            for buf in {id(b): b for b in plan.buffers.values()}.values()
        )

    assert sharing(p2) == sharing(p1)
    assert p2.views.keys() == p1.views.keys()
    # every constant a step binds is the kernel's uploaded one (uploaded once, shared)
    uploaded = {id(a) for a in second.partitions[0].kernel._constants.values()}
    bound = {id(x) for s in p2.steps for x in s.args if isinstance(x, np.ndarray) and x.ndim}
    assert bound and bound <= uploaded
    # the host copies kept for pickling are gone once the session is kept
    from tinydl.backends.cuda.context import host_copies

    assert not first.partitions[0].kernel._hosts and not second.partitions[0].kernel._hosts
    assert not uploaded & set(host_copies)


def test_a_cuda_session_kept_before_its_own_kernels_compiled_starts_generic_again(
    caches, fake_cuda, tmp_path, rng, monkeypatch
):
    """A session kept by a process that ended before its layers' own kernels were compiled
    reads back onto the generic kernels, queues the own ones again, and switches to them: the
    same steps as the first session's after its switch."""
    import tinydl.backends.cuda.context as context

    ctx = context._contexts[0]
    lost = []
    monkeypatch.setattr(ctx, "compile_later", lambda sources: lost.extend(ctx._later) or [])
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, second, p1, p2 = read_back_plans(path, backends=("cuda",), precision="fp16")
    assert lost and p1.generic_steps == p2.generic_steps > 0  # never compiled: generic again
    assert {s.upgrade[0].source for s in p2.steps if s.upgrade} <= set(ctx._later)
    # (the stand-in's own, which compiles what is queued, now)
    monkeypatch.setattr(ctx, "compile_later", type(ctx).compile_later.__get__(ctx))
    ctx.compile_later([])
    assert p2.upgrade(wait=True) and p1.upgrade(wait=True)
    assert [(s.fn.source, s.grid) for s in p2.steps] == [(s.fn.source, s.grid) for s in p1.steps]
    assert not any(s.upgrade for s in p1.steps + p2.steps)


# -- webgpu (lavapipe here) ------------------------------------------------------------------------


@pytest.fixture
def webgpu():
    from tinydl.backends import get_backend

    backend = get_backend("webgpu")
    if not backend.available():
        pytest.skip(f"webgpu: {backend.unavailable_reason()}")
    return backend


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_webgpu_plan_is_read_back_and_runs_alike(caches, webgpu, tmp_path, rng, precision):
    path = small_cnn(tmp_path / "m.onnx", rng)
    first, second, p1, p2 = read_back_plans(path, backends=("webgpu",), precision=precision)
    assert [s.source for s in p2.steps] == [s.source for s in p1.steps]
    assert all(s.pipeline is not None for s in p2.steps)
    x = feeds(rng)
    np.testing.assert_array_equal(second.run(x)["y"], first.run(x)["y"])
    # the constants' host copies are dropped once the session is kept (and never made again)
    for sess in (first, second):
        kernel = sess.partitions[0].kernel
        assert all(c.host is None for c in kernel._constants.values())
    # read back, the constants share one buffer a usage, each at an aligned offset
    consts = list(second.partitions[0].kernel._constants.values())
    assert len(consts) > 2 and all(c.size is not None and c.offset % 256 == 0 for c in consts)
    assert len({id(c.buffer) for c in consts}) == len({c.usage for c in consts})
    spans = sorted((id(c.buffer), c.offset, c.offset + c.size) for c in consts)
    pairs = zip(spans, spans[1:], strict=False)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in pairs)  # no overlap
    # each holds what the first session uploaded on its own (those a copy can read)
    made = first.partitions[0].kernel._constants
    ctx = consts[0].ctx
    readable = ctx.wgpu.BufferUsage.COPY_SRC
    compared = 0
    for key, c in second.partitions[0].kernel._constants.items():
        if c.usage & readable:
            want = ctx.read(made[key].buffer, c.size)
            np.testing.assert_array_equal(ctx.read(c.buffer, c.size, c.offset), want)
            compared += 1
    assert compared > 1


def test_a_webgpu_plan_read_back_binds_its_intermediates_while_it_waits(
    caches, webgpu, tmp_path, rng, monkeypatch
):
    """While a read-back plan waits for its pipelines, each step that binds none of a run's
    inputs and outputs gets its bind group; the first run makes only the others'."""
    from tinydl.backends.webgpu import program

    path = small_cnn(tmp_path / "m.onnx", rng)
    first, second, _, plan = read_back_plans(path, backends=("webgpu",))
    ends = set(plan.input_names) | set(plan.output_roots)
    touching = [
        s for s in plan.steps if {plan.root(a) for a in s.args if isinstance(a, str)} & ends
    ]
    inner = [s for s in plan.steps if s not in touching]
    assert inner and touching
    assert all(len(s.bind_groups) == 1 for s in inner)
    assert not any(s.bind_groups for s in touching)
    made = []
    real = program._native_bind_group()

    def counting(*args):
        made.append(args)
        return real(*args)

    monkeypatch.setattr(program, "_native_bind_group", lambda: counting)
    x = feeds(rng)
    got = second.run(x)["y"]
    assert len(made) == len(touching)
    np.testing.assert_array_equal(got, first.run(x)["y"])


def test_a_webgpu_session_read_back_compiles_its_shaders_first(
    caches, webgpu, tmp_path, rng, monkeypatch
):
    """A kernel's shaders lead its pickled state: reading the session queues every pipeline
    on the compile threads before the rest (constants, plans) is read."""
    from tinydl.backends.webgpu import context as wctx
    from tinydl.backends.webgpu import program

    path = small_cnn(tmp_path / "m.onnx", rng)
    first = td.compile(td.load(path), backends=("webgpu",))
    snapshot.wait_for_writes()
    (plan,) = first.partitions[0].kernel.plans.values()
    sources = {s.source for s in plan.steps if s.source}
    ctx = wctx.get_context()
    with ctx._pipelines_lock:
        ctx._pipelines.clear()  # as in a new process: nothing compiled yet
    queued = []
    real = program._compile_ahead

    def spy(c, shaders):
        queued.append((c, [s for s, _ in shaders], ctx.stats["buffers"]))
        return real(c, shaders)

    monkeypatch.setattr(program, "_compile_ahead", spy)
    second = td.compile(td.load(path), backends=("webgpu",))
    assert cache_state(second) == "hit"
    ((c, shaders, buffers),) = queued
    assert c is ctx and set(shaders) == sources
    assert buffers < ctx.stats["buffers"]  # queued before the constants were uploaded
    x = feeds(rng)
    np.testing.assert_array_equal(second.run(x)["y"], first.run(x)["y"])
    assert "_ahead" not in second.partitions[0].kernel.__dict__


def test_a_webgpu_session_of_symbolic_shapes_keeps_its_first_plan(caches, webgpu, tmp_path, rng):
    """Inputs of symbolic shape: the plan is made at the first run, and that run keeps the
    session again with it (once); a session read back before any run does the same."""
    path = small_cnn(tmp_path / "m.onnx", rng, static=False)
    x1, x2 = feeds(rng, (1, 3, 12, 16)), feeds(rng, (2, 3, 9, 7))
    first = td.compile(td.load(path), backends=("webgpu",))
    snapshot.wait_for_writes()
    assert cache_state(first) == "saved" and not first.partitions[0].kernel.plans
    second = td.compile(td.load(path), backends=("webgpu",))  # read back, still no plan
    assert cache_state(second) == "hit" and not second.partitions[0].kernel.plans
    want = first.run(x1)["y"]
    assert first.profile()["init"]["cache_later"] == "saved"
    snapshot.wait_for_writes()
    np.testing.assert_array_equal(second.run(x1)["y"], want)
    assert second.profile()["init"]["cache_later"] == "saved"
    snapshot.wait_for_writes()
    third = td.compile(td.load(path), backends=("webgpu",))
    assert cache_state(third) == "hit"
    (plan,) = third.partitions[0].kernel.plans.values()
    assert [i.shape for i in plan.feeds.values()] == [(1, 3, 12, 16)]
    np.testing.assert_array_equal(third.run(x1)["y"], want)
    np.testing.assert_array_equal(third.run(x2)["y"], first.run(x2)["y"])
    assert "cache_later" not in third.profile()["init"]  # it had its plan: not kept again
    for sess in (first, second, third):
        kernel = sess.partitions[0].kernel
        assert all(c.host is None for c in kernel._constants.values())


def test_a_webgpu_render_path_plan_is_not_kept(caches, webgpu, tmp_path, rng):
    path = small_cnn(tmp_path / "m.onnx", rng)
    opts = {"webgpu": {"shaders": "fragment"}}
    sess = td.compile(td.load(path), backends=("webgpu",), backend_options=opts)
    (plan,) = sess.partitions[0].kernel.plans.values()
    if plan.keepable:
        pytest.skip("nothing of this model was drawn here")
    assert cache_state(sess) == "not saved: webgpu kernels are not kept between processes"


def test_a_session_read_back_warns_of_its_fallbacks_again(caches, webgpu, tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fallback",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    path = tmp_path / "f.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    states = []
    for _ in range(2):
        with pytest.warns(UserWarning, match="fall back from 'webgpu'"):
            sess = td.compile(td.load(path), backends=("webgpu", "numpy"))
        states.append(cache_state(sess))
        snapshot.wait_for_writes()
        x = np.array([[1, -1, 2], [0, 3, -4]], np.float32)
        np.testing.assert_array_equal(sess.run({"x": x})["y"], np.array(np.nonzero(x > 0)))
    assert states == ["saved", "hit"]


@pytest.mark.parametrize("raw", ["lots", "-5", "nan"])
def test_a_size_limit_that_is_not_a_number_warns_and_keeps_the_default(monkeypatch, raw):
    monkeypatch.setenv(snapshot.SIZE_ENV, raw)
    with pytest.warns(UserWarning, match=f"{snapshot.SIZE_ENV}='{raw}' is not a number"):
        assert snapshot.size_limit() == snapshot.DEFAULT_MB << 20


def test_a_graph_made_from_a_loaded_one_is_cached_by_value(caches, tmp_path, rng):
    """An app's graph around a loaded model (snapshot.derive_origin): cached when made again
    alike, compiled again when any of its own values differs."""
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    path = small_cnn(tmp_path / "m.onnx", rng)

    def wrapped(scale: float):
        g = td.load(path)
        origin = snapshot.model_key(g)
        graph = validate(
            Graph(
                [Value("raw", "float32", (1, 3, 12, 16))],
                [Value("y", "float32", None)],
                [Node("Mul", ["raw", "k"], ["x"], name="scale"), *g.nodes],
                {**g.initializers, "k": np.array(scale, np.float32)},
            )
        )
        snapshot.derive_origin(graph, g, origin)
        return graph

    x = {"raw": rng.standard_normal((1, 3, 12, 16)).astype(np.float32)}
    states, outs = [], []
    for scale in (2.0, 2.0, 3.0):
        sess = td.compile(wrapped(scale), backends=("numpy",))
        snapshot.wait_for_writes()
        states.append(cache_state(sess))
        outs.append(sess.run(x)["y"])
    assert states == ["saved", "hit", "saved"]
    np.testing.assert_array_equal(outs[1], outs[0])
    plain = td.compile(td.load(path), backends=("numpy",))
    np.testing.assert_allclose(outs[2], plain.run({"x": x["raw"] * 3})["y"], rtol=1e-5)
    # a parent changed before the graph was made from it gives no identity
    g = td.load(path)
    g.initializers["fc"] = np.ones((5, 8), np.float32)
    made = validate(Graph(list(g.inputs), list(g.outputs), list(g.nodes), dict(g.initializers)))
    snapshot.derive_origin(made, g, snapshot.model_key(g))
    assert cache_state(td.compile(made, backends=("numpy",))) == "on, not for this model"

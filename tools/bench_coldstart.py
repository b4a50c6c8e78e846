"""Cold start: how long a new process takes from `import tinydl` to its first result.

    python tools/bench_coldstart.py --backends cuda,webgpu
    python tools/bench_coldstart.py --models resnet18,densenet121 --backends cuda --json cold.json
    python tools/bench_coldstart.py --models resnet18 --precision fp16 --warm-starts 5

Each measurement is a fresh Python process. "cold" gives it an empty tinydl cache folder
(`TINYDL_CACHE_DIR`: compiled CUDA kernels and templates, webgpu shader-path choices) and empty
driver shader caches (NVIDIA's and Mesa's on-disk caches, CUDA's JIT cache, pointed into the
same folder), "warm" runs it again on the caches the cold run left, as a second start of the
same app does: the imported model and the compiled session read back (tinydl/snapshot.py).
"kernels" is a start between the two: the compiled GPU code cached, the model imported and the
session compiled again (TINYDL_MODEL_CACHE=off, TINYDL_SESSION_CACHE=off), as every warm start
was before those caches. Reported per model, backend and start: import, load, compile, first run
(with its host read-back; the random inputs are made between load and compile, outside the timed
phases and the total, as a caller has its inputs: NumPy imports numpy.random, 6-12 ms, on its
first use, and drawing them was counted in the first run before) and the total, in seconds; "own
kernels": on cuda, the time from the start until every step runs its own kernel (a cold start
runs generic convolution kernels first while the layers' own compile: backend option
generic_kernels, `--backend-options '{"generic_kernels": "off"}'` waits for them instead); with
the kernels compiled and the compile threads' summed time: NVRTC's on cuda; on webgpu the
pipelines made, each from a shader module, and the time the threads spent making them (a warm
start makes them again from the driver's shader cache).

Python's own bytecode is there for every start, as in an installed package (pip writes it):
the children keep their .pyc files in one folder for the whole run (PYTHONPYCACHEPREFIX, even
where PYTHONDONTWRITEBYTECODE is set), filled by one start that is not reported
(`--no-bytecode`: every start compiles the modules it imports from source, as a Python that
writes no bytecode does).

Models are ONNX files in `--onnx-dir`; a missing one is built with seeded random weights and
exported by tools/zoo.py (needs PyTorch with torchvision/timm), so the figures are reproducible
on any machine with the same GPU. `tinydl:NAME` runs a shipped model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The set: classifiers from small to deep, plus our own ESPCN.
MODELS = "tinydl:espcn_x3,resnet18,mobilenet_v3_small,efficientnet_b0,ghostnet_100,densenet121"
EXTRA = {  # built by tools/zoo.py's helpers, beside the zoo's own models
    "mobilenet_v3_small": ("torchvision", "mobilenet_v3_small"),
    "densenet121": ("torchvision", "densenet121"),
    "resnet50": ("timm", "resnet50"),
    "ghostnet_100": ("timm", "ghostnet_100"),
}

CHILD = r"""
import cProfile, json, os, sys, time
prof = cProfile.Profile() if os.environ.get("COLDSTART_PROFILE") else None
if prof:
    prof.enable()
t0 = time.perf_counter()
import numpy as np
rng = np.random.default_rng(0)  # (NumPy imports numpy.random on first use: the harness's, not
import tinydl as td            # the start's, so counted with the imports)
t1 = time.perf_counter()
path, backend, threads, precision = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if backend == "cuda":
    from tinydl.backends.cuda import context
    if threads:
        context.COMPILE_THREADS = threads
    if os.environ.get("COLDSTART_PER_PROGRAM"):
        context.MIN_PER_PROGRAM = int(os.environ["COLDSTART_PER_PROGRAM"])
    context.get_context()
elif backend == "webgpu":
    from tinydl.backends.webgpu import context
    if threads:
        context.COMPILE_THREADS = threads
    context.get_context()
t15 = time.perf_counter()
model = td.load(path)
t2 = time.perf_counter()
feeds = {}  # (the inputs a caller has: made here, outside the timed start)
for v in model.inputs:
    shape = [d if isinstance(d, int) else (1 if i == 0 else 224) for i, d in enumerate(v.shape)]
    if path.endswith("espcn_x3.tdl"):
        shape = [1, 1, 360, 640]
    feeds[v.name] = rng.standard_normal(shape).astype(v.dtype)
options = json.loads(os.environ.get("COLDSTART_OPTIONS") or "{}")
t25 = time.perf_counter()
sess = td.compile(model, backends=(backend,), strict=True, precision=precision,
                  backend_options={backend: options} if options else None)
t3 = time.perf_counter()
sess.run(feeds)
t4 = time.perf_counter()
own = t4  # cuda: when every step runs its own kernel (not a generic one)
for part in sess.partitions:
    for plan in getattr(part.kernel, "plans", {}).values():
        if getattr(plan, "generic_steps", 0):
            plan.upgrade(wait=True)
            own = time.perf_counter()
if prof:
    prof.disable()
    prof.dump_stats(os.environ["COLDSTART_PROFILE"])
stats = {}
if backend == "cuda":
    from tinydl.backends.cuda.context import get_context
    stats = dict(get_context().stats)
elif backend == "webgpu":  # pipelines made (a shader module each) and their summed thread time
    from tinydl.backends.webgpu.context import get_context
    st = get_context().stats
    stats = {"compiled": st["pipelines"], "compile_s": st["compile_s"]}
print(json.dumps({"import": t1 - t0, "device": t15 - t1, "load": t2 - t15,
                  "compile": t3 - t25, "first_run": t4 - t3, "total": t4 - t0 - (t25 - t2),
                  "stats": stats, "own_kernels": own - t0 - (t25 - t2),
                  "cache": sess.profile()["init"].get("cache"),
                  "cache_save_s": sess.profile()["init"].get("cache_save_s")}))
"""


def model_path(name: str, onnx_dir: Path) -> str:
    if name.startswith("tinydl:"):
        from tinydl.runtime.loader import shipped_path

        return str(shipped_path(name))
    path = onnx_dir / f"{name}.onnx"
    if path.exists():
        return str(path)
    sys.path.insert(0, str(ROOT / "tools"))
    import zoo

    if name not in EXTRA:
        return str(zoo.export(name, onnx_dir))
    kind, arch = EXTRA[name]
    zoo.MODELS[name] = (zoo._torchvision if kind == "torchvision" else zoo._timm)(arch, 224)
    return str(zoo._export_here(name, onnx_dir))


def start(
    path: str,
    backend: str,
    cache: str,
    threads: int,
    profile: str = "",
    pycache: str = "",
    label: str = "cold",
    precision: str = "fp32",
    options: dict | None = None,
) -> dict:
    """One new process's start; `pycache`: the folder of its .pyc files ("": none written).
    The child runs in this checkout's root, so it imports this checkout's tinydl (`python -c`
    puts its working folder first on the path)."""
    path, cache = os.path.abspath(path), os.path.abspath(cache)
    pycache, profile = (os.path.abspath(p) if p else "" for p in (pycache, profile))
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, TINYDL_CACHE_DIR=cache, PYTHONPATH=os.pathsep.join(paths))
    caches = "off" if label == "kernels" else "on"
    env.update(TINYDL_MODEL_CACHE=caches, TINYDL_SESSION_CACHE=caches)
    if pycache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    # The drivers' own shader caches (NVIDIA's, Mesa's, CUDA's JIT) start empty with ours.
    drivers = {
        "__GL_SHADER_DISK_CACHE_PATH": os.path.join(cache, "nvidia"),
        "MESA_SHADER_CACHE_DIR": os.path.join(cache, "mesa"),
        "CUDA_CACHE_PATH": os.path.join(cache, "cuda-jit"),
    }
    for folder in drivers.values():
        os.makedirs(folder, exist_ok=True)  # NVIDIA's driver writes no cache into a missing one
    env.update(drivers)
    if profile:
        env["COLDSTART_PROFILE"] = profile
    if options:
        env["COLDSTART_OPTIONS"] = json.dumps(options)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, path, backend, str(threads), precision],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _saved(r: dict) -> str:
    """How long keeping the session took the compile (pickling; the file is written on a
    thread)."""
    return "" if r.get("cache_save_s") is None else f" in {r['cache_save_s']:.3f} s"


_primed: set[tuple[str, str]] = set()


def prime_bytecode(path: str, backend: str, pycache: str) -> None:
    """Once per backend and folder: one start (not reported, caches of its own) writes the
    .pyc files of every module a start imports into `pycache`."""
    if (backend, pycache) in _primed:
        return
    _primed.add((backend, pycache))
    with tempfile.TemporaryDirectory() as cache:
        start(path, backend, cache, 0, "", pycache)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default=MODELS, help="comma-separated (default: %(default)s)")
    ap.add_argument("--backends", default="cuda", help="comma-separated (default: cuda)")
    ap.add_argument("--onnx-dir", type=Path, default=Path(".zoo"), help="exported models")
    ap.add_argument(
        "--compile-threads",
        type=int,
        default=0,
        help="cuda: NVRTC threads; webgpu: pipeline compile threads (default: the backend's)",
    )
    ap.add_argument("--profile-dir", type=Path, help="cProfile each start into this folder")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    ap.add_argument(
        "--no-bytecode", action="store_true", help="no .pyc files: modules compile at each start"
    )
    ap.add_argument(
        "--precision", default="fp32", help="the sessions' precision (default: %(default)s)"
    )
    ap.add_argument(
        "--backend-options",
        type=json.loads,
        default={},
        help='JSON: the backend options of every compile, e.g. \'{"generic_kernels": "off"}\'',
    )
    ap.add_argument(
        "--warm-starts",
        type=int,
        default=1,
        help="warm starts per model and backend, each a row, then their median (default: 1)",
    )
    args = ap.parse_args(argv)
    if args.warm_starts < 1:
        ap.error(f"--warm-starts must be at least 1, got {args.warm_starts}")
    args.onnx_dir.mkdir(parents=True, exist_ok=True)
    pycache = tempfile.TemporaryDirectory()
    prime = "" if args.no_bytecode else pycache.name
    rows = []
    print(
        "| model | backend | start | import s | device s | load s | compile s | first run s | "
        "total s | own kernels s | kernels compiled | compile thread s | session cache |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.models.split(","):
        path = model_path(name, args.onnx_dir)
        for backend in args.backends.split(","):
            if prime:
                prime_bytecode(path, backend, prime)
            with tempfile.TemporaryDirectory() as cache:
                warm = ["warm"] + [f"warm {i}" for i in range(2, args.warm_starts + 1)]
                totals = []
                for label in ("cold", "kernels", *warm):
                    prof = ""
                    if args.profile_dir:
                        args.profile_dir.mkdir(parents=True, exist_ok=True)
                        stem = f"{name.replace(':', '_')}-{backend}-{label}.prof"
                        prof = str(args.profile_dir.resolve() / stem)
                    r = start(
                        path, backend, cache, args.compile_threads, prof, prime, label,
                        args.precision, args.backend_options,
                    )  # fmt: skip
                    rows.append({"model": name, "backend": backend, "start": label, **r})
                    if "error" in r:
                        print(f"| {name} | {backend} | {label} | error: {r['error']} |")
                        continue
                    if label.startswith("warm"):
                        totals.append(r["load"] + r["compile"] + r["first_run"])
                    st = r["stats"]
                    made = f"{st['compiled']} | {st['compile_s']:.2f}" if st else " | "
                    print(
                        f"| {name} | {backend} | {label} | {r['import']:.2f} | {r['device']:.2f} | "
                        f"{r['load']:.3f} | "
                        f"{r['compile']:.3f} | {r['first_run']:.3f} | {r['total']:.2f} | "
                        f"{r['own_kernels']:.2f} | {made} | "
                        f"{r.get('cache')}{_saved(r)} |",
                        flush=True,
                    )
                if len(totals) > 1:
                    totals.sort()
                    print(
                        f"| {name} | {backend} | warm, load + compile + first run: median "
                        f"{totals[len(totals) // 2]:.3f} s, fastest {totals[0]:.3f} s of "
                        f"{len(totals)} |"
                    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    pycache.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

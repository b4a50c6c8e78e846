"""A backend's kernel registry (backends/planned.py, KernelRegistry): builders registered by
`@registry.kernel`, imported on the first lookup when the kernels package sets `load` — so a
session read back from the cache, which makes no plan, imports none of them."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tinydl.backends.planned import KernelRegistry


def _lazy(delay: float = 0.0, fail: list | None = None) -> tuple[KernelRegistry, list]:
    reg = KernelRegistry("test")
    calls = []

    def load():
        calls.append(threading.get_ident())
        if fail:
            raise fail.pop()
        time.sleep(delay)
        for op in ("Relu", "Conv"):
            reg.kernel(op)(lambda b: None)
            assert op in reg  # the loading thread may look up what it has registered so far

    reg.load = load
    return reg, calls


def test_builders_are_loaded_on_the_first_lookup_once():
    reg, calls = _lazy()
    assert dict.__len__(reg) == 0 and not calls
    assert reg.get("Conv").op == "Conv"
    assert "Relu" in reg and reg["Relu"].op == "Relu" and sorted(reg) == ["Conv", "Relu"]
    assert len(calls) == 1


def test_threads_looking_up_during_the_load_wait_for_all_of_it():
    reg, calls = _lazy(delay=0.2)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(sorted(reg.keys()))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [["Conv", "Relu"]] * 8 and len(calls) == 1


def test_a_load_that_fails_raises_and_is_tried_again():
    reg, calls = _lazy(fail=[ImportError("no module named x")])
    with pytest.raises(ImportError, match="no module named x"):
        reg.get("Conv")
    assert reg.get("Conv").op == "Conv" and len(calls) == 2


def test_a_kernel_registered_twice_is_refused():
    reg = KernelRegistry("test")
    reg.kernel("Relu")(lambda b: None)
    with pytest.raises(RuntimeError, match="test kernel for Relu registered twice"):
        reg.kernel("Relu")(lambda b: None)


@pytest.mark.parametrize("backend", ["cuda", "webgpu"])
def test_importing_a_backends_program_imports_no_builder_but_what_it_uses(backend):
    code = f"""
import sys
import tinydl.backends.{backend}.program
from tinydl.backends.{backend}.kernels import REGISTRY
before = sorted(m for m in sys.modules if m.startswith("tinydl.backends.{backend}.kernels."))
assert REGISTRY.get("Conv") is not None and "Resize" in REGISTRY
after = sorted(m for m in sys.modules if m.startswith("tinydl.backends.{backend}.kernels."))
print(len(before), len(after), "tinydl.backends.{backend}.kernels.resize" in before)
"""
    root = Path(__file__).resolve().parents[1]  # (`python -c` imports from its working folder)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    missing = [m for m in ("wgpu", "cupy", "jinja2") if f"No module named '{m}'" in done.stderr]
    if done.returncode != 0 and missing:
        pytest.skip(f"the {backend} backend's modules need {missing[0]}, not installed here")
    assert done.returncode == 0, done.stderr
    n_before, n_after, resize_before = done.stdout.split()
    assert resize_before == "False" and int(n_after) > int(n_before) + 5, done.stdout

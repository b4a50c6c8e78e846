"""The built wheel holds every file of the package, not only the Python modules.

An editable install reads the source tree, so a file left out of the wheel (a kernel header, a
template, the shipped weights) only fails for users who install normally. This builds the wheel
the way pip does and compares it with the source tree.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _package_files() -> set[str]:
    files = set()
    for path in (ROOT / "tinydl").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.add(path.relative_to(ROOT).as_posix())
    return files


def test_wheel_holds_every_package_file(tmp_path):
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("tinydl-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = {name for name in zf.namelist() if name.startswith("tinydl/")}
    missing = sorted(_package_files() - shipped)
    assert not missing, f"the wheel leaves out {missing}: add their patterns to package-data"
    # the files the backends read through importlib.resources are among those checked
    assert "tinydl/backends/cuda/kernels/common.cuh" in shipped
    assert any(name.endswith(".wgsl") for name in shipped)
    # ... and every kernel template compiled ahead by the build (tinydl/backends/templating.py)
    from tinydl.backends import templating

    for package in templating.PACKAGES:
        folder = ROOT.joinpath(*package.split("."))
        for path in folder.iterdir():
            if path.suffix in templating.SUFFIXES:
                module = templating.module_name(package, path.name)
                assert f"tinydl/_templates/{module}.py" in shipped, path.name

"""The code passes ruff's lint rules and format (configured in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["tinydl", "tests", "tools", "examples"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff")
    cmd = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*cmd, *args, *PATHS], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("args", [("check",), ("format", "--check")], ids=["check", "format"])
def test_ruff(args):
    pytest.importorskip("ruff", reason="pip install 'tinydl[test]'")
    result = ruff(*args)
    assert result.returncode == 0, result.stdout + result.stderr

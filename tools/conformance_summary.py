"""Run the ONNX conformance suite and print its counts for the README.

    python tools/conformance_summary.py

prints "N passed, M excluded" (and failures, if any), then the exclusions grouped by reason.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "test_onnx_backend.py"


def main() -> int:
    spec = importlib.util.spec_from_file_location("test_onnx_backend", SUITE)
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    pytest = [sys.executable, "-m", "pytest", "-q", "-rs", "--tb=no", "-p", "no:cacheprovider"]
    run = subprocess.run([*pytest, str(SUITE)], cwd=ROOT, capture_output=True, text=True)
    found = re.findall(r"(\d+) (passed|failed|skipped|error)", run.stdout)
    counts = {kind: int(n) for n, kind in found}
    skipped = re.findall(r'^SKIPPED \[(\d+)\] .*matched exclude pattern "(.*)"$', run.stdout, re.M)
    line = f"{counts.get('passed', 0)} passed, {counts.get('skipped', 0)} excluded"
    for kind in ("failed", "error"):
        if counts.get(kind):
            line += f", {counts[kind]} {kind}"
    print(line)
    for n, pattern in sorted(skipped, key=lambda s: -int(s[0])):
        print(f"  {n:>3}  {suite.EXCLUDED[pattern]}")
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

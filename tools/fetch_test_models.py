"""Fetch the MediaPipe 0.10.14 files the tests read, into a cache, without installing mediapipe.

    python tools/fetch_test_models.py         # prints the folder; does nothing when it is there

The tests read MediaPipe's .tflite models (BlazePose and the other 13 under
`mediapipe/modules/`) and run three of them in MediaPipe's own runtime, the reference for its
custom ops. Installing the wheel would leave `pip check` failing (mediapipe pins protobuf < 5
and wants jax and opencv, which the test install does not have), so `pip download --no-deps`
fetches the wheel and it is unpacked into `~/.cache/tinydl/test-models/mediapipe-0.10.14`
(`TINYDL_TEST_MODELS` sets another cache folder); the tests find the models there
(`tests/helpers/models.py: mediapipe_model`, which calls this when the folder is missing) and
import the runtime from there. The wheel itself is deleted once unpacked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MEDIAPIPE = "mediapipe==0.10.14"


def cache_dir() -> Path:
    """The cache folder: $TINYDL_TEST_MODELS, else ~/.cache/tinydl/test-models."""
    env = os.environ.get("TINYDL_TEST_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "tinydl" / "test-models"


def mediapipe_root(fetch: bool = True) -> Path | None:
    """The folder holding the unpacked `mediapipe/` package, fetched first when missing and
    `fetch` is true; None when it is missing and not fetched."""
    root = cache_dir() / MEDIAPIPE.replace("==", "-")
    if (root / "mediapipe" / "modules").is_dir():
        return root
    if not fetch:
        return None
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", MEDIAPIPE, "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("mediapipe-*.whl")
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(unpacked)
        wheel.unlink()
        try:
            unpacked.rename(root)  # atomic: a concurrent fetch (pytest -n) finds it whole
        except OSError:
            if not (root / "mediapipe" / "modules").is_dir():
                raise
    return root


def main() -> int:
    root = mediapipe_root()
    models = sorted((root / "mediapipe" / "modules").rglob("*.tflite"))
    print(f"{len(models)} MediaPipe models in {root / 'mediapipe' / 'modules'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

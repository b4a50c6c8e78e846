"""Detect text in a photo with PP-OCRv4 (from the rapidocr-onnxruntime package) on tinydl.

    python examples/detect_text.py [IMAGE] [--backends cpu] [-o text_map.png]

Runs the detection model through tinydl, checks it against onnxruntime, prints the timing of both
and writes the text-probability map as a PNG beside the input.
"""

import argparse
import time
from pathlib import Path

import numpy as np
from PIL import Image

import tinydl as td


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("image", nargs="?", help="an image file (default: scikit-image's page.png)")
    parser.add_argument(
        "--backends", default="cpu", help="backends in priority order (default: cpu)"
    )
    parser.add_argument(
        "-o", "--output", default="text_map.png", help="where to write the text map"
    )
    args = parser.parse_args()

    import rapidocr_onnxruntime

    model = Path(rapidocr_onnxruntime.__file__).parent / "models" / "ch_PP-OCRv4_det_infer.onnx"
    if args.image:
        img = Image.open(args.image).convert("RGB")
    else:
        import skimage.data

        img = Image.fromarray(skimage.data.page()).convert("RGB")
    w, h = (max(32, round(s / 32) * 32) for s in img.size)  # the model wants multiples of 32
    rgb = np.asarray(img.resize((w, h), Image.BILINEAR), np.float32)
    x = np.ascontiguousarray(((rgb / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None])

    t = time.perf_counter()
    sess = td.compile(td.load(model), backends=args.backends.split(","))
    print(f"loaded + compiled {model.name} in {time.perf_counter() - t:.2f} s: {sess}")
    sess.run({"x": x})
    t = time.perf_counter()
    prob = next(iter(sess.run({"x": x}).values()))
    ours = time.perf_counter() - t

    import onnxruntime as ort

    ref_sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    ref_sess.run(None, {"x": x})
    t = time.perf_counter()
    ref = ref_sess.run(None, {"x": x})[0]
    theirs = time.perf_counter() - t

    err = np.abs(prob - ref).max()
    print(
        f"input {w}x{h}: tinydl {ours * 1e3:.1f} ms, onnxruntime {theirs * 1e3:.1f} ms; "
        f"largest difference in text probability {err:.1e}"
    )
    print(f"{(prob > 0.3).mean():.1%} of pixels are text; map written to {args.output}")
    Image.fromarray((prob[0, 0] * 255).clip(0, 255).astype(np.uint8)).save(args.output)


if __name__ == "__main__":
    main()

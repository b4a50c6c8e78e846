"""Train ESPCN ×2 and ×3 on images bundled with installed packages, and export them as .tdl.

    pip install -e ".[train]"        # PyTorch (a CPU build is enough), scikit-image, scikit-learn
    python tools/train_espcn.py      # writes tinydl/models/espcn_x2.tdl and espcn_x3.tdl

The model is ESPCN as in Shi et al. 2016 on the luma channel: conv 5×5→64, tanh, conv 3×3→32,
tanh, conv 3×3→r², pixel shuffle. Everything is seeded; no file is downloaded.

- Training images: scikit-image's bundled natural photos (see TRAIN). Low-resolution inputs are
  the RGB image shrunk with PIL's bicubic filter and rounded to 8 bits — what a decoded video
  frame looks like — and the target is the high-resolution luma.
- Held-out images, never seen in training: scikit-learn's china.jpg and flower.jpg, and
  scikit-image's chelsea.png.
- PSNR is on luma in studio range (16–235, MATLAB's rgb2ycbcr, as the SR literature reports it),
  r pixels cropped at each border, against PIL's bicubic upscaling of the same low-res luma.
- The exported .tdl is run with tinydl's cpu backend and compared with the PyTorch model: the
  largest difference must stay under 1e-5, or the script fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAIN = [  # scikit-image's data folder: natural photos, gray or colour
    "astronaut.png",
    "coffee.png",
    "rocket.jpg",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "camera.png",
    "moon.png",
    "coins.png",
    "brick.png",
    "grass.png",
    "gravel.png",
    "page.png",
    "ihc.png",
    "retina.jpg",
]
HELD_OUT = [("sklearn", "china.jpg"), ("sklearn", "flower.jpg"), ("skimage", "chelsea.png")]
LUMA = np.array([0.299, 0.587, 0.114])  # BT.601


def package_dir(package: str, sub: str) -> Path:
    """A package's data folder, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed: pip install -e '.[train]'")
    return Path(list(spec.submodule_search_locations)[0]) / sub


def read_rgb(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def luma(rgb_u8: np.ndarray) -> np.ndarray:
    """Full-range BT.601 luma in [0, 1] (what the superres graph feeds ESPCN)."""
    return (rgb_u8.astype(np.float64) / 255.0) @ LUMA


def shrink(rgb_u8: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(high-res image cropped to a multiple of scale, its bicubic ÷scale version as 8 bits)."""
    h, w = (d - d % scale for d in rgb_u8.shape[:2])
    hr = rgb_u8[:h, :w]
    lr = Image.fromarray(hr).resize((w // scale, h // scale), Image.BICUBIC)
    return hr, np.asarray(lr)


def bicubic_up(y: np.ndarray, scale: int) -> np.ndarray:
    img = Image.fromarray(y.astype(np.float32), mode="F")
    return np.asarray(img.resize((y.shape[1] * scale, y.shape[0] * scale), Image.BICUBIC))


def psnr_y(sr: np.ndarray, hr: np.ndarray, scale: int) -> float:
    """PSNR of luma in studio range (16 + 219·Y), border of `scale` pixels cropped."""
    a = 16 + 219 * np.clip(sr, 0, 1)[scale:-scale, scale:-scale]
    b = 16 + 219 * hr[scale:-scale, scale:-scale]
    return 10 * math.log10(255.0**2 / float(np.mean((a - b) ** 2)))


class ESPCN(nn.Module):
    def __init__(self, scale: int):
        super().__init__()
        self.scale = scale
        self.body = nn.Sequential(
            nn.Conv2d(1, 64, 5, padding=2),
            nn.Tanh(),
            nn.Conv2d(64, 32, 3, padding=1),
            nn.Tanh(),
            nn.Conv2d(32, scale * scale, 3, padding=1),
            nn.PixelShuffle(scale),
        )

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.body(y)

    def layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        convs = [m for m in self.body if isinstance(m, nn.Conv2d)]
        return [(c.weight.detach().numpy().copy(), c.bias.detach().numpy().copy()) for c in convs]


def training_pairs(scale: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(low-res luma, high-res luma) per training image, float32 in [0, 1]."""
    folder = package_dir("skimage", "data")
    pairs = []
    for name in TRAIN:
        hr, lr = shrink(read_rgb(folder / name), scale)
        pairs.append((luma(lr).astype(np.float32), luma(hr).astype(np.float32)))
    return pairs


def held_out_images() -> list[tuple[str, np.ndarray]]:
    folders = {
        "sklearn": package_dir("sklearn", "datasets/images"),
        "skimage": package_dir("skimage", "data"),
    }
    return [(name, read_rgb(folders[pkg] / name)) for pkg, name in HELD_OUT]


def sample_batch(pairs, rng, batch: int, patch: int, scale: int):
    """Random aligned patches, weighted by image area, with flips and 90° turns."""
    areas = np.array([lr.size for lr, _ in pairs], np.float64)
    picks = rng.choice(len(pairs), size=batch, p=areas / areas.sum())
    xs, ys = [], []
    for k in picks:
        lr, hr = pairs[k]
        i = rng.integers(0, lr.shape[0] - patch + 1)
        j = rng.integers(0, lr.shape[1] - patch + 1)
        x = lr[i : i + patch, j : j + patch]
        y = hr[i * scale : (i + patch) * scale, j * scale : (j + patch) * scale]
        turns, flip = rng.integers(0, 4), rng.integers(0, 2)
        x, y = np.rot90(x, turns), np.rot90(y, turns)
        if flip:
            x, y = x[:, ::-1], y[:, ::-1]
        xs.append(x)
        ys.append(y)
    return (
        torch.from_numpy(np.stack(xs)[:, None].copy()),
        torch.from_numpy(np.stack(ys)[:, None].copy()),
    )


def train(
    scale: int, steps: int, batch: int, patch: int, lr: float, seed: int
) -> tuple[ESPCN, float]:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    pairs = training_pairs(scale)
    model = ESPCN(scale)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=steps, pct_start=0.05, final_div_factor=300
    )
    loss_fn = nn.MSELoss()
    start = time.perf_counter()
    running = 0.0
    for step in range(1, steps + 1):
        x, y = sample_batch(pairs, rng, batch, patch, scale)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        if step % 500 == 0 or step == steps:
            n = 500 if step % 500 == 0 else step % 500
            print(
                f"  x{scale} step {step:5d}/{steps}  loss {running / n:.6f}  "
                f"lr {sched.get_last_lr()[0]:.2e}  {time.perf_counter() - start:6.1f} s",
                flush=True,
            )
            running = 0.0
    return model.eval(), time.perf_counter() - start


def evaluate(model: ESPCN, scale: int) -> list[dict]:
    rows = []
    for name, rgb in held_out_images():
        hr, lr = shrink(rgb, scale)
        y_lr, y_hr = luma(lr).astype(np.float32), luma(hr)
        with torch.no_grad():
            sr = model(torch.from_numpy(y_lr)[None, None])[0, 0].numpy().astype(np.float64)
        rows.append(
            {
                "image": name,
                "size": f"{hr.shape[1]}x{hr.shape[0]}",
                "bicubic": psnr_y(bicubic_up(y_lr, scale), y_hr, scale),
                "espcn": psnr_y(sr, y_hr, scale),
            }
        )
    return rows


def export(model: ESPCN, scale: int, path: Path, seed: int) -> float:
    """Write the .tdl and return the largest |tinydl - PyTorch| on a held-out image."""
    import tinydl as td
    from tinydl.models import espcn_graph

    graph = espcn_graph(model.layers(), scale)
    graph.metadata.update({"trained_by": "tools/train_espcn.py", "seed": seed})
    td.save(graph, path)
    _, rgb = held_out_images()[0]
    y = luma(shrink(rgb, scale)[1]).astype(np.float32)[None, None]
    got = td.compile(td.load(path), backends=("cpu",)).run({"y": y})["hr"]
    with torch.no_grad():
        ref = model(torch.from_numpy(y)).numpy()
    return float(np.abs(got - ref).max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="2,3", help="comma-separated scales (default: 2,3)")
    parser.add_argument("--steps", type=int, default=8000, help="training steps per scale")
    parser.add_argument("--batch", type=int, default=32, help="patches per step")
    parser.add_argument("--patch", type=int, default=24, help="low-res patch size in pixels")
    parser.add_argument(
        "--lr", type=float, default=3e-3, help="peak learning rate (Adam, one-cycle schedule)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="PyTorch CPU threads (default 1: steady on a busy machine)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "tinydl" / "models",
        help="folder for espcn_x{r}.tdl (default: tinydl/models)",
    )
    parser.add_argument("--report", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    results = []
    for scale in (int(s) for s in args.scales.split(",")):
        print(
            f"training ESPCN x{scale}: {args.steps} steps of {args.batch} patches "
            f"{args.patch}x{args.patch} (low-res), seed {args.seed}",
            flush=True,
        )
        model, seconds = train(scale, args.steps, args.batch, args.patch, args.lr, args.seed)
        rows = evaluate(model, scale)
        diff = export(model, scale, args.out / f"espcn_x{scale}.tdl", args.seed)
        print(
            f"x{scale}: trained in {seconds / 60:.1f} min; exported .tdl vs PyTorch: "
            f"max |diff| {diff:.2e}"
        )
        print(f"  {'image':12s} {'size':>9s} {'bicubic':>8s} {'ESPCN':>8s} {'gain':>6s}")
        for r in rows:
            print(
                f"  {r['image']:12s} {r['size']:>9s} {r['bicubic']:8.2f} {r['espcn']:8.2f} "
                f"{r['espcn'] - r['bicubic']:+6.2f}"
            )
        mean_b = float(np.mean([r["bicubic"] for r in rows]))
        mean_e = float(np.mean([r["espcn"] for r in rows]))
        print(f"  {'mean':12s} {'':>9s} {mean_b:8.2f} {mean_e:8.2f} {mean_e - mean_b:+6.2f}")
        results.append(
            {
                "scale": scale,
                "train_seconds": seconds,
                "export_max_diff": diff,
                "held_out": rows,
                "mean_bicubic": mean_b,
                "mean_espcn": mean_e,
            }
        )
        if diff > 1e-5:
            print(
                f"error: the exported model differs from PyTorch by {diff:.2e} > 1e-5",
                file=sys.stderr,
            )
            return 1
    if args.report:
        args.report.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

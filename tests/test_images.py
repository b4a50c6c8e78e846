"""tinydl.images: image files to arrays, images to tensors and back. Images are random and never
zero (levels 1..255), so a lost channel, a swapped axis or a dropped scale cannot pass."""

import numpy as np
import pytest

from tinydl.errors import InvalidInputError
from tinydl.images import image_to_tensor, read_image, tensor_to_image

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def image(rng, *shape) -> np.ndarray:
    return rng.integers(1, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("shape", [(5, 7, 3), (2, 5, 7, 3), (6, 4, 1), (3, 6, 4, 4)])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_round_trip_uint8(rng, shape, layout, dtype):
    pixels = image(rng, *shape)
    x = image_to_tensor(pixels, layout, dtype=dtype)
    assert x.dtype == dtype and x.ndim == pixels.ndim and x.flags.c_contiguous
    assert x.min() > 0 and x.max() <= 1
    want = np.moveaxis(pixels, -1, -3) if layout == "NCHW" else pixels
    assert x.shape == want.shape
    np.testing.assert_allclose(x, want / 255.0, rtol=1e-3 if dtype == "float16" else 1e-6)
    np.testing.assert_array_equal(tensor_to_image(x, layout), pixels)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_round_trip_with_mean_and_std(rng, layout):
    pixels = image(rng, 2, 9, 11, 3)
    x = image_to_tensor(pixels, layout, MEAN, STD)
    axis = 1 if layout == "NCHW" else 3
    chw = np.moveaxis(pixels, -1, 1) if layout == "NCHW" else pixels
    shape = [1, 1, 1, 1]
    shape[axis] = 3
    want = (chw / 255.0 - np.reshape(MEAN, shape)) / np.reshape(STD, shape)
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(tensor_to_image(x, layout, MEAN, STD), pixels)
    back = tensor_to_image(x, layout, MEAN, STD, dtype=np.float32)
    np.testing.assert_allclose(back, pixels / 255.0, atol=1e-6)


def test_gray_float_and_uint8_tensors(rng):
    gray = image(rng, 8, 6)
    assert image_to_tensor(gray).shape == (1, 8, 6)  # (H, W) is one channel
    floats = gray[..., None] / np.float32(255)
    np.testing.assert_array_equal(image_to_tensor(floats), np.moveaxis(floats, -1, 0))
    raw = image_to_tensor(image(rng, 4, 5, 3), dtype=np.uint8)
    assert raw.dtype == np.uint8 and raw.shape == (3, 4, 5) and raw.min() > 0
    np.testing.assert_array_equal(
        tensor_to_image(image_to_tensor(raw.transpose(1, 2, 0))), raw.transpose(1, 2, 0)
    )


def test_tensor_to_image_clips_and_rounds():
    x = np.array([-0.5, 0.0, 0.5 / 255, 1.5 / 255, 1.0, 2.0], np.float32).reshape(1, 1, 6)
    np.testing.assert_array_equal(tensor_to_image(x)[0, :, 0], [0, 0, 0, 2, 255, 255])


def test_bad_arguments(rng):
    with pytest.raises(InvalidInputError, match="layout"):
        image_to_tensor(image(rng, 2, 2, 3), "CHW")
    with pytest.raises(InvalidInputError, match="mean has 2 values for 3"):
        image_to_tensor(image(rng, 2, 2, 3), mean=(0.5, 0.5))
    with pytest.raises(InvalidInputError, match=r"\(H, W, C\)"):
        image_to_tensor(np.ones((1, 1, 2, 2, 3), np.uint8))
    with pytest.raises(InvalidInputError, match="mean/std need a float"):
        image_to_tensor(image(rng, 2, 2, 3), mean=0.5, dtype=np.uint8)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_read_image_round_trip(tmp_path, rng, channels):
    from PIL import Image

    pixels = image(rng, 6, 9, channels)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode).save(tmp_path / "a.png")
    got = read_image(tmp_path / "a.png", channels)
    assert got.dtype == np.uint8 and got.shape == (6, 9, channels)
    np.testing.assert_array_equal(got, pixels)
    np.testing.assert_array_equal(tensor_to_image(image_to_tensor(got[None]))[0], pixels)
    assert read_image(tmp_path / "a.png", channels, size=(4, 3)).shape == (3, 4, channels)


def test_read_image_errors(tmp_path):
    with pytest.raises(InvalidInputError, match="no such file"):
        read_image(tmp_path / "missing.png")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnope")
    with pytest.raises(InvalidInputError, match="not a readable image"):
        read_image(bad)


def test_high_bit_depth_and_alpha_images(tmp_path):
    """A 16-bit gray PNG keeps its grey (Pillow's own conversion made mid-grey nearly white), a
    float TIFF in 0..1 is not black, and dropping an alpha channel is said, not silent."""
    from PIL import Image

    gray16 = np.full((6, 8), 32768, np.uint16)
    gray16[0, 0] = 65535
    Image.fromarray(gray16).save(tmp_path / "g16.png")
    got = read_image(tmp_path / "g16.png", 3)
    assert got.shape == (6, 8, 3) and got[1, 1].tolist() == [128, 128, 128]
    assert got[0, 0].tolist() == [255, 255, 255]
    Image.fromarray(np.full((4, 5), 0.5, np.float32), "F").save(tmp_path / "f.tiff")
    assert read_image(tmp_path / "f.tiff", 1)[..., 0].tolist() == [[128] * 5] * 4
    rgba = np.zeros((3, 4, 4), np.uint8)
    rgba[..., :3], rgba[..., 3] = 200, 10
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    with pytest.warns(UserWarning, match="alpha channel is dropped"):
        assert read_image(tmp_path / "a.png", 3)[0, 0].tolist() == [200, 200, 200]
    assert read_image(tmp_path / "a.png", 4)[0, 0].tolist() == [200, 200, 200, 10]

"""Frames shown as they come off the GPU: a window (or an offscreen canvas) that draws a webgpu
device tensor — the super-resolution graph's u8 RGB output — with one render pass, no host
round trip.

    from tinydl.apps.view import Viewer
    viewer = Viewer((1920, 1080), title="superres x3", fps=30)   # offscreen=True: headless
    viewer.show(upscaled)        # a (N, H, W, 3) uint8 GPUTensor; paced to `fps`
    viewer.screenshot()          # the last frame shown, (H, W, 4) uint8 (offscreen canvases)
    viewer.close()

The canvas is rendercanvas's (`pip install 'tinydl[view]'`): a glfw window where a display is,
its offscreen canvas otherwise. The frame is drawn by `kernels/view.wgsl` into the canvas's own
texture (rgba8unorm or bgra8unorm, never an sRGB format, so a level is shown as it is). The title
carries the frame rate; `latency` holds, per frame, the seconds from `show` to the frame being
drawn and the GPU idle (what `tinydl superres --view` reports from decode to screen).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, InvalidInputError


class Viewer:
    def __init__(
        self,
        size: tuple[int, int],
        title: str = "tinydl",
        fps: float | None = None,
        offscreen: bool = False,
    ):
        try:
            if offscreen:
                from rendercanvas.offscreen import RenderCanvas
            else:
                from rendercanvas.auto import RenderCanvas
        except ImportError as exc:
            raise BackendUnavailableError(
                f"--view needs rendercanvas ({exc}): pip install 'tinydl[view]'"
            ) from None
        from tinydl.backends.webgpu.context import get_context

        self.ctx = get_context()
        self.title, self.fps, self.offscreen = title, fps, offscreen
        kwargs: dict[str, Any] = {"size": tuple(size), "title": title}
        if offscreen:
            kwargs["pixel_ratio"] = 1
        try:
            self.canvas = RenderCanvas(**kwargs)
        except Exception as exc:  # noqa: BLE001 - no display, no glfw: say what to do
            raise BackendUnavailableError(
                f"no window could be opened ({exc}); run headless with --headless"
            ) from None
        self.present = self.canvas.get_wgpu_context()
        preferred = self.present.get_preferred_format(self.ctx.adapter)
        self.format = preferred.removesuffix("-srgb")
        self.present.configure(device=self.ctx.device, format=self.format)
        self.frames = 0
        self.latency: list[float] = []
        self._next = None
        self._shown: list[float] = []
        self._last = None
        self._pending = None

    def show(self, frame, index: int = 0) -> None:
        """Draw image `index` of a (N, H, W, 3) uint8 webgpu tensor, at the pace of `fps`."""
        from tinydl.backends.webgpu.tensor import GPUTensor

        if not isinstance(frame, GPUTensor):
            raise InvalidInputError(
                f"the viewer draws webgpu device tensors, got {type(frame).__name__}"
            )
        if frame.dtype.name != "uint8" or len(frame.shape) != 4 or frame.shape[3] != 3:
            raise InvalidInputError(
                f"expected a (N, H, W, 3) uint8 frame, got {frame.dtype} {tuple(frame.shape)}"
            )
        t0 = time.perf_counter()
        if self.fps and self._next is not None and t0 < self._next:
            time.sleep(self._next - t0)
        self._pending = (frame, index)
        self.canvas.request_draw(self._draw)
        if self.offscreen:
            self._last = np.asarray(self.canvas.draw())
        else:
            self.canvas.force_draw()
            self.ctx.sync()
        now = time.perf_counter()
        self.latency.append(now - t0)
        self._next = (self._next or now) + 1.0 / self.fps if self.fps else None
        self.frames += 1
        self._shown.append(now)
        recent = [t for t in self._shown if t > now - 1.0]
        self._shown = recent
        if len(recent) > 1 and self.frames % 10 == 0:
            rate = (len(recent) - 1) / (recent[-1] - recent[0])
            self.canvas.set_title(f"{self.title} — {rate:.1f} fps")

    def _draw(self) -> None:
        from tinydl.backends.webgpu.kernels import render
        from tinydl.backends.webgpu.program import _header

        frame, index = self._pending
        _, h, w, _ = frame.shape
        target = self.present.get_current_texture()
        cw, ch = target.size[0], target.size[1]
        label = f"view {w}x{h}"
        source = render(
            "view.wgsl", header=_header(self.ctx.has_f16), label=label,
            W=w, H=h, CW=cw, CH=ch, n=index,
        )  # fmt: skip
        pipeline = self.ctx.render_pipeline(source, [self.format], label)
        bind_group = self.ctx.device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[{"binding": 0, "resource": {"buffer": frame.storage.buffer}}],
        )
        with self.ctx.queue_lock:
            encoder = self.ctx.device.create_command_encoder()
            rp = encoder.begin_render_pass(
                color_attachments=[
                    {
                        "view": target.create_view(),
                        "load_op": "clear",
                        "store_op": "store",
                        "clear_value": (0.0, 0.0, 0.0, 1.0),
                    }
                ]
            )
            rp.set_pipeline(pipeline)
            rp.set_bind_group(0, bind_group)
            rp.draw(3, 1, 0, 0)
            rp.end()
            self.ctx.queue.submit([encoder.finish()])

    def screenshot(self) -> np.ndarray:
        """The last frame shown, (H, W, 4) uint8 RGBA (offscreen canvases only)."""
        if self._last is None:
            raise InvalidInputError("no frame shown yet, or the canvas is a window")
        image = self._last
        if self.format.startswith("bgra"):
            image = image[..., [2, 1, 0, 3]]
        return image

    def closed(self) -> bool:
        return bool(self.canvas.get_closed())

    def close(self) -> None:
        self.canvas.close()

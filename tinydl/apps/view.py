"""Frames shown as they come off the GPU: a window (or an offscreen canvas) that draws a webgpu
device tensor — the super-resolution graph's u8 RGB output — with one render pass, no host
round trip.

    from tinydl.apps.view import Viewer
    viewer = Viewer((1920, 1080), title="superres x3", fps=30)   # offscreen=True: headless
    viewer.show(upscaled)        # a (N, H, W, 3) uint8 GPUTensor; paced to `fps`
    viewer.screenshot()          # the last frame shown, (H, W, 4) uint8 (windows: keep_last=True)
    viewer.close()

The canvas is rendercanvas's (`pip install 'tinydl[view]'`): a glfw window where a display is,
its offscreen canvas otherwise. The frame is drawn by `kernels/view.wgsl` into the canvas's own
texture (rgba8unorm or bgra8unorm, never an sRGB format, so a level is shown as it is). The frame
rate shown over the last second is drawn over the frame's top left corner by the same pass (a
3x5 pixel font; `overlay=False` leaves the frame as it is) and put in the title. `latency` holds,
per frame, the seconds from `since` (given to `show`; by default the call) to the frame being
drawn and the GPU idle; `pace()` waits for the next frame's time, so a caller that upscales after
it measures decode -> screen without the wait (what `tinydl superres --view` reports).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tinydl.errors import BackendUnavailableError, InvalidInputError

# The overlay's font: each glyph 5 rows of 3 pixels, top to bottom ("#" lit).
GLYPHS = {
    " ": ("...", "...", "...", "...", "..."),
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"),
    "3": ("###", "..#", "###", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", "..#", "..#", "..#"),
    "8": ("###", "#.#", "###", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "###"),
    ".": ("...", "...", "...", "...", ".#."),
    "f": (".##", ".#.", "###", ".#.", ".#."),
    "p": ("###", "#.#", "###", "#..", "#.."),
    "s": (".##", "#..", ".#.", "..#", "##."),
}
CHARS = "".join(GLYPHS)
TEXT_WORDS = 4  # vec4<u32>s of the overlay's uniform: the length and 15 glyphs


def glyph_bits(rows) -> int:
    lit = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "#"]
    return sum(1 << (3 * r + c) for r, c in lit)


FONT = [glyph_bits(GLYPHS[c]) for c in CHARS]  # the shader's glyph table, in CHARS order


def overlay_geometry(canvas_height: int) -> tuple[int, int, int]:
    """(magnification, left, top) of the overlay text, in canvas and font pixels."""
    return max(2, round(canvas_height / 200)), 2, 2


def read_overlay(image: np.ndarray) -> str:
    """The text the overlay drew into `image` (H, W, 3+): the inverse of the shader, for tests."""
    k, x0, y0 = overlay_geometry(image.shape[0])
    lit = image[..., :3].min(-1) == 255
    text = []
    for g in range(4 * TEXT_WORDS - 1):
        rows = []
        for r in range(5):
            y = (y0 + r) * k + k // 2
            row = ""
            for c in range(3):
                x = (x0 + 4 * g + c) * k + k // 2
                row += "#" if x < image.shape[1] and lit[y, x] else "."
            rows.append(row)
        match = [ch for ch, glyph in GLYPHS.items() if tuple(rows) == glyph]
        if not match:
            break
        text.append(match[0])
    return "".join(text).rstrip()


class Viewer:
    def __init__(
        self,
        size: tuple[int, int],
        title: str = "tinydl",
        fps: float | None = None,
        offscreen: bool = False,
        overlay: bool = True,
        keep_last: bool = False,
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
        self.title, self.fps, self.offscreen, self.overlay = title, fps, offscreen, overlay
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
        import wgpu

        usage = wgpu.TextureUsage.RENDER_ATTACHMENT
        # A window's frame is copied into a buffer as it is drawn when a screenshot may be asked
        # for (the surface's texture is gone once presented).
        self._copy = None
        if keep_last and not offscreen:
            usage |= wgpu.TextureUsage.COPY_SRC
        self.present.configure(device=self.ctx.device, format=self.format, usage=usage)
        self.keep_last = keep_last
        self.frames = 0
        self.rate: float | None = None  # frames/s shown over the last second
        self.latency: list[float] = []
        self._next = None
        self._shown: list[float] = []
        self._last = None
        self._pending = None
        self._text = None
        self._pipelines: dict[tuple, Any] = {}  # by frame size, canvas size and image index
        if overlay:
            self._text = self.ctx.device.create_buffer(
                size=16 * TEXT_WORDS, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
            )
            self._set_text("")

    def _set_text(self, text: str) -> None:
        codes = [len(text)] + [CHARS.index(ch) for ch in text]
        codes += [0] * (4 * TEXT_WORDS - len(codes))
        self.ctx.queue.write_buffer(self._text, 0, np.asarray(codes, np.uint32).tobytes())

    def pace(self) -> None:
        """Wait until the next frame is due (at `fps`; no wait before the first)."""
        now = time.perf_counter()
        if self.fps and self._next is not None and now < self._next:
            time.sleep(self._next - now)

    def show(self, frame, index: int = 0, since: float | None = None) -> None:
        """Draw image `index` of a (N, H, W, 3) uint8 webgpu tensor at the pace of `fps`;
        the frame's latency is counted from `since` (a perf_counter time) or from the call."""
        from tinydl.backends.webgpu.tensor import GPUTensor

        if not isinstance(frame, GPUTensor):
            raise InvalidInputError(
                f"the viewer draws webgpu device tensors, got {type(frame).__name__}"
            )
        if frame.dtype.name != "uint8" or len(frame.shape) != 4 or frame.shape[3] != 3:
            raise InvalidInputError(
                f"expected a (N, H, W, 3) uint8 frame, got {frame.dtype} {tuple(frame.shape)}"
            )
        if since is None:
            self.pace()
            since = time.perf_counter()
        self._pending = (frame, index)
        self.canvas.request_draw(self._draw)
        if self.offscreen:
            self._last = np.asarray(self.canvas.draw())
        else:
            # The window's events (a resize, the close button) are taken before each frame: the
            # frames are pushed here rather than pulled by rendercanvas's event loop.
            self.canvas._process_events()
            self.canvas.force_draw()
            self.ctx.sync()
        now = time.perf_counter()
        self.latency.append(now - since)
        self._next = (self._next or now) + 1.0 / self.fps if self.fps else None
        self.frames += 1
        self._shown.append(now)
        recent = [t for t in self._shown if t > now - 1.0]
        self._shown = recent
        if len(recent) > 1 and self.frames % 10 == 0:
            self.rate = (len(recent) - 1) / (recent[-1] - recent[0])
            self.canvas.set_title(f"{self.title} — {self.rate:.1f} fps")
            if self._text is not None:
                self._set_text(f"{self.rate:.1f} fps")

    def _draw(self) -> None:
        from tinydl.backends.webgpu.program import kernel_source

        frame, index = self._pending
        _, h, w, _ = frame.shape
        target = self.present.get_current_texture()
        cw, ch = target.size[0], target.size[1]
        geometry = (w, h, cw, ch, index)
        pipeline = self._pipelines.get(geometry)
        if pipeline is None:  # made once per frame and canvas size, not per frame
            label = f"view {w}x{h}"
            k, x0, y0 = overlay_geometry(ch)
            source = kernel_source(
                "view.wgsl", self.ctx.has_f16, label=label,
                W=w, H=h, CW=cw, CH=ch, n=index, overlay=self.overlay, K=k, X0=x0, Y0=y0,
                TEXT=TEXT_WORDS, font=FONT,
            )  # fmt: skip
            pipeline = self._pipelines[geometry] = self.ctx.render_pipeline(
                source, [self.format], label
            )
        held = frame.storage
        resource = {"buffer": held.buffer, "offset": held.offset}
        if held.size is not None:  # (a constant's place in a shared buffer)
            resource["size"] = held.size
        entries = [{"binding": 0, "resource": resource}]
        if self._text is not None:
            entries.append({"binding": 1, "resource": {"buffer": self._text}})
        bind_group = self.ctx.device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0), entries=entries
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
            if self.keep_last and not self.offscreen:
                self._copy_out(encoder, target)
            self.ctx.queue.submit([encoder.finish()])

    def _copy_out(self, encoder, target) -> None:
        import wgpu

        cw, ch = target.size[0], target.size[1]
        row = -(-4 * cw // 256) * 256
        if self._copy is None or self._copy[1:] != (cw, ch):
            buffer = self.ctx.device.create_buffer(
                size=row * ch, usage=wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.MAP_READ
            )
            self._copy = (buffer, cw, ch)
        encoder.copy_texture_to_buffer(
            {"texture": target},
            {"buffer": self._copy[0], "bytes_per_row": row, "rows_per_image": ch},
            (cw, ch, 1),
        )

    def screenshot(self) -> np.ndarray:
        """The last frame shown, (H, W, 4) uint8 RGBA: the offscreen canvas's, or the window's
        (a Viewer made with keep_last=True)."""
        if self._copy is not None:
            buffer, cw, ch = self._copy
            with self.ctx.queue_lock:
                buffer.map_sync("READ")
                data = np.frombuffer(buffer.read_mapped(), np.uint8).copy()
                buffer.unmap()
            self._last = data.reshape(ch, -1)[:, : 4 * cw].reshape(ch, cw, 4)
        if self._last is None:
            what = "a window made without keep_last" if not self.offscreen else "no frame shown"
            raise InvalidInputError(f"no screenshot: {what}")
        image = self._last
        if self.format.startswith("bgra"):
            image = image[..., [2, 1, 0, 3]]
        return image

    def closed(self) -> bool:
        return bool(self.canvas.get_closed())

    def close(self) -> None:
        self.canvas.close()

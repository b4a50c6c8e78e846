"""Collect: keep every packet that arrives, in a list — the sink of tests and notebooks.

Inputs:  in (any type)
Outputs: none (a sink)
Options: none

Runs on the thread executor only (the list must live in the app's process).

Example:
    out = Collect()
    app.add("out", out)
    app.connect("resize", "out")
    app.run()
    frames = out.payloads()
"""

from __future__ import annotations

import threading
from typing import Any

from tinydl.pipeline.component import Component


class Collect(Component):
    """Every packet received, in arrival order (`packets`, `payloads()`)."""

    inputs = {"in": Any}
    outputs: dict = {}
    executors = ("thread",)

    def __init__(self):
        self.packets: list = []
        self.lock = threading.Lock()  # expanded instances share nothing, but readers may poll

    def process(self, ctx, inputs):
        with self.lock:
            self.packets.append(inputs["in"])
        return None

    def payloads(self) -> list[Any]:
        with self.lock:
            return [p.payload for p in self.packets]

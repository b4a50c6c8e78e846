"""Pipeline components shared by the pipeline test modules. They live in a module of their own
(not a test file) so that worker processes, which unpickle them, import nothing else."""

import time
from typing import Any

import numpy as np

from tinydl.pipeline import Component, Frame, Tensor


class Count(Component):
    """A source of Tensor([i]) for i in 0..n-1."""

    inputs: dict = {}
    outputs = {"out": Tensor}

    def __init__(self, n: int = 20):
        self.n = n

    def open(self, ctx):
        self.i = 0

    def process(self, ctx, inputs):
        if self.i >= self.n:
            return None
        self.i += 1
        return {"out": Tensor(np.array([self.i - 1]))}


class Pace(Component):
    """Passes packets on after `delay` seconds (a stage with real work to interrupt)."""

    inputs = {"in": Any}
    outputs = {"out": Any}

    def __init__(self, delay: float = 0.01):
        self.delay = delay

    def process(self, ctx, inputs):
        time.sleep(self.delay)
        return {"out": inputs["in"]}


class PoolFrames(Component):
    """A source of n frames made with ctx.empty (a frame pool where the app has workers), each
    filled with its index % 251."""

    inputs: dict = {}
    outputs = {"out": Frame}

    def __init__(self, n: int = 20, height: int = 360, width: int = 640):
        self.n, self.shape = n, (height, width, 3)

    def open(self, ctx):
        self.i = 0

    def process(self, ctx, inputs):
        if self.i >= self.n:
            return None
        image = ctx.empty(self.shape, np.uint8)
        image[...] = self.i % 251
        self.i += 1
        return {"out": Frame(image)}


class CheckFrames(Component):
    """Checks, `delay` seconds after a frame arrives, that it still holds its index % 251 (a
    block reused too early would not); passes it on, or raises."""

    inputs = {"in": Frame}
    outputs = {"out": Frame}

    def __init__(self, delay: float = 0.0):
        self.delay = delay

    def process(self, ctx, inputs):
        packet = inputs["in"]
        time.sleep(self.delay)
        image = packet.payload.image
        want = packet.request_id % 251
        if image.min() != want or image.max() != want:
            raise ValueError(f"frame {packet.request_id} changed under its reader")
        return {"out": packet.payload}

"""Pipeline components shared by the pipeline test modules. They live in a module of their own
(not a test file) so that worker processes, which unpickle them, import nothing else."""

import time
from typing import Any

import numpy as np

from tinydl.pipeline import Component, Tensor


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

"""Pipeline components shared by the pipeline test modules. They live in a module of their own
(not a test file) so that worker processes, which unpickle them, import nothing else."""

import time

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


class SlowToStart(Component):
    """Passes Tensors through; a worker takes `delay` seconds to unpickle it (a slow start, as
    on a busy machine)."""

    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def __init__(self, delay: float):
        self.delay = delay

    def __setstate__(self, state):
        time.sleep(state["delay"])
        self.__dict__.update(state)

    def process(self, ctx, inputs):
        return {"out": inputs["in"].payload}

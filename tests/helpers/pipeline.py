"""Pipeline components shared by the pipeline test modules. They live in a module of their own
(not a test file) so that worker processes, which unpickle them, import nothing else."""

import threading
import time
from typing import Any

import numpy as np

from tinydl.pipeline import Batch, Component, Tensor


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


class Sleep(Component):
    """A stage that takes `ms` per frame, sleeping (as a thread waiting on I/O does)."""

    inputs = {"in": Any}
    outputs = {"out": Any}

    def __init__(self, ms: float = 10.0):
        self.ms = ms

    def process(self, ctx, inputs):
        time.sleep(self.ms / 1e3)
        return {"out": inputs["in"]}


class FakeGPU(Component):
    """A GPU-like stage: a call on a batch of k frames holds one process-wide "device" for
    a_ms + b_ms * k (sleeping), so instances take turns as kernels on one GPU do."""

    inputs = {"in": Any}
    outputs = {"out": Any}
    resource = "gpu"
    device = threading.Lock()

    def __init__(self, a_ms: float = 4.0, b_ms: float = 1.0):
        self.a_ms, self.b_ms = a_ms, b_ms

    def wait_for_resource(self, ctx):
        self.device.acquire()

    def release_resource(self, ctx):
        self.device.release()

    def process(self, ctx, inputs):
        payload = inputs["in"].payload
        k = len(payload) if isinstance(payload, Batch) else 1
        time.sleep((self.a_ms + self.b_ms * k) / 1e3)
        return {"out": payload}


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

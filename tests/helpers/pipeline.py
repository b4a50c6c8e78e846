"""Pipeline components shared by the pipeline test modules. They live in a module of their own
(not a test file) so that worker processes, which unpickle them, import nothing else."""

import threading
import time
from typing import Any

import numpy as np

from tinydl.pipeline import Batch, Component, Frame, Later, Tensor


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


class StackOnGPU(Component):
    """A GPU stage for the process executor: stacks a batch of frames on `backend` with
    `stack_to_device` (asynchronous copies from page-locked memory), sums each frame there, and
    answers per frame (request id, device sum, whether its memory was page-locked here)."""

    inputs = {"in": Batch[Frame]}
    outputs = {"out": Batch[Tensor]}
    resource = "gpu"

    def __init__(self, backends: str = "cuda"):
        self.backends = backends

    def process(self, ctx, inputs):
        from tinydl.backends import get_backend

        backend = get_backend(self.backends)
        items = inputs["in"].payload.items
        images = [p.payload.image[None] for p in items]
        locked = [backend._context().locked(im.ctypes.data, im.nbytes) for im in images]
        stacked = backend.stack_to_device(images)
        sums = stacked.reshape(len(images), -1).sum(axis=1, dtype="float64")
        out = [
            p.derive(Tensor(np.array([p.request_id, float(s), lk])))
            for p, s, lk in zip(items, backend.to_host(sums), locked, strict=True)
        ]
        return {"out": Batch(out)}


def batched_app(name: str, source: Component, stage: Component, batch: int, **stage_options):
    """An app: source -> Batch(batch) -> stage -> Unbatch -> Collect; returns (app, collect)."""
    from tinydl.pipeline import App, components

    app = App(name)
    app.add("cam", source, instances=stage_options.pop("sources", 1))
    app.add("batch", components.Batch(max_size=batch, max_wait=0.01))
    app.add("stage", stage, **stage_options)
    app.add("unbatch", components.Unbatch())
    out = components.Collect()
    app.add("out", out)
    for a, b in [("cam", "batch"), ("batch", "stage"), ("stage", "unbatch"), ("unbatch", "out")]:
        app.connect(a, b)
    return app, out


class AsyncDouble(Component):
    """Doubles Tensors on a stand-in "device": a thread of its own that takes `ms` per call,
    in call order, as a GPU stream does. `process` only enqueues and returns a Later that
    waits for the device; `outstanding` is the most calls enqueued and not yet finished.
    `fail_at`: the call whose finish raises."""

    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def __init__(self, ms: float = 3.0, fail_at: int | None = None):
        self.ms, self.fail_at = ms, fail_at

    def open(self, ctx):
        import queue

        self.work: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.now = 0
        self.outstanding = 0
        self.calls = 0
        threading.Thread(target=self._device, daemon=True).start()

    def _device(self):
        while True:
            job = self.work.get()
            if job is None:
                return
            time.sleep(self.ms / 1e3)
            job.set()

    def process(self, ctx, inputs):
        x = inputs["in"].payload.data
        done = threading.Event()
        self.work.put(done)
        call = self.calls
        self.calls += 1
        with self.lock:
            self.now += 1
            self.outstanding = max(self.outstanding, self.now)

        def finish():
            done.wait()
            with self.lock:
                self.now -= 1
            if call == self.fail_at:
                raise ValueError(f"call {call} failed on the device")
            return {"out": Tensor(x * 2)}

        return Later(finish)

    def close(self, ctx):
        self.work.put(None)


class Seen(Component):
    """A sink that stays in the app: keeps (flow, request, value) of what it got, and its own
    instance index and GPU."""

    executors = ("thread",)
    outputs: dict = {}
    uses_ctx_gpu = True

    def open(self, ctx):
        self.got: list[tuple[int, int, int]] = []
        self.where = (ctx.instance, ctx.gpu)

    def process(self, ctx, inputs):
        p = inputs["in"]
        self.got.append((p.flow_id, p.request_id, int(p.payload.data[0])))


class Stamp(Component):
    """Tensor(x) -> Tensor(x + 1000 * instance index + 100 * the index of its GPU, cuda:N);
    raises on the value `fail_on`."""

    inputs = {"in": Tensor}
    outputs = {"out": Tensor}
    uses_ctx_gpu = True

    def __init__(self, fail_on: int | None = None):
        self.fail_on = fail_on

    def process(self, ctx, inputs):
        x = inputs["in"].payload.data
        if self.fail_on is not None and int(x[0]) == self.fail_on:
            raise ValueError(f"refused {self.fail_on}")
        gpu = int(ctx.gpu.split(":")[1]) if ctx.gpu else 0
        return {"out": Tensor(x + 1000 * ctx.instance + 100 * gpu)}


class ExitIn(Component):
    """Passes Tensors on; instance `instance` ends its whole process at its first call."""

    inputs = {"in": Tensor}
    outputs = {"out": Tensor}

    def __init__(self, instance: int = 1):
        self.instance = instance

    def process(self, ctx, inputs):
        if ctx.instance == self.instance:
            import os

            os._exit(3)
        return {"out": inputs["in"].payload}


class Ticks(Count):
    """A source that paces itself with `ctx.request_tick`: n frames, one every gap_s, each
    holding the monotonic time it was made."""

    def __init__(self, n: int = 8, gap_s: float = 0.05):
        super().__init__(n)
        self.gap_s = gap_s

    def process(self, ctx, inputs):
        if super().process(ctx, inputs) is None:
            return None
        ctx.request_tick(self.gap_s)
        return {"out": Tensor(np.array([time.monotonic_ns()]))}


class Scale(Component):
    """Multiplies a Tensor or a Frame's pixels by `k` into a new array (a plain NumPy array,
    or one from ctx.empty with `pooled`); frames whose request id is in `skip` give nothing,
    in `exit_on` end the process, in `hang_on` hang for 30 s."""

    inputs = {"in": Any}
    outputs = {"out": Any}

    def __init__(self, k: int = 2, pooled: bool = False, skip=(), exit_on=(), hang_on=()):
        self.k, self.pooled, self.skip = k, pooled, set(skip)
        self.exit_on, self.hang_on = set(exit_on), set(hang_on)

    def process(self, ctx, inputs):
        packet = inputs["in"]
        if packet.request_id in self.skip:
            return None
        if packet.request_id in self.exit_on:
            import os

            os._exit(5)
        if packet.request_id in self.hang_on:
            time.sleep(30)
        payload = packet.payload
        data = payload.image if isinstance(payload, Frame) else payload.data
        out = ctx.empty(data.shape, data.dtype) if self.pooled else np.empty_like(data)
        np.multiply(data, self.k, out=out)
        return {"out": Frame(out) if isinstance(payload, Frame) else Tensor(out)}


class PickledOnce:
    """Pickles once; the second time raises (an output the app cannot be sent after it went
    to the next worker)."""

    count = 0

    def __reduce__(self):
        PickledOnce.count += 1
        if PickledOnce.count % 2 == 0:
            raise TypeError("pickled twice")
        return (PickledOnce, ())


class OncePickled(Component):
    """Passes Tensors on; frame `bad` goes on as a PickledOnce."""

    inputs = {"in": Any}
    outputs = {"out": Any}

    def __init__(self, bad: int):
        self.bad = bad

    def process(self, ctx, inputs):
        packet = inputs["in"]
        return {"out": PickledOnce() if packet.request_id == self.bad else packet.payload}


class SlowPickle:
    """An object that takes `ms` to pickle."""

    def __init__(self, ms: float):
        self.ms = ms

    def __reduce__(self):
        time.sleep(self.ms / 1e3)
        return (SlowPickle, (self.ms,))


class SlowSide(Component):
    """Passes its input on at once on `out`, and on `side` an object slow to pickle: its
    answer to the app comes `ms` after its output went on (on a direct edge)."""

    inputs = {"in": Any}
    outputs = {"out": Any, "side": Any}

    def __init__(self, ms: float = 30.0):
        self.ms = ms

    def process(self, ctx, inputs):
        return {"out": inputs["in"].payload, "side": SlowPickle(self.ms)}

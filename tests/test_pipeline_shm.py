"""Frame pools: frames made with ctx.empty cross worker processes by reference (no pixel is
copied or pickled), and a block is reused only once no process can still read it."""

import os
import pickle

import numpy as np
from helpers.pipeline import CheckFrames, PoolFrames

from tinydl.backends.base import Backend
from tinydl.pipeline import App, Frame, Packet
from tinydl.pipeline.components import Collect
from tinydl.pipeline.process import FRAME, Arena, dumps, encode, loads
from tinydl.pipeline.shm import Pool, Receiver, reference

TIMEOUT = 60


def test_a_pool_array_pickles_as_a_reference():
    pool, arena = Pool("tinydl_test_", lends=False), Arena()
    try:
        image = pool.empty((1080, 1920, 3))
        image[...] = 7
        message = dumps({"in": Packet(Frame(image[::2, 100:]), 1, 2)}, arena)
        assert len(pickle.dumps(message)) < 1000 and arena.shm is None  # no pixels, no arena
        back = loads(message, {}, False, Receiver(counts=False))["in"].payload.image
        assert back.shape == (540, 1820, 3) and (back == 7).all()
        image[0, 100] = 9  # the same memory, not a copy
        assert back[0, 0, 0] == 9
        assert reference(np.zeros(4), None) is None  # a plain array is pickled as usual
    finally:
        pool.close()
        arena.release()


def test_a_frame_packet_goes_as_a_flat_message_and_anything_else_as_before():
    pool, arena = Pool("tinydl_test_", lends=False), Arena()
    attached: dict = {}
    try:
        image = pool.empty((720, 1280, 3))
        image[...] = 3
        sent = Packet(Frame(image[:, 10:], "bgr", 0.25), 4, 5, 6, "app")
        message = encode({"in": sent}, arena)
        assert message[0] == FRAME and len(pickle.dumps(message)) < 300
        for copy in (False, True):  # a component that holds its inputs gets a copy
            got = loads(pickle.loads(pickle.dumps(message)), {}, copy, Receiver(counts=False))
            packet = got["in"]
            assert (packet.flow_id, packet.request_id, packet.timestamp, packet.app_id) == (
                4, 5, 6, "app",
            )  # fmt: skip
            frame = packet.payload
            assert (frame.format, frame.pts, frame.image.shape) == ("bgr", 0.25, (720, 1270, 3))
            image[0, 10, 0] = 8
            assert frame.image[0, 0, 0] == (3 if copy else 8)
            image[0, 10, 0] = 3
        # Not a lone frame packet, or pixels in no block and no pool to put them in: dumps.
        small = Packet(Frame(np.ones((4, 4, 3), np.uint8)))
        for inputs in ({"in": small}, {"a": sent, "b": sent}, {"in": Packet(np.arange(3))}):
            message = encode(inputs, arena)
            assert message[0] != FRAME
            back = loads(message, attached, True, Receiver(counts=False))
            assert back.keys() == inputs.keys()
    finally:
        for shm in attached.values():
            shm.close()
        pool.close()
        arena.release()


def test_frames_cross_processes_by_reference_and_blocks_are_not_reused_early():
    app = App("pool")
    app.add("cam", PoolFrames(n=40), executor="process")
    # A slow checker in a second worker: frames pile up in front of it, so blocks are lent
    # while the source goes on making frames; any early reuse would change a frame in flight.
    app.add("check", CheckFrames(delay=0.01), executor="process")
    app.add("again", CheckFrames(), executor="thread")
    out = Collect()
    app.add("out", out)
    app.connect("cam", "check")
    app.connect("check", "again")
    app.connect("again", "out")
    report = app.run(timeout=TIMEOUT)
    assert report.balanced and report.frames_out == 40, report.accounting()
    images = [p.payload.image for p in out.packets]
    assert [int(im[0, 0, 0]) for im in images] == list(range(40))
    # What reached the app is a view of the source worker's shared memory, not a copy.
    assert all(reference(im, None) is not None for im in images)


class _HostMemoryGPU(Backend):
    """A GPU backend's stand-in whose empty_host arrays are recorded (page-locked on cuda)."""

    name = "webgpu"
    made: list[int] = []

    def available(self):
        return True

    def supports(self, node, graph):
        raise NotImplementedError

    def compile(self, subgraph, options):
        raise NotImplementedError

    def empty_host(self, shape, dtype="uint8"):
        arr = np.empty(shape, dtype)
        self.made.append(arr.ctypes.data)
        return arr


class _Drives(CheckFrames):
    backends = "webgpu"  # what the runtime reads to know the GPU backend a component drives


def test_thread_sources_make_frames_in_the_gpu_backends_host_memory(monkeypatch):
    """A thread app driving a GPU backend gets ctx.empty frames from that backend's
    empty_host (page-locked for cuda); an app driving none keeps plain NumPy memory."""
    import tinydl.backends as backends

    monkeypatch.setattr(backends, "get_backend", lambda name: _HostMemoryGPU())
    made = _HostMemoryGPU.made
    for drive, want in [(_Drives, 8), (CheckFrames, 0)]:
        made.clear()
        app = App("host-memory")
        app.add("cam", PoolFrames(n=8, height=24, width=32))
        app.add("gpu", drive())
        out = Collect()
        app.add("out", out)
        app.connect("cam", "gpu")
        app.connect("gpu", "out")
        report = app.run(timeout=TIMEOUT)
        assert report.balanced and report.frames_out == 8, report.accounting()
        assert len(made) == want
        if want:
            assert [p.payload.image.ctypes.data for p in out.packets] == made


def test_a_receiver_locks_each_block_once_and_unlocks_it_before_closing():
    """A worker that drives a GPU page-locks each block as it first maps it (Receiver.on_map,
    the backend's lock_host) and undoes it before the block is closed."""
    from multiprocessing.shared_memory import SharedMemory

    block = SharedMemory(name=f"tinydl_test_lock_{os.getpid()}", create=True, size=1 << 20)
    locked, undone = [], []

    def lock(whole):
        locked.append((whole.ctypes.data, whole.nbytes))
        return lambda: undone.append(whole.ctypes.data)

    rx = Receiver(counts=False)
    rx.on_map = lock
    try:
        block.buf[:] = bytes(range(256)) * 4096
        views = [rx.view(block.name, 256 * i, (16, 16), "|u1", None) for i in range(3)]
        assert all((v == np.arange(256).reshape(16, 16)).all() for v in views)
        assert locked and locked[0][1] == 1 << 20 and len(locked) == 1  # mapped once
        start, n = locked[0]
        assert start <= views[2].ctypes.data < start + n
        assert not undone
        del views
        rx.close()
        assert undone == [start]
    finally:
        block.close()
        block.unlink()

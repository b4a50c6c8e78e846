"""Frame pools: frames made with ctx.empty cross worker processes by reference (no pixel is
copied or pickled), and a block is reused only once no process can still read it."""

import numpy as np
from helpers.pipeline import CheckFrames, PoolFrames

from tinydl.pipeline import App, Frame, Packet
from tinydl.pipeline.components import Collect
from tinydl.pipeline.process import Arena, dumps, loads
from tinydl.pipeline.shm import Pool, Receiver, reference

TIMEOUT = 60


def test_a_pool_array_pickles_as_a_reference():
    pool, arena = Pool("tinydl_test_", lends=False), Arena()
    try:
        image = pool.empty((1080, 1920, 3))
        image[...] = 7
        message = dumps({"in": Packet(Frame(image[::2, 100:]), 1, 2)}, arena)
        assert len(message) < 1000 and arena.shm is None  # no pixels, not even in the arena
        back = loads(message, {}, False, Receiver(counts=False))["in"].payload.image
        assert back.shape == (540, 1820, 3) and (back == 7).all()
        image[0, 100] = 9  # the same memory, not a copy
        assert back[0, 0, 0] == 9
        assert reference(np.zeros(4), None) is None  # a plain array is pickled as usual
    finally:
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

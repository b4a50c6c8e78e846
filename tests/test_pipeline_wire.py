"""The pipe messages between the app and its workers (`process.send_msg`, `recv_msg`): the
framing of multiprocessing's Connection, read and written on the descriptors directly; and a
thread source's short way for its frames (`Node._send_made`), checked against the general one."""

import os
import threading
from multiprocessing import Pipe

import numpy as np
import pytest

from tinydl.pipeline import App, Component, Packet
from tinydl.pipeline.components import Collect
from tinydl.pipeline.process import recv_msg, send_msg

SIZES = [0, 1, 4096, 16384, 16385, 200_000, 3_000_000]


@pytest.mark.parametrize("n", SIZES)
def test_a_message_comes_back_whole(n):
    """Messages past the pipe's buffer (64 KiB) are written in several calls while a reader
    takes them in parts; the bytes and their order survive."""
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    r, w = os.pipe()
    got = []
    reader = threading.Thread(target=lambda: got.extend([recv_msg(r), recv_msg(r)]))
    reader.start()
    send_msg(w, data)
    send_msg(w, b"after")
    reader.join(30)
    os.close(r)
    os.close(w)
    assert got == [data, b"after"]


@pytest.mark.parametrize("n", [0, 5, 20_000, 300_000])
def test_the_framing_is_the_connections_both_ways(n):
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8).tobytes()
    a, b = Pipe(duplex=False)  # a reads, b writes
    got = []
    t = threading.Thread(target=lambda: got.append(recv_msg(a.fileno())))
    t.start()
    b.send_bytes(data)
    t.join(30)
    assert got == [data]
    t = threading.Thread(target=lambda: got.append(a.recv_bytes()))
    t.start()
    send_msg(b.fileno(), data[::-1])
    t.join(30)
    assert got[1] == data[::-1]
    a.close()
    b.close()


def test_the_long_header_is_read():
    """A length of -1 is followed by an 8-byte length (messages over 2 GiB, as the Connection
    writes them); read with a small one here."""
    r, w = os.pipe()
    os.write(w, b"\xff\xff\xff\xff" + (5).to_bytes(8, "big") + b"hello")
    assert recv_msg(r) == b"hello"
    os.close(r)
    os.close(w)


def test_a_closed_pipe_is_eof_and_a_short_message_too():
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(EOFError):
        recv_msg(r)
    os.close(r)
    r, w = os.pipe()
    os.write(w, (10).to_bytes(4, "big") + b"four")  # the writer died mid-message
    os.close(w)
    with pytest.raises(EOFError):
        recv_msg(r)
    os.close(r)


class Emit(Component):
    """A source returning, call by call, what `outs` lists: values, Packets, lists, nothing."""

    inputs: dict = {}
    outputs = {"out": object}

    def __init__(self, outs):
        self.outs = outs

    def open(self, ctx):
        self.i = 0

    def process(self, ctx, inputs):
        if self.i >= len(self.outs):
            return None
        out = self.outs[self.i]
        self.i += 1
        if out == "packet":
            return {"out": Packet(f"p{self.i}", ctx.flow_id, 1000 + self.i)}
        return out


def run(outs):
    app = App("wire", inline_below_us=0.0)
    app.add("src", Emit(outs))
    sink = Collect()
    app.add("sink", sink)
    app.connect("src", "sink")
    return app.run(timeout=30), sink


def test_a_source_sends_the_short_way_and_every_frame_is_accounted():
    outs = [{"out": 1}, {}, {"out": [2, 3]}, "packet", {"out": 4}]
    report, sink = run(outs)
    payloads = [p.payload for p in sink.packets]
    assert payloads == [1, 2, 3, "p4", 4]
    assert report.frames_in == 4  # {} made no frame; [2, 3] is two copies of one frame
    assert report.frames_out == 4
    assert report.balanced


def test_a_bad_port_from_a_source_is_still_an_error():
    report, sink = run([{"out": 1}, {"nope": 2}, {"out": 3}])
    assert [p.payload for p in sink.packets] == [1]
    assert any("nope" in e for e in report.errors)


class Double(Component):
    inputs = {"in": object}
    outputs = {"out": object}

    def process(self, ctx, inputs):
        return {"out": 2 * inputs["in"].payload}


@pytest.mark.parametrize("timeout", [30.0, 1e9])
def test_a_worker_with_a_timeout_answers_through_poll(timeout):
    """A process component with a timeout has its answers waited for by poll(2); one past
    poll's range (24.8 days) waits as if it had none."""
    app = App("wire-timeout")
    app.add("src", Emit([{"out": i} for i in range(5)]))
    app.add("double", Double(), executor="process", timeout=timeout)
    sink = Collect()
    app.add("sink", sink)
    app.connect("src", "double")
    app.connect("double", "sink")
    report = app.run(timeout=60)
    assert report.balanced, report.accounting()
    assert [p.payload for p in sink.packets] == [0, 2, 4, 6, 8]

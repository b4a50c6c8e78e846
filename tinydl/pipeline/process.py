"""The process executor: a component instance runs open/process/close in a worker process.

The node's queues, joins and accounting stay in the app's process; its thread sends each call to
the worker over a pipe and waits for the answer, so a worker that dies or hangs is noticed at
once (the pipe closes, or the component's timeout passes): the call's frames are counted as
errored, the worker is replaced (up to `max_restarts`), and the app goes on.

Arrays never go through pickle: a payload is pickled with protocol 5 and its buffers (NumPy
arrays, made contiguous first) are written out-of-band into a shared-memory arena, one per
direction per worker, reused call after call and grown when a call needs more. The worker reads
its inputs in place (views valid during the call; components that hold inputs get copies); the
app copies a worker's outputs out of its arena once (one memcpy, no pickling of pixel data).
Workers start with the "spawn" method (safe with the app's threads); components must pickle.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import multiprocessing as mp
import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from tinydl.pipeline.accounting import ERROR
from tinydl.pipeline.component import Component, Context, finished, output_packets
from tinydl.pipeline.errors import PipelineError
from tinydl.pipeline.packet import Frame, Packet
from tinydl.pipeline.queues import RESERVED
from tinydl.pipeline.runtime import CallTimeout, Node, Restart, pin_cpus
from tinydl.pipeline.shm import Pool, Receiver, receiving, reference, sweep

START_TIMEOUT_S = 120.0  # spawn, imports and unpickling the component: not the component's time
OPEN_TIMEOUT_S = 120.0  # open, when the component sets no timeout
UNGUARDED_EXIT = 78  # a worker found an app started while it imported the main script
POLL_MAX_S = (2**31 - 1) / 1e3  # poll(2)'s longest timeout (24.8 days); longer ones never end
MIN_ARENA = 1 << 20
ALIGN = 64


# -- messages on a pipe ----------------------------------------------------------------------
# The framing of multiprocessing's Connection (a 4-byte big-endian length, -1 then 8 bytes for
# messages over 2 GiB), read and written with os.read/os.write on the pipe's descriptor: the
# Connection's own methods run more Python per message (checks, a BytesIO per read), which a
# worker woken from sleep runs with cold caches on every hop.


def send_msg(fd: int, data: bytes) -> None:
    """Write one message to a pipe; small ones in one write (atomic up to PIPE_BUF)."""
    n = len(data)
    head = n.to_bytes(4, "big") if n <= 0x7FFFFFFF else b"\xff\xff\xff\xff" + n.to_bytes(8, "big")
    if n <= 16384:
        _write_all(fd, head + data)
    else:
        _write_all(fd, head)
        _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)
        while written < len(data):
            written += os.write(fd, view[written:])


def recv_msg(fd: int) -> bytes:
    """Read one message from a pipe; EOFError when every writer has closed it."""
    n = int.from_bytes(_read_exact(fd, 4), "big", signed=True)
    if n == -1:
        n = int.from_bytes(_read_exact(fd, 8), "big")
    return _read_exact(fd, n) if n else b""


def _read_exact(fd: int, n: int) -> bytes:
    data = os.read(fd, n)
    if len(data) == n:
        return data
    parts, got = [data], len(data)
    while data and got < n:
        data = os.read(fd, n - got)
        parts.append(data)
        got += len(data)
    if got < n:
        raise EOFError
    return b"".join(parts)


class WorkerDied(Restart):
    """The worker process ended (crashed, killed, os._exit) while it owed an answer."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


def refuse_start_while_importing_main() -> None:
    """Called when an app starts. A spawned worker imports the main script again before it runs
    anything; an app started at the script's top level would start once more in every worker
    (each spawning workers of its own), so the worker ends with UNGUARDED_EXIT, which the app
    explains."""
    if getattr(mp.current_process(), "_inheriting", False):  # multiprocessing's own test
        raise SystemExit(UNGUARDED_EXIT)


def _unguarded_main() -> str:
    script = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
    return (
        f"a worker process imports {script} again when it starts (the 'spawn' start method), "
        "and that script starts this app at import level, so the worker would run the app "
        'too: put the code that builds and runs the app under `if __name__ == "__main__":`'
    )


class RemoteError(Exception):
    """An exception raised by a component in its worker; named after the original type."""

    def __init__(self, type_name: str, message: str, trace: str):
        super().__init__(message)
        self.type_name, self.trace = type_name, trace

    def __reduce__(self):
        return (RemoteError, (self.type_name, str(self), self.trace))


# -- payload transport -----------------------------------------------------------------------


class _Pickler(pickle.Pickler):
    pool: Pool | None = None  # a worker's: its large outputs are copied into its blocks
    lend = True
    copies: dict | None = None

    def reducer_override(self, obj):
        if type(obj) is np.ndarray:
            # An array in a frame pool goes by reference.
            ref = reference(obj, self.pool, self.lend, self.copies)
            if ref is not None:
                return ref
            # NumPy pickles non-contiguous arrays in-band (as bytes); make them contiguous so
            # that their data, too, goes out-of-band into shared memory.
            if not (obj.flags.c_contiguous or obj.flags.f_contiguous):
                return np.ascontiguousarray(obj).__reduce_ex__(5)
        return NotImplemented


def segment_prefix(app_pid: int | None = None) -> str:
    """Segments are named after the app's process, so a leak is easy to trace (/dev/shm)."""
    return f"tinydl_{app_pid or os.getpid()}_"


class Arena:
    """A shared-memory segment written by one side; replaced by a larger one when needed."""

    _serial = itertools.count()

    def __init__(self, prefix: str | None = None):
        self.prefix = prefix or segment_prefix()
        self.shm: SharedMemory | None = None

    def reserve(self, nbytes: int) -> SharedMemory:
        if self.shm is None or self.shm.size < nbytes:
            size = max(MIN_ARENA, nbytes, 0 if self.shm is None else 2 * self.shm.size)
            self.release()
            name = f"{self.prefix}{os.getpid()}_{next(self._serial)}"
            self.shm = SharedMemory(name=name, create=True, size=size)
        return self.shm

    def close(self) -> None:
        """Unmap the segment, leaving its name for whoever unlinks it (`sweep`)."""
        if self.shm is not None:
            _close(self.shm)
            self.shm = None

    def release(self) -> None:
        if self.shm is not None:
            _close(self.shm)
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
            self.shm = None


def _close(shm: SharedMemory) -> None:
    try:
        shm.close()
    except BufferError:  # arrays still view it; the mapping goes when they do
        pass


def dumps(
    obj: Any, arena: Arena, pool: Pool | None = None, lend: bool = True, copies=None
) -> tuple:
    """A message: (arena segment or None, buffer layout, pickle), pickled with the request or
    answer that carries it."""
    buffers: list[pickle.PickleBuffer] = []
    f = io.BytesIO()
    pickler = _Pickler(f, protocol=5, buffer_callback=buffers.append)
    pickler.pool, pickler.lend, pickler.copies = pool, lend, copies
    pickler.dump(obj)
    if not buffers:
        return (None, (), f.getvalue())
    raws = [b.raw() for b in buffers]
    layout, off = [], 0
    for r in raws:
        layout.append((off, r.nbytes))
        off += -(-r.nbytes // ALIGN) * ALIGN
    shm = arena.reserve(off)
    for (o, n), r in zip(layout, raws, strict=True):
        shm.buf[o : o + n] = r
    return (shm.name, layout, f.getvalue())


FRAME = 1  # a message's first item: one Packet of a Frame by reference (shm names are str)


def encode(
    inputs: dict, arena: Arena, pool: Pool | None = None, lend: bool = True, copies=None
) -> tuple:
    """A call's inputs as a message: `dumps`, but for the common one — a single packet of a
    Frame whose pixels lie in a frame block (or go into one) — a flat tuple of the frame's
    reference and ids, which pickles and unpickles with no Python code called back (half the
    time of a hop's message work)."""
    if len(inputs) == 1:
        ((port, packet),) = inputs.items()
        if type(packet) is Packet:
            message = frame_message(port, packet.payload, packet, pool, lend, copies)
            if message is not None:
                return message
    return dumps(inputs, arena, pool, lend, copies)


def frame_message(
    port: str, frame: Any, ids: Packet, pool: Pool | None, lend: bool, copies
) -> tuple | None:
    """The flat message of one packet on `port` holding `frame` with the ids of `ids`, when
    `frame` is a Frame whose pixels lie in a frame block or go into one; else None."""
    if type(frame) is Frame and type(frame.image) is np.ndarray:
        ref = reference(frame.image, pool, lend, copies)
        if ref is not None:
            return (
                FRAME,
                port,
                ref[1],
                frame.format,
                frame.pts,
                ids.flow_id,
                ids.request_id,
                ids.timestamp,
                ids.app_id,
            )
    return None


def loads(
    message: tuple,
    attached: dict[str, SharedMemory],
    copy: bool,
    rx: Receiver | None = None,
) -> Any:
    rx = rx or Receiver(counts=False)
    rx.copy = copy and not rx.counts  # the app keeps a worker's blocks mapped, no copy
    if message[0] == FRAME:
        _, port, ref, fmt, pts, flow_id, request_id, timestamp, app_id = message
        frame = Frame(rx.view(*ref), fmt, pts)
        return {port: Packet(frame, flow_id, request_id, timestamp, app_id)}
    with receiving(rx):
        return _loads(message, attached, copy)


def _loads(message: tuple, attached: dict[str, SharedMemory], copy: bool) -> Any:
    name, layout, data = message
    if name is None:
        return pickle.loads(data)
    shm = attached.get(name)
    if shm is None:
        for old in attached.values():  # the writer moved to a larger arena
            _close(old)
        attached.clear()
        shm = attached[name] = SharedMemory(name=name)
    views = [shm.buf[o : o + n] for o, n in layout]
    if copy:
        views = [bytearray(v) for v in views]
    return pickle.loads(data, buffers=views)


# -- the worker ------------------------------------------------------------------------------


def _worker_main(
    conn,
    component: Component,
    name: str,
    instance: int,
    instances: int,
    app_id: str,
    flow_id: int,
    place: dict | None = None,
    direct_out: tuple | None = None,
    direct_in=None,
    busy_poll_ns: int = 0,
) -> None:
    """`direct_out` (port, the next worker's port, the sending end of a pipe to it) and
    `direct_in` (the receiving end of such a pipe): a direct edge (see `wire_direct`);
    `busy_poll_ns`: how long to poll the pipes before sleeping on them (`App.busy_poll_us`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the app decides when to stop
    place = place or {}
    os.environ.update(place.get("env") or {})  # a deployment's GPU, before any context exists
    pin_cpus(place.get("cpus"))
    fd = conn.fileno()
    send_msg(fd, pickle.dumps(("started",), protocol=5))
    ctx = Context(name, instance, instances, app_id)
    ctx.gpu = place.get("gpu")
    ctx.flow_id = flow_id
    attached: dict[str, SharedMemory] = {}
    arena = Arena(segment_prefix(os.getppid()))
    pool = ctx.pool = Pool(segment_prefix(os.getppid()), lends=True)
    rx = Receiver(counts=False, keep=True)

    def reply(*msg) -> None:
        send_msg(fd, pickle.dumps(msg, protocol=5))

    def failure(exc: BaseException, call: int | None = None) -> tuple:
        return ("error", type(exc).__name__, str(exc), traceback.format_exc(), call)

    try:
        component.open(ctx)
    except BaseException as exc:
        reply(*failure(exc))
        return
    backend = _host_locker(component)
    rx.on_map = backend and backend.lock_host
    reply("ready", ctx.flow_id, os.getpid(), pool.prefix)
    guarded = (
        type(component).wait_for_resource is not Component.wait_for_resource
        or type(component).release_resource is not Component.release_resource
    )
    forward = _Forward(component, name, pool, *direct_out) if direct_out is not None else None
    read = _reader(conn, direct_in, busy_poll_ns)
    attached_direct: dict[str, SharedMemory] = {}  # the arena of the worker sending directly
    try:
        while True:
            try:
                source, raw = read()
            except EOFError:
                return
            t_read = time.perf_counter_ns()
            kind, body, returns, ctx.tick_at, call, direct = pickle.loads(raw)
            pool.returned(returns)
            forwarded = False
            copies: dict = {}  # arrays copied into frame blocks, sent twice (direct edge)
            try:
                if kind == "process":
                    where = attached if source is conn else attached_direct
                    inputs = loads(body, where, component.holds_inputs, rx)
                    if guarded:
                        component.wait_for_resource(ctx)
                    try:
                        out = finished(component.process(ctx, inputs))
                    finally:
                        if guarded:
                            component.release_resource(ctx)
                        if backend is not None:  # the app may reuse the input frames' blocks
                            backend.wait_host_reads()
                    if direct is not None and forward is not None:
                        forwarded = forward.send(out, inputs, direct, copies)
                    del inputs
                else:
                    ctx.stop_reason = body  # why the app stopped early, or None
                    out = component.close(ctx)
                body = dumps(out, arena, pool, copies=copies)
                span = (t_read, time.perf_counter_ns())  # one clock for the host's processes
                msg = ("ok", body, ctx.tick_at, ctx.flow_id, call, forwarded, span)
            except Exception as exc:
                msg = failure(exc, call)
            send_msg(fd, pickle.dumps(msg, protocol=5))
            if kind == "close":
                return
    finally:
        for seg in [*attached.values(), *attached_direct.values()]:
            _close(seg)
        rx.close()
        arena.release()
        if forward is not None:
            # Not unlinked: the next worker may not have read the last packet sent down the
            # direct edge yet (this worker's inputs ended first); the app sweeps it at its end.
            forward.arena.close()
        pool.close()


def _reader(conn, direct_in, busy_poll_ns: int = 0):
    """The next message, from the app or (with a direct edge in) from the worker before; with
    `busy_poll_ns`, the pipes are polled without sleeping for that long first."""
    app_fd = conn.fileno()
    if direct_in is None and not busy_poll_ns:
        return lambda: (conn, recv_msg(app_fd))
    poller = select.poll()
    poller.register(app_fd, select.POLLIN)
    if direct_in is not None:
        poller.register(direct_in.fileno(), select.POLLIN)
    direct_fd = direct_in.fileno() if direct_in is not None else None
    poll, clock = poller.poll, time.perf_counter_ns

    def ready() -> list:
        if busy_poll_ns:
            until = clock() + busy_poll_ns
            while clock() < until:
                events = poll(0)
                if events:
                    return events
        return poll()

    def read():
        while True:
            for fd, _ in ready():
                if fd == app_fd:
                    return conn, recv_msg(app_fd)
                try:
                    return direct_in, recv_msg(direct_fd)
                except EOFError:  # every sender closed it: the app's end only, then
                    poller.unregister(fd)

    return read


class _Forward:
    """A worker's direct edge out: the one packet a call makes on `port` goes to the next
    worker's pipe at once, as a request of the app would (the app still gets the outputs, and
    accounts for them; it reserved the next worker, asleep, for this call)."""

    def __init__(self, component: Component, name: str, pool: Pool, port, dst_port, out_conn):
        self.component, self.name, self.pool = component, name, pool
        self.port, self.dst_port, self.conn = port, dst_port, out_conn
        self.fd = out_conn.fileno()
        # Arrays in frame blocks go by reference without a lend: the app, which is lent them,
        # keeps the same frame alive until the next worker has answered. Small arrays are
        # copied into this arena, rewritten only once the next worker is idle again.
        self.arena = Arena(pool.prefix + "direct_")

    def send(self, out: Any, inputs: dict, direct: int | tuple, copies: dict) -> bool:
        """`direct`: the call id reserved at the next worker, or for a source (call id, the
        ids of the frame the call makes as a Packet). Large arrays not in a frame block yet
        are copied into one, kept in `copies` for the answer to the app, which lends them."""
        call, current = direct if type(direct) is tuple else (direct, None)
        current = next(iter(inputs.values()), current)
        if type(out) is dict and len(out) == 1 and current is not None:
            # The common call, {port: Frame}: its message made with no Packet (as
            # output_packets, then encode, would make it).
            frame = out.get(self.port)
            body = frame_message(self.dst_port, frame, current, self.pool, False, copies)
            if body is not None:
                send_msg(self.fd, pickle.dumps(("process", body, [], None, call, None), protocol=5))
                return True
        try:
            pairs = output_packets(self.component, self.name, out, current)
        except Exception:  # noqa: BLE001 - the app reports a bad output; nothing goes direct
            return False
        mine = [packet for port, packet in pairs if port == self.port]
        if len(mine) != 1:
            return False
        body = encode({self.dst_port: mine[0]}, self.arena, self.pool, False, copies)
        send_msg(self.fd, pickle.dumps(("process", body, [], None, call, None), protocol=5))
        return True


def _host_locker(component: Component):
    """The GPU backend a component drives, when it page-locks host memory (cuda): this
    worker page-locks the frame blocks it maps with it, so a batch of frames from other
    processes uploads asynchronously, as frames from `empty_host` do in one process."""
    from tinydl.backends import get_backend
    from tinydl.backends.base import Backend
    from tinydl.pipeline.profile import backend_of

    name = backend_of(component)
    if name is None:
        return None
    try:
        backend = get_backend(name)
        if type(backend).lock_host is Backend.lock_host or not backend.available():
            return None
    except Exception:  # noqa: BLE001 - no such backend here: blocks stay pageable
        return None
    return backend


def _exit_code(proc) -> int | None:
    """A dead worker's exit code; None when the app's join ended and closed it meanwhile."""
    if proc is None:
        return None
    try:
        proc.join(1.0)
        return proc.exitcode
    except ValueError:
        return None


# -- the node in the app's process -----------------------------------------------------------


class ProcessNode(Node):
    """A component instance in a worker process, driven by a thread of the app."""

    executor = "process"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.proc = None
        self.conn = None
        self.poller = None
        self.arena = Arena()
        self.attached: dict[str, SharedMemory] = {}
        self.out_arena: str | None = None
        self.rx = Receiver(counts=True)  # the worker's blocks this app maps
        self.block_prefixes: list[str] = []  # of every worker it started, swept at the end
        self._call_process = self._process
        inbox = self.inbox
        self.forwards = self.executor == "process" and inbox is not None and not inbox.join
        self.kill_lock = threading.RLock()
        self.calls = itertools.count(1)  # call ids: an answer names the call it answers
        self.sent_direct = False  # the last answer's call sent its packet on the direct edge
        # The last call's start and end in the worker (perf_counter_ns: one clock for the
        # host's processes); a call that came on a direct edge is timed by it.
        self.span: tuple[int, int] | None = None
        self.direct: Direct | None = None  # this worker's direct edge out (wire_direct)
        self.direct_in = None  # the receiving end of a direct edge into this worker

    def forward(self, port: str, packet: Packet) -> None:
        """Send one packet to the worker on the sender's thread (which holds `inbox.running`,
        claimed while this node's thread was asleep with nothing queued): the packet skips a
        thread wake-up on its way to the worker; this node's thread, woken meanwhile, waits for
        the answer and finishes the call as usual."""
        inputs = {port: packet}
        self.stats.forwarded += 1
        t0 = time.perf_counter_ns()
        call, error = next(self.calls), None
        try:
            self._send("process", encode(inputs, self.arena), "process", call)
        except Exception as exc:  # noqa: BLE001 - raised on this node's thread, as its call's
            error = exc
        self.inbox.start((inputs, (t0, error, call)))

    def _open(self) -> None:
        self._start_worker()

    def _start_worker(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_worker_main,
            name=f"tinydl:{self.name}",
            daemon=True,
            args=(
                child,
                self.component,
                self.name,
                self.ctx.instance,
                self.ctx.instances,
                self.ctx.app_id,
                self.ctx.flow_id,
                self.place,
                self.direct and (self.direct.port, self.direct.queue.port, self.direct.conn_out),
                self.direct_in,
                int(self.rt.app.busy_poll_us * 1e3),
            ),
        )
        try:
            proc.start()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.proc, self.conn = proc, parent
        # Answers within a timeout are waited for by poll(2) on the pipe: Connection.poll
        # builds a selector each call (5.4 against 1.5 µs in a hot loop on the VM).
        self.poller = select.poll()
        self.poller.register(parent.fileno(), select.POLLIN)
        try:
            self._receive(START_TIMEOUT_S, "start")
        except WorkerDied as exc:
            if exc.code == UNGUARDED_EXIT:
                raise PipelineError(_unguarded_main()) from None
            raise
        # The component's timeout counts from here: a slow spawn on a busy machine is no hang.
        msg = self._receive(self.timeout or OPEN_TIMEOUT_S, "open")
        if msg[0] != "ready":
            self._kill()
            raise RemoteError(msg[1], f"open failed in the worker: {msg[1]}: {msg[2]}", msg[3])
        self.ctx.flow_id = msg[1]
        self.rx.sender = msg[3]
        self.block_prefixes.append(msg[3])
        if self.rt.trace is not None:
            self.track = self.rt.trace.track(f"{self.name} (process {msg[2]})", pid=msg[2], tid=1)

    def _receive(self, timeout: float | None, what: str) -> tuple:
        """The worker's answer. Its death closes the pipe (EOF), so a blocking read notices it
        at once; with a timeout, poll first and kill it when the time is up."""
        proc, conn, poller = self.proc, self.conn, self.poller
        if proc is None:
            raise WorkerDied(f"no worker for {what} (stopped)")
        try:
            if timeout is None or timeout > POLL_MAX_S or poller.poll(timeout * 1e3):
                return pickle.loads(recv_msg(conn.fileno()))
        except (EOFError, OSError, ValueError):  # closed under us: it died or was killed
            code = _exit_code(proc)
            self._kill()
            raise WorkerDied(f"worker died during {what} (exit code {code})", code) from None
        self._kill()
        raise CallTimeout(f"no answer in {timeout:g} s during {what}")

    def _rpc(self, kind: str, body: bytes | None, what: str) -> Any:
        call = next(self.calls)
        self._send(kind, body, what, call)
        return self._answer(None, call, what)

    def _send(self, kind: str, body: bytes | None, what: str, call: int) -> None:
        """A request. A process call reserves the next worker on a direct edge when it is
        free, for the one packet the call makes on that edge (sent straight to it)."""
        if self.proc is None:
            raise WorkerDied("no worker")
        d, direct = self.direct, None
        if d is not None and kind == "process":
            reserved = d.claim()
            # A source's worker makes its packet from the frame's ids, which the app gives.
            if reserved is not None:
                direct = reserved if self.inbox is not None else (reserved, self.made)
        try:
            # The tick the app still waits for (None once it fired): the worker's copy of
            # the context must not keep asking for a tick that has passed.
            returns = self.rx.take_returns()
            request = (kind, body, returns, self.ctx.tick_at, call, direct)
            send_msg(self.conn.fileno(), pickle.dumps(request, protocol=5))
        except (BrokenPipeError, ConnectionResetError, OSError):
            if direct is not None:
                d.release()
            code = _exit_code(self.proc)
            self._kill()
            raise WorkerDied(f"worker gone before {what} (exit code {code})", code) from None

    def _answer(self, error: Exception | None, call: int, what: str = "process") -> Any:
        """The worker's answer to call `call` (`error`: sending it failed). Answers to older
        calls are dropped: a call reserved on a direct edge whose sender then failed."""
        d = self.direct
        try:
            if error is not None:
                raise error
            while True:
                msg = self._receive(self.timeout, what)
                if msg[4] == call:
                    break
                if msg[0] == "ok":  # its frames are accounted already; return its blocks
                    loads(msg[1], self.attached, True, self.rx)
            if msg[0] == "error":
                raise RemoteError(msg[1], msg[2], msg[3])
        except BaseException:
            if d is not None:
                d.release()
            raise
        _, out, tick_at, flow_id, _, self.sent_direct, self.span = msg
        if d is not None and d.call is not None:
            d.sent() if self.sent_direct else d.release()
        self.ctx.tick_at, self.ctx.flow_id = tick_at, flow_id
        result = loads(out, self.attached, True, self.rx)
        self.out_arena = next(iter(self.attached), self.out_arena)
        return result

    def _process(self, inputs: dict) -> Any:
        return self._rpc("process", encode(inputs, self.arena), "process")

    # The reserved next worker is let go when its packet did not go to it after all.
    def _deliver(self, pairs, packets, keys) -> None:
        try:
            super()._deliver(pairs, packets, keys)
        finally:
            if self.direct is not None:
                self.direct.release()

    def _call(self, inputs, sent=None) -> None:
        try:
            super()._call(inputs, sent)
        finally:
            if self.direct is not None:
                self.direct.release()

    def _close(self) -> Any:
        if self.proc is None:
            return None
        try:
            out = self._rpc("close", self.ctx.stop_reason, "close")
            self.proc.join(5.0)
            return out
        finally:
            self._kill()

    def _restart(self, why: str) -> None:
        self.stats.restarts += 1
        self._end_held(ERROR, f"{self.name}: state lost ({why})")
        self._kill()
        if self.rt.stopping:  # ended by the stop (a hung call), or dying meanwhile
            self.failed = f"not restarted: the app is stopping ({why})"
            return
        if self.stats.restarts > self.spec.max_restarts:
            self.failed = f"gave up after {self.spec.max_restarts} restarts ({why})"
            return
        try:
            self._start_worker()
        except Exception as exc:
            self.failed = f"restart failed: {type(exc).__name__}: {exc}"

    def _kill(self) -> None:
        # Locked: the app's join may end a hung worker while the node's thread, which saw it
        # die, ends it too.
        with self.kill_lock:
            proc, self.proc = self.proc, None
            if proc is not None:
                if proc.is_alive():
                    proc.kill()
                proc.join(5.0)
                with contextlib.suppress(ValueError):  # reaped by the node's thread meanwhile
                    proc.close()
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            for shm in self.attached.values():
                _close(shm)
            self.attached.clear()
            if self.out_arena is not None:  # a dead worker cannot unlink its own arena
                try:
                    shm = SharedMemory(name=self.out_arena)
                    shm.close()
                    shm.unlink()
                except FileNotFoundError:
                    pass
                self.out_arena = None

    def _shutdown(self) -> None:
        # Locked: the app's join may shut a hung node down while its thread, freed by that,
        # ends and shuts it down too.
        with self.kill_lock:
            self._kill()
            self.arena.release()
            self.rx.close()
            if self.direct is not None:
                self.direct.conn_out.close()
            if self.direct_in is not None:
                self.direct_in.close()

    def sweep_blocks(self) -> None:
        """At the app's end: unlink the blocks its workers left (lent, or the worker died)."""
        for prefix in self.block_prefixes:
            sweep(prefix)


# -- direct edges: worker to worker --------------------------------------------------------


class Direct:
    """An edge from one process-executor instance to another that is its only consumer on
    that port and has no other producer: while the consumer is asleep with nothing queued,
    the producer's call reserves it (`claim`), the producer's worker sends the call's packet
    on that port straight to the consumer's worker through a pipe of their own, and the app,
    when the answer with the outputs comes, accounts for them as usual and hands the consumer's
    thread the call already under way (`start`), which waits for its answer. The packet skips
    the app on its way: two pipe trips and a thread wake-up become one pipe trip."""

    def __init__(self, port: str, queue, target: ProcessNode):
        self.port, self.queue, self.target = port, queue, target
        ctx = mp.get_context("spawn")
        # The app keeps both ends, for the workers it starts (again, after a restart).
        self.conn_in, self.conn_out = ctx.Pipe(duplex=False)
        self.call: int | None = None  # the consumer's call id reserved for the call under way
        self.pending: int | None = None  # the call id, once the packet went

    def claim(self) -> int | None:
        b = self.target
        if b.failed is not None or b.proc is None or b.ctx.tick_at is not None:
            return None
        if not self.queue.inbox.claim(RESERVED):
            return None
        self.call = next(b.calls)
        return self.call

    def sent(self) -> None:
        self.pending = self.call

    def start(self, packet: Packet) -> None:
        """The packet the producer's worker sent: the consumer's thread takes the call over
        (timed by the consumer's worker: the call began before the app knew of it)."""
        call = self.pending
        self.pending = self.call = None
        self.target.stats.direct += 1
        self.queue.inbox.start(({self.queue.port: packet}, (None, None, call)))

    def release(self) -> None:
        """Let the consumer go when no call of its was started (a sent packet's answer, if
        any, is dropped by call id)."""
        if self.call is not None:
            self.pending = self.call = None
            self.queue.inbox.unclaim()


def wire_direct(nodes: list[Node]) -> None:
    """Give every producer/consumer pair of process-executor instances that qualifies a
    direct edge (see Direct): one route on the port, to one queue, its consumer's only one,
    of one producer; no collect or order, no max age, no join; a source with a flow limit
    holds frames back, so not from one."""
    for a in nodes:
        if a.executor != "process" or (a.inbox is None and a.flow_limit is not None):
            continue
        for port, routes in a.outlets.items():
            if len(routes) != 1:
                continue
            route = routes[0]
            if route.collect is not None or route.expect is not None or len(route.queues) != 1:
                continue
            q = route.queues[0]
            b = q.owner
            if (
                b.executor != "process"
                or not b.forwards
                or b.direct_in is not None
                or b is a
                or len(b.inbox.queues) != 1
                or q.producers != 1
                or q.max_age_ns is not None
            ):
                continue
            a.direct = route.direct = Direct(port, q, b)
            b.direct_in = a.direct.conn_in
            break

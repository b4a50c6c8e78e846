"""What every GPU backend shares: compiled partitions made of plans, one plan per input types.

A `PlannedKernel` is a partition compiled for a GPU backend. For each set of concrete input types
it makes a `Plan`: infer every shape from the inputs' shapes, compute the values that
become constants once shapes are known, apply the plan-time rewrites (backends/fusion.py), give
each value its storage type, let each node's kernel builder emit its steps through a `Build`,
then give each intermediate a buffer by liveness (values whose lives do not overlap share one).
An input computed from shapes alone where it was made (`Partition.shape_inputs`: a detector's
box count turned into a ConstantOfShape's shape in a later partition) is a constant of the plan,
which is made per its value: read from the plan that returned it, or from the device.

A backend subclasses the three classes and supplies what differs: memory (how a value's bytes
are counted, buffers allocated, constants uploaded), its kernel builders (a `KernelRegistry`
filled by `@registry.kernel`, templates rendered by `templates()`), and how a plan's steps run
(one WebGPU submission, or CUDA launches and graph replays).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import math
import pkgutil
import threading
import time
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from tinydl.backends.base import CompileOptions, Kernel, Support, content_key
from tinydl.errors import InvalidModelError, OpError
from tinydl.ir.graph import Graph, Node, Value
from tinydl.ops.base import infer_graph

# -- kernel builders ------------------------------------------------------------------------------


@dataclass
class KernelDef:
    op: str
    build: Callable
    supports: Callable[[Node, Graph], Support] | None = None
    # packed4(node, plan): True when the node's kernel can read input 0 and write output 0 in
    # the nc4hw4 (packed-4) layout (webgpu).
    packed4: Callable | None = None


class KernelRegistry(dict):
    """Op name (ONNX spelling) -> KernelDef for one backend; a backend supports an op when one
    of its kernel modules registers it with `@registry.kernel(...)`. With `load` (set by the
    kernels package: it imports every builder module), the builders are imported when an op is
    first looked up, not when the backend is: a session read back from the cache makes no plan
    and needs none of them."""

    def __init__(self, backend: str):
        super().__init__()
        self.backend = backend
        self.load: Callable[[], None] | None = None
        self._loaded = False
        self._busy = False  # the loading thread, looking up while it loads
        self._loading = threading.RLock()

    def _ensure(self) -> None:
        if self._loaded or self.load is None:
            return
        with self._loading:  # other threads wait for the whole registry
            if self._loaded or self._busy:
                return
            self._busy = True
            try:
                self.load()
                self._loaded = True
            finally:
                self._busy = False

    def __getitem__(self, op: str) -> KernelDef:
        self._ensure()
        return super().__getitem__(op)

    def get(self, op: str, default=None):
        self._ensure()
        return super().get(op, default)

    def __contains__(self, op) -> bool:
        self._ensure()
        return super().__contains__(op)

    def __iter__(self):
        self._ensure()
        return super().__iter__()

    def __len__(self) -> int:
        self._ensure()
        return super().__len__()

    def keys(self):
        self._ensure()
        return super().keys()

    def items(self):
        self._ensure()
        return super().items()

    def values(self):
        self._ensure()
        return super().values()

    def kernel(self, *ops: str, supports=None, packed4=None):
        """Register the decorated builder for `ops`."""

        def deco(fn):
            for op in ops:
                if dict.__contains__(self, op):
                    raise RuntimeError(f"{self.backend} kernel for {op} registered twice")
                self[op] = KernelDef(op, fn, supports, packed4)
            return fn

        return deco


def module_importer(package: str, path) -> Callable[[], None]:
    """A kernels package's `KernelRegistry.load`: importing every module of `package` (its
    `__name__`, `__path__`) registers its kernels — adding an op is adding a file."""

    def load() -> None:
        for module in pkgutil.iter_modules(path):
            importlib.import_module(f"{package}.{module.name}")

    return load


def constant_inputs(node: Node, graph: Graph, first: int = 1) -> Support:
    """Support only when every input from `first` on (by default all but the data) is a
    constant (a shape, axes, pads...) that the kernel bakes in, or is computed from tensor
    shapes alone (Shape -> Gather -> Concat...): a plan knows every shape, so it computes those
    once when it is made."""
    for name in node.inputs[first:]:
        if name and name not in graph.initializers and not shape_derived(name, graph):
            return Support(False, f"{node.op} needs '{name}' constant; it is computed at run time")
    return Support(True)


def dropout_supports(node: Node, graph: Graph) -> Support:
    """Dropout at inference is a copy of its input; its optional mask output is not made."""
    if len([o for o in node.outputs if o]) > 1:
        return Support(False, "Dropout's mask output is not implemented")
    return constant_inputs(node, graph)


def shape_derived(name: str, graph: Graph) -> bool:
    """True when value `name` depends only on constants and on the shapes of tensors."""
    frozen = getattr(_FROZEN, "graphs", {}).get(id(graph))
    if frozen is not None and frozen[0] is graph:
        return name in frozen[1]
    return name in _shape_derived(graph, [name])


def _shape_derived(graph: Graph, names: Collection[str]) -> set[str]:
    """Which of `names` (and of the values they depend on) are shape-derived."""
    producers = graph.producers()
    derived: set[str] = set(graph.initializers)
    done: set[str] = set(graph.initializers)
    for name in names:
        todo = [(name, False)]
        while todo:  # depth-first, a value decided once its inputs are
            v, ready = todo.pop()
            if v in done and not ready:
                continue
            node = producers.get(v)
            if node is None or node.op in ("Shape", "Size", "Constant"):
                done.add(v)
                if node is not None:
                    derived.add(v)
                continue
            ins = [i for i in node.inputs if i]
            if not ready:
                done.add(v)
                todo.append((v, True))
                todo += [(i, False) for i in ins if i not in done]
            elif all(i in derived for i in ins):
                derived.add(v)
    return derived


# graph id -> (graph, its shape-derived values) while the graph is frozen (see `frozen`)
_FROZEN = threading.local()


@contextlib.contextmanager
def frozen(graph: Graph):
    """While `graph` is not edited (the partitioner asking every backend about every node),
    its shape-derived values are found once, not once per question (which rebuilt the producer
    map each time: quadratic in the graph's size)."""
    graphs = _FROZEN.__dict__.setdefault("graphs", {})
    if id(graph) in graphs:
        yield
        return
    outputs = [o for n in graph.nodes for o in n.outputs if o]
    graphs[id(graph)] = (graph, _shape_derived(graph, outputs))
    try:
        yield
    finally:
        del graphs[id(graph)]


def templates(package: str) -> Callable[..., str]:
    """A `render(template, **params)` for the Jinja2 template files of `package` (its Jinja2
    environment made at the first render). Compiled templates are kept in
    $TINYDL_CACHE_DIR/templates (Jinja2's bytecode cache, checked against each template's source),
    so a new process does not compile them again."""
    env = None

    def render(template: str, **params) -> str:
        nonlocal env
        if env is None:
            env = _environment(package)
        return env.get_template(template).render(**params)

    return render


# What loading and compiling a model or restoring a kept session imports whichever the backend:
# a GPU context imports these (and its backend's own modules) ahead, on a thread
# (`prefetch_imports`).
SESSION_MODULES = (
    "tinydl.runtime.loader",
    "tinydl.runtime.session",
    "tinydl.snapshot",
    "tinydl.ir.tdl",
    "tinydl.ops",
    "tinydl.passes",
    "tinydl.backends.partition",
    "tinydl.backends.lowering",
    "tinydl.backends.fusion",
)
_prefetched: set[str] = set()
_prefetch_lock = threading.Lock()


def prefetch_imports(*modules: str) -> threading.Thread | None:
    """Import Jinja2 (the kernel templates'), SESSION_MODULES and `modules`, then fingerprint
    tinydl's files (`snapshot.code_fingerprint`), on a thread of its own, each once a process;
    the thread, or None when all were asked for before. A GPU context calls this before it
    makes its device, whose driver calls let go of the GIL, and joins the thread when the
    device is made: the imports (Jinja2 50-100 ms on the 2-core VM, tinydl's own 15-40 ms)
    overlap the driver's start instead of delaying the first load and compile (a warm start's
    from the session cache is tens of milliseconds in all). A module that fails to
    import is left to its importer's own import, which reports it."""
    with _prefetch_lock:
        names = [n for n in ("jinja2.runtime", *SESSION_MODULES, *modules) if n not in _prefetched]
        if not names:
            return None
        _prefetched.update(names)
    thread = threading.Thread(target=_import_all, args=(names,), name="tinydl-imports", daemon=True)
    thread.start()
    return thread


def _import_all(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(Exception):  # (Jinja2 not installed: the first render says so)
            importlib.import_module(name)
    # ... and the fingerprint of tinydl's files the model and session caches are keyed by (a
    # stat of each file: 1.6 ms on the 2-core VM, paid by the first load of a process else)
    with contextlib.suppress(Exception):
        from tinydl import snapshot

        snapshot.code_fingerprint()


def _environment(package: str):
    import jinja2

    from tinydl.backends import templating

    return jinja2.Environment(
        # the template compiled ahead when the wheel was built (backends/templating.py), else
        # compiled here through the bytecode cache
        loader=templating.loader(
            package, lambda name: resources.files(package).joinpath(name).read_text("utf-8")
        ),
        undefined=jinja2.StrictUndefined,
        bytecode_cache=_template_cache(),
        **templating.OPTIONS,
    )


def _template_cache():
    """Jinja2's file system bytecode cache in the cache folder; None when it cannot be made (a
    cache that cannot be written only costs the compile)."""
    import jinja2

    from tinydl.cache import cache_dir

    class Cache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # noqa: BLE001 - a damaged entry is compiled again
                bucket.reset()

        def dump_bytecode(self, bucket) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    try:
        folder = cache_dir("templates")
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return Cache(str(folder), "%s.jinja")


# -- plans ---------------------------------------------------------------------------------------

# Constant outputs up to this many elements keep their host copy (_KNOWN), for plans that take
# them as shape inputs.
KNOWN_SIZE = 4096


class _Known:
    """Host copies of small constant outputs by the device object holding them (a later
    partition's plan needs the value, not the buffer), each forgotten with its object."""

    def __init__(self):
        self._by_id: dict[int, tuple[weakref.ref, np.ndarray]] = {}
        self._lock = threading.Lock()

    def put(self, held: Any, value: np.ndarray) -> None:
        key = id(held)
        with self._lock:
            if key in self._by_id and self._by_id[key][0]() is held:
                return
            self._by_id[key] = (weakref.ref(held), value)
        weakref.finalize(held, self._forget, key)

    def _forget(self, key: int) -> None:
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry[0]() is None:
                del self._by_id[key]

    def get(self, held: Any) -> np.ndarray | None:
        entry = self._by_id.get(id(held))
        return entry[1] if entry is not None and entry[0]() is held else None


_KNOWN = _Known()


@dataclass
class Info:
    """A value's concrete type in a plan: logical dtype, the type it is stored in (the backend's
    name for it) and its memory layout."""

    shape: tuple[int, ...]
    dtype: str
    stype: str
    layout: str = "nchw"

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Build:
    """What a kernel builder sees of one node: types, constants, options; the backend's
    subclass adds the ways to emit work (dispatch, launch) and to upload constants."""

    def __init__(self, plan: Plan, node: Node):
        self.plan, self.node, self.ctx = plan, node, plan.ctx
        self.attrs = node.attrs
        self.inputs, self.outputs = node.inputs, node.outputs
        self.label = node.meta.get("label", node.op)

    @property
    def precision(self) -> str:
        return self.plan.precision

    def option(self, key: str, default: Any = None) -> Any:
        """A backend option of this compile (CompileOptions.extra; see backends/base.py)."""
        return self.plan.owner.extra.get(key, default)

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and bool(self.inputs[i])

    def info(self, name_or_index) -> Info:
        name = self.inputs[name_or_index] if isinstance(name_or_index, int) else name_or_index
        info = self.plan.info(name)
        if info is None:
            raise KeyError(f"{self.label}: no type for value '{name}'")
        return info

    def out(self, i: int = 0) -> Info:
        return self.plan.infos[self.outputs[i]]

    def const(self, i: int) -> np.ndarray | None:
        if not self.has(i):
            return None
        return self.plan.const(self.inputs[i])

    def alias(self, out: str, src: str) -> None:
        """`out` is a view of `src` with another shape (zero-copy)."""
        self.plan.alias[out] = self.plan.alias.get(src, src)

    def scratch(
        self, key: str, shape: tuple[int, ...], dtype: str = "float32", precise: bool = False
    ) -> str:
        """A value only this node's steps use (a recurrent state, a partial result): bind its
        name like any other. Its buffer lives from the first to the last step that binds it and
        is shared with other values outside that span, so a kernel writes it before reading.
        `precise` keeps a float32 value in float32 at fp16 precision (as outputs are)."""
        name = f"{self.node.name}/scratch/{key}"
        self.plan.infos[name] = self.plan.value_info(tuple(shape), dtype, precise)
        return name


class Plan:
    """One partition specialized to concrete input types. Steps (the backend's dispatches or
    launches) have `args`: value names, resolved to buffers when run, or uploaded constants."""

    build_class: type[Build] = Build
    registry: KernelRegistry
    # Values computed from shapes alone (Shape -> Gather -> Concat ...) become constants here.
    fold_constants = True

    def __init__(self, owner: PlannedKernel, inputs: dict[str, Info]):
        t0 = time.perf_counter()
        compile0 = owner.ctx.stats["compile_s"]
        self.owner, self.ctx, self.precision = owner, owner.ctx, owner.precision
        graph = self.graph = owner.graph
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        values = dict(owner.plan_values)  # the shape inputs' values (PlannedKernel.run_host)
        concrete = Graph(
            inputs=[
                Value(n, inputs[n].dtype, inputs[n].shape)
                for n in self.input_names
                if n not in values
            ],
            outputs=[Value(v.name) for v in graph.outputs],
            nodes=graph.nodes,
            initializers={**graph.initializers, **values},
        )
        known = infer_graph(concrete)
        types = concrete.values
        keep = set(self.output_names)
        self.consts: dict[str, np.ndarray] = dict(values)
        body = graph
        if self.fold_constants:
            live = []
            for node in graph.nodes:
                outs = [known[o] for o in node.outputs if o]
                if outs and all(t.value is not None for t in outs):
                    for o in node.outputs:
                        if o:
                            self.consts[o] = np.asarray(known[o].value)
                    continue
                live.append(node)
            body = Graph(list(graph.inputs), list(graph.outputs), live, graph.initializers)
        self.nodes = self.rewrite(body, keep, lambda v: known[v].shape, types)
        self.infos: dict[str, Info] = dict(inputs)
        self.alias: dict[str, str] = {}
        for node in self.nodes:
            for name in node.outputs:
                if not name:
                    continue
                t = types[name]
                if t.shape is None or not all(isinstance(d, int) for d in t.shape):
                    raise ValueError(f"{node.name}: {name} has no static shape ({t.shape})")
                if not self.holds(t.dtype):
                    raise ValueError(f"{node.name}: cannot place {name} ({t.dtype})")
                precise = name in keep or name in owner.fp32_values
                self.infos[name] = self.value_info(tuple(t.shape), t.dtype, precise)
        for name, value in self.consts.items():
            self.infos[name] = self.const_info(value)
        self.arrange(keep, types)
        self.steps: list = []
        for node in self.nodes:
            self.build(node)
        self.finish()
        self._allocate()
        self.init = {
            "plan_s": time.perf_counter() - t0,
            "compile_s": owner.ctx.stats["compile_s"] - compile0,
        }

    # -- what a backend supplies ---------------------------------------------------------------
    def build(self, node: Node) -> None:
        """Emit the steps of one node (its kernel builder's)."""
        self.registry[node.op].build(self.build_class(self, node))

    def finish(self) -> None:
        """Called once every node is built: complete work the builders started."""

    def rewrite(self, body: Graph, keep: set[str], shape_of, types) -> list[Node]:
        """The plan-time rewrites (backends/fusion.py) this backend applies to the nodes."""
        return list(body.nodes)

    @classmethod
    def holds(cls, dtype: str) -> bool:
        """True when the backend can store values of this logical dtype."""
        raise NotImplementedError

    def value_info(self, shape: tuple[int, ...], dtype: str, is_output: bool) -> Info:
        """The Info of a value the plan computes (its storage type follows the precision; an
        output, or a value precision="auto" keeps in float32, stays float32)."""
        raise NotImplementedError

    def const_info(self, value: np.ndarray) -> Info:
        raise NotImplementedError

    def arrange(self, keep: set[str], types) -> None:
        """After types are known, before kernels are built: layouts, multi-node kernels."""

    def nbytes(self, info: Info) -> int:
        raise NotImplementedError

    def new_buffer(self, nbytes: int) -> Any:
        """A buffer of at least `nbytes` for intermediates (reused by liveness)."""
        raise NotImplementedError

    def buffer_size(self, buffer: Any) -> int:
        raise NotImplementedError

    # -- kept between processes (tinydl/snapshot.py) -------------------------------------------
    def __getstate__(self) -> dict:
        """The buffers go as their sizes (which values share one stays); `restored` makes
        them again."""
        state = dict(self.__dict__)
        index: dict[int, int] = {}
        sizes: list[int] = []
        for buf in self.buffers.values():
            if id(buf) not in index:
                index[id(buf)] = len(sizes)
                sizes.append(self.buffer_size(buf))
        state["buffers"] = {r: index[id(b)] for r, b in self.buffers.items()}
        state["_buffer_sizes"] = sizes
        return state

    def restored(self) -> None:
        made = [self.new_buffer(n) for n in self.__dict__.pop("_buffer_sizes")]
        self.buffers = {r: made[i] for r, i in self.buffers.items()}
        for o, held in self.const_outputs.items():
            value = self.const(self.root(o))
            if value is not None and value.size <= KNOWN_SIZE:
                _KNOWN.put(held, value)

    # -- shared --------------------------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        if name in self.consts:
            return self.consts[name]
        return self.graph.initializers.get(name)

    def info(self, name: str) -> Info | None:
        """A value's Info: one the plan computes, or a constant's (None: neither)."""
        info = self.infos.get(name)
        if info is None:
            value = self.const(name)
            info = None if value is None else self.const_info(value)
        return info

    def root(self, name: str) -> str:
        return self.alias.get(name, name)

    def _allocate(self) -> None:
        """Give every intermediate a buffer; values whose lives (first to last step that binds
        them) do not overlap share one, best fit first. Inputs and outputs get none here: the
        caller's feeds are bound, and outputs get fresh buffers per run."""
        inputs, outputs = set(self.input_names), set(self.output_names)
        self.const_outputs: dict[str, Any] = {}
        for o in outputs:
            r = self.root(o)
            if r in self.consts or (r in self.graph.initializers and r not in inputs):
                value = self.const(r)
                self.const_outputs[o] = self.owner.constant(("output", o), value)
                if value.size <= KNOWN_SIZE:
                    _KNOWN.put(self.const_outputs[o], value)
        roots_out = {self.root(o) for o in outputs} - inputs - set(self.const_outputs)
        self.output_roots = sorted(r for r in roots_out if r in self.infos and r not in self.consts)
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for a in step.args:
                if isinstance(a, str):
                    r = self.root(a)
                    first.setdefault(r, i)
                    last[r] = i
        ending: dict[int, list[str]] = {}
        for r, i in last.items():
            ending.setdefault(i, []).append(r)
        starting: dict[int, list[str]] = {}
        for r, i in first.items():
            if r not in inputs and r not in roots_out:
                starting.setdefault(i, []).append(r)
        self.buffers: dict[str, Any] = {}
        free: list[tuple[int, Any]] = []
        for i in range(len(self.steps)):
            for r in starting.get(i, []):
                need = max(1, self.nbytes(self.infos[r]))
                fit = [k for k, (size, _) in enumerate(free) if size >= need]
                if fit:
                    _, buf = free.pop(min(fit, key=lambda k: free[k][0]))
                else:
                    buf = self.new_buffer(need)
                self.buffers[r] = buf
            for r in ending.get(i, []):
                if r in self.buffers:
                    free.append((self.buffer_size(self.buffers[r]), self.buffers[r]))


# Plans a compiled partition keeps (the least recently used goes first); each holds its
# intermediates' buffers and per-shape tables, so inputs of ever new sizes must not grow memory
# without bound. Option "max_plans".
MAX_PLANS = 16


class PlannedKernel(Kernel):
    """A partition compiled for a GPU backend; plans are made per input types (eagerly when
    every input's shape is static) and kept in a bounded LRU (option "max_plans")."""

    plan_class: type[Plan] = Plan

    def __init__(self, ctx: Any, graph: Graph, options: CompileOptions):
        self.ctx, self.graph = ctx, graph
        self.precision = options.precision
        self.fp32_values = options.fp32_values
        self.extra = dict(options.extra)
        self.timing: str | None = self.extra.get("timing")
        self.plans: collections.OrderedDict[tuple, Plan] = collections.OrderedDict()
        self.max_plans = int(self.extra.get("max_plans", MAX_PLANS))
        if self.max_plans < 1:
            raise ValueError(f"max_plans must be at least 1, got {self.max_plans}")
        self._by_feed: dict[tuple, Plan] = {}  # the same plans, by the feeds' types
        self._constants: dict[tuple, Any] = {}
        self._const_users: dict[tuple, set[tuple]] = {}  # constant key -> keys of plans using it
        self._making: tuple | None = None  # the key of the plan being made
        # Sessions may be shared by threads: plans are made under this lock, and a backend
        # takes it (or a device-wide one) where a run touches shared state.
        self.lock = threading.RLock()
        self.init: dict[str, float] = {"weights_s": 0.0, "plan_s": 0.0, "compile_s": 0.0}
        # Inputs computed from shapes where they were made: each plan takes their values as
        # constants (see the module docstring); `plan_values` while a plan is made.
        names = {v.name for v in graph.inputs}
        self.shape_inputs = tuple(n for n in self.extra.get("shape_inputs", ()) if n in names)
        self.plan_values: dict[str, np.ndarray] = {}
        self._pending: list[tuple] = []
        self._timings: list[tuple[str, float]] | None = None
        # Per-op (or total) GPU seconds of recent timed runs, oldest first.
        self.timing_history: collections.deque = collections.deque(maxlen=1000)
        static = {}
        for v in graph.inputs if not self.shape_inputs else ():
            if v.shape is None or not all(isinstance(d, int) for d in v.shape):
                break
            if not self.plan_class.holds(v.dtype):
                break
            static[v.name] = self.input_info(tuple(v.shape), v.dtype)
        else:
            if not self.shape_inputs:
                self._plan(static)

    # -- what a backend supplies ---------------------------------------------------------------
    def build(self, node: Node) -> None:
        """Emit the steps of one node (its kernel builder's)."""
        self.registry[node.op].build(self.build_class(self, node))

    def finish(self) -> None:
        """Called once every node is built: complete work the builders started."""

    def input_info(self, shape: tuple[int, ...], dtype: str) -> Info:
        """The Info of a graph input fed with this shape and dtype."""
        raise NotImplementedError

    def feed_info(self, name: str, tensor: Any) -> Info:
        """The Info of a feed (one of the backend's tensors)."""
        raise NotImplementedError

    def upload(self, data: np.ndarray, **how) -> Any:
        """Copy a constant to the device."""
        raise NotImplementedError

    def read_timing(self, pending: tuple) -> list[float]:
        """GPU seconds per label of a timed run recorded as `pending` (waits for it)."""
        raise NotImplementedError

    def read(self, tensor: Any) -> np.ndarray:
        """A feed's contents on the host (waits for the device)."""
        raise NotImplementedError

    def held(self, tensor: Any) -> Any:
        """The object a feed's memory is (what `constant` returned for a constant output)."""
        return tensor

    def run_plan(self, plan: Plan, inputs: dict[str, Any], host: Collection[str]) -> tuple:
        """(outputs, what read_timing needs for a timed run or None)."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def constant(self, key, data: np.ndarray, **how) -> Any:
        """Upload a constant once per compiled kernel, keyed by `key` and its content (so a
        table made for one input shape is never reused for another, weights are uploaded
        once)."""
        key = (*key, content_key(data))
        arr = self._constants.get(key)
        if arr is None:
            t0 = time.perf_counter()
            arr = self._constants[key] = self.upload(data, **how)
            self.init["weights_s"] += time.perf_counter() - t0
        if self._making is not None:
            self._const_users.setdefault(key, set()).add(self._making)
        return arr

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        # What a run leaves (pending timings, the plans by feed types) is not kept; the init
        # costs are this process's to measure.
        state.update(_pending=[], _timings=None, _by_feed={}, timing_history=None)
        state["init"] = {"weights_s": 0.0, "plan_s": 0.0, "compile_s": 0.0}
        return state

    def restored(self) -> None:
        self.timing_history = collections.deque(maxlen=1000)
        for plan in self.plans.values():
            plan.restored()

    def _plan(self, infos: dict[str, Info], values: dict[str, np.ndarray] | None = None) -> Plan:
        key = tuple((n, i.shape, i.dtype, i.stype, i.layout) for n, i in sorted(infos.items()))
        if values:
            key += tuple(("=", n, v.dtype.str, v.shape, v.tobytes()) for n, v in values.items())
        with self.lock:
            plan = self.plans.get(key)
            if plan is None:
                return self._new_plan(key, infos, values or {})
            self.plans.move_to_end(key)
            return plan

    def _new_plan(self, key: tuple, infos: dict[str, Info], values: dict[str, np.ndarray]) -> Plan:
        w0 = self.init["weights_s"]
        self._making, self.plan_values = key, values
        try:
            plan = self.plan_class(self, infos)
        except InvalidModelError as exc:
            self._forget_constants(key)
            # The graph validated with its declared (symbolic) shapes: these inputs do not fit.
            shapes = ", ".join(f"{n} {list(i.shape)}" for n, i in infos.items())
            raise OpError(f"inputs {shapes} do not fit the model: {exc}") from exc
        except BaseException:
            self._forget_constants(key)
            raise
        finally:
            self._making, self.plan_values = None, {}
        plan.key = key
        self.plans[key] = plan
        while len(self.plans) > self.max_plans:
            old_key, old = self.plans.popitem(last=False)
            self._by_feed = {k: p for k, p in self._by_feed.items() if p is not old}
            self._forget_constants(old_key)
        self.init["plan_s"] += plan.init["plan_s"] - (self.init["weights_s"] - w0)
        self.init["compile_s"] += plan.init["compile_s"]
        return plan

    def _forget_constants(self, plan_key: tuple) -> None:
        """Drop the uploaded constants only plan `plan_key` used (its per-shape tables);
        weights every plan shares stay."""
        for key in [k for k, users in self._const_users.items() if plan_key in users]:
            users = self._const_users[key]
            users.discard(plan_key)
            if not users:
                del self._const_users[key]
                self._constants.pop(key, None)

    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return self.run_host(inputs, ())

    def run_host(self, inputs: dict[str, Any], host: Collection[str]) -> dict[str, Any]:
        key = tuple(
            (name, t.shape, t.dtype, getattr(t, "stype", None), getattr(t, "layout", None))
            for name, t in inputs.items()
        )
        values = None
        if self.shape_inputs:
            values = {n: self._value(inputs[n]) for n in self.shape_inputs}
            key += tuple((n, v.tobytes()) for n, v in values.items())
        plan = self._by_feed.get(key)
        if plan is None or plan.key not in self.plans:
            infos = {name: self.feed_info(name, t) for name, t in inputs.items()}
            plan = self._plan(infos, values)
            with self.lock:
                self._by_feed[key] = plan
        elif len(self.plans) > 1:
            with self.lock:
                if plan.key in self.plans:
                    self.plans.move_to_end(plan.key)
        first = "first_run_s" not in self.init
        t0 = time.perf_counter()
        out, pending = self.run_plan(plan, inputs, host)
        if first:
            if not host:
                self.ctx.sync()
            self.init["first_run_s"] = time.perf_counter() - t0
        if pending is not None:
            self._pending.append(pending)
        return out

    def _value(self, tensor: Any) -> np.ndarray:
        """A shape input's value: the host copy of the constant output it is, else read."""
        if isinstance(tensor, np.ndarray):
            return tensor
        value = _KNOWN.get(self.held(tensor))
        return np.asarray(self.read(tensor)) if value is None else value

    @property
    def timings(self) -> list[tuple[str, float]] | None:
        """(op label, GPU seconds) of the last timed run; waits for runs still in flight."""
        while self._pending:
            try:
                pending = self._pending.pop(0)
            except IndexError:  # another thread took the last one
                break
            labels = pending[-1]
            secs = self.read_timing(pending)
            self._timings = [(n, float(s)) for n, s in zip(labels, secs, strict=True)]
            self.timing_history.append(self._timings)
        return self._timings

    def profile(self) -> dict[str, Any]:
        return {"init": dict(self.init), "ops": self.timings}

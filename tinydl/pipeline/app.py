"""App: a DAG of components joined by bounded queues — build it, check it, print it, run it.

    app = App("demo")
    app.add("src", SyntheticSource(count=100, fps=30))
    app.add("small", Resize(width=160, height=90))
    app.add("out", Collect())
    app.connect("src", "small")                    # ports may be left out when there is one
    app.connect("small.out", "out.in", policy="drop-oldest", capacity=4)
    report = app.run(timeout=60)
    print(report)

Connection forms (every edge is one bounded queue per target instance, with its own policy):
- one-to-one:   connect("a", "b")
- fan-out:      connect("a", ["b", "c"])          every packet goes to each
- many-to-one:  connect(["a", "b"], "c")          merged into one input, in arrival order
- one-to-many:  connect("a", "w") where w is expanded to n instances: each packet goes to one,
                chosen by dispatch="round_robin" (default), "by_flow" or "least_busy";
                connect("a", "w[2]") targets one instance
- collect:      connect("w", "c", collect=True): the n instances of w back into one input, in
                request order per flow (what a sink writing a video needs)

A component with several input ports gets one packet per port with the same (flow_id,
request_id) in each call; each port must arrive in request order per flow (collect first).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

from tinydl.pipeline.component import EXECUTORS, Component
from tinydl.pipeline.errors import PipelineError, check_count
from tinydl.pipeline.packet import accepts, limits, type_name, union
from tinydl.pipeline.profiler import RunReport, Trace
from tinydl.pipeline.queues import POLICIES, describe_policy

DISPATCH = ("round_robin", "by_flow", "least_busy")
# What a source does at its flow limit: wait for a frame to settle before making the next, or
# go on at its own pace, holding the newest frame and dropping the one it replaces.
FLOW_POLICIES = ("wait", "drop-oldest")
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z_][\w-]*)(?:\[(?P<i>\d+)\])?(?:\.(?P<port>[\w-]+))?$")


@dataclass
class ComponentSpec:
    name: str
    component: Component
    instances: int = 1
    executor: str | None = None  # None: the app's default
    timeout: float | None = None  # seconds per call (open/process/close) before a restart
    max_restarts: int = 3
    # Per instance (cycled): {"cpus": [cores] | None, "gpu": "cuda:1" | None, "env": {...}},
    # from `cpus=`/`gpus=` or a deployment plan; None: wherever the OS puts it.
    placement: list[dict[str, Any]] | None = None
    flow_limit: int | None = None  # a source's frames in flight per stream (None: the app's)
    flow_policy: str | None = None  # None: the app's
    in_flight: int = 1  # calls whose `Later` may be outstanding at once (thread executor)
    # In a shard of the app (shards.py): the indices of this shard's instances in the whole
    # app, and the whole app's instance count.
    shard_of: tuple[list[int], int] | None = None


@dataclass
class EdgeSpec:
    src: str
    src_port: str
    dst: str
    dst_port: str
    dst_instance: int | None = None
    capacity: int = 8
    policy: str = "block"
    max_age: float | None = None
    dispatch: str = "round_robin"
    collect: bool = False
    form: str = "one-to-one"

    def label(self) -> str:
        inst = "" if self.dst_instance is None else f"[{self.dst_instance}]"
        return f"{self.src}.{self.src_port} -> {self.dst}{inst}.{self.dst_port}"


class App:
    def __init__(
        self,
        name: str = "app",
        executor: str = "thread",
        capacity: int = 8,
        app_id: str | None = None,
        inline_below_us: float = 20.0,
        stop_on_error: bool = False,
        flow_limit: int | None = None,
        flow_policy: str = "wait",
        ray: dict[str, Any] | None = None,
        switch_interval_ms: float | None = 0.5,
        busy_poll_us: float = 0.0,
    ):
        if executor not in EXECUTORS:
            raise PipelineError(
                f"app {name!r}: executor must be one of {EXECUTORS}, got {executor!r}"
            )
        _check_flow_limit(f"app {name!r}", flow_limit, flow_policy)
        if switch_interval_ms is not None and not 0 < switch_interval_ms <= 1000:
            raise PipelineError(
                f"app {name!r}: switch_interval_ms must be in (0, 1000] or None, "
                f"got {switch_interval_ms!r}"
            )
        if not 0 <= busy_poll_us <= 1e6:
            raise PipelineError(
                f"app {name!r}: busy_poll_us must be in [0, 1e6], got {busy_poll_us!r}"
            )
        self.name = name
        self.executor = executor
        self.capacity = capacity
        self.app_id = app_id or name
        # A packet for a thread-executor component that is idle and whose calls take less than
        # this is processed on the sender's thread: cheaper than waking a thread (0: never).
        self.inline_below_us = inline_below_us
        # The first error (a component raising, a timeout, a dead worker) stops the whole app,
        # for apps whose output is worthless once a frame is lost (a file being encoded).
        self.stop_on_error = stop_on_error
        # End-to-end flow control (MediaPipe's FlowLimiter): each source keeps at most this many
        # frames of its stream in flight, so latency stays bounded when any stage falls behind.
        self.flow_limit = flow_limit
        self.flow_policy = flow_policy
        # Python's GIL switch interval while the app runs (restored after; None: left as it
        # is). Python's 5 ms default makes a thread that releases the GIL for a CUDA call wait
        # up to that long to get it back from busy source threads: on one H200, 150 streams of
        # the multi-stream ESPCN app ran at 2,822 / 2,826 frames/s with 5 ms and 3,028 / 4,233
        # with 0.5 ms (two runs; docs/benchmarks.md).
        self.switch_interval_ms = switch_interval_ms
        # A worker process polls its pipes without sleeping for this long after each call
        # before it blocks (0: it blocks at once). A core that has slept wakes slowly and runs
        # the next call's Python with cold caches; one that polls does not. Costs a core per
        # polling worker: for latency first on cores to spare (docs/pipeline.md, "process").
        self.busy_poll_us = busy_poll_us
        # ray.init's arguments for the ray executor (e.g. {"address": "auto"} for a cluster).
        self.ray = dict(ray or {})
        # Ray's strategy for the placement group built from the components' placement.
        self.placement_strategy = "PACK"
        self.components: dict[str, ComponentSpec] = {}
        self.edges: list[EdgeSpec] = []
        self.source: tuple[str, dict[str, Any]] | None = None  # (file, variables) when loaded

    # -- building ----------------------------------------------------------------------------
    def add(
        self,
        name: str,
        component: Component,
        *,
        executor: str | None = None,
        timeout: float | None = None,
        instances: int = 1,
        max_restarts: int = 3,
        cpus: list[int] | None = None,
        gpus: list[str] | None = None,
        flow_limit: int | None = None,
        flow_policy: str | None = None,
        in_flight: int = 1,
    ) -> str:
        """Add a component instance under a unique name; returns the name. `cpus` / `gpus`
        place its instances by hand (instance i on cpus[i % len], gpus[i % len]); under the
        Ray executor they become its placement group's bundles. `flow_limit` and
        `flow_policy` (sources only) override the app's. `in_flight` > 1: calls that return
        `Later` (enqueued GPU work) are finished on a thread of their own while the next
        n - 1 calls are made (thread executor; component.py says more)."""
        if not isinstance(component, Component):
            raise PipelineError(
                f"add({name!r}): expected a Component instance, got {type(component).__name__}"
            )
        if not re.fullmatch(r"[A-Za-z_][\w-]*", name):
            raise PipelineError(f"component name {name!r}: use letters, digits, _ and -")
        if name in self.components:
            raise PipelineError(f"component name {name!r} is already used")
        if executor is not None and executor not in component.executors:
            raise PipelineError(
                f"{name}: executor must be one of {component.executors}, got {executor!r}"
            )
        if timeout is not None and timeout <= 0:
            raise PipelineError(f"{name}: timeout must be positive, got {timeout}")
        _check_flow_limit(name, flow_limit, flow_policy or "wait")
        _check_in_flight(name, component, in_flight, timeout)
        if (flow_limit is not None or flow_policy is not None) and component.inputs:
            raise PipelineError(f"{name}: flow_limit and flow_policy apply to sources only")
        self.components[name] = ComponentSpec(
            name,
            component,
            1,
            executor,
            timeout,
            max_restarts,
            flow_limit=flow_limit,
            flow_policy=flow_policy,
            in_flight=in_flight,
        )
        self.expand(name, instances)
        if cpus or gpus:
            from tinydl.pipeline.deploy import manual_placement

            self.components[name].placement = manual_placement(name, instances, cpus, gpus)
        return name

    def expand(self, name: str, n: int) -> None:
        """Run `n` instances of a component (clones built with its constructor arguments)."""
        spec = self._spec(name)
        if not isinstance(n, int) or n < 1:
            raise PipelineError(f"expand({name!r}, {n!r}): n must be a positive integer")
        spec.instances = n

    def connect(
        self,
        src: str | list[str],
        dst: str | list[str],
        *,
        capacity: int | None = None,
        policy: str = "block",
        max_age: float | None = None,
        dispatch: str = "round_robin",
        collect: bool = False,
    ) -> list[EdgeSpec]:
        """Join output port(s) to input port(s); see the module docstring for the forms."""
        srcs = [src] if isinstance(src, str) else list(src)
        dsts = [dst] if isinstance(dst, str) else list(dst)
        if not srcs or not dsts:
            raise PipelineError(f"connect({src!r}, {dst!r}): nothing to connect")
        if policy not in POLICIES:
            raise PipelineError(
                f"connect({src!r}, {dst!r}): policy must be one of {POLICIES}, got {policy!r}"
            )
        if (max_age is None) == (policy == "drop-if-older-than"):
            raise PipelineError(
                f"connect({src!r}, {dst!r}): max_age goes with policy "
                "'drop-if-older-than', and only with it"
            )
        if dispatch not in DISPATCH:
            raise PipelineError(
                f"connect({src!r}, {dst!r}): dispatch must be one of {DISPATCH}, got {dispatch!r}"
            )
        capacity = self.capacity if capacity is None else capacity
        if not isinstance(capacity, int) or capacity < 1:
            raise PipelineError(
                f"connect({src!r}, {dst!r}): capacity must be a positive integer, got {capacity!r}"
            )
        made = []
        for s in srcs:
            s_name, s_inst, s_port = self._endpoint(s, "outputs")
            if s_inst is not None:
                raise PipelineError(
                    f"connect: {s!r}: edges leave every instance of a component;"
                    " address instances only as targets"
                )
            for d in dsts:
                d_name, d_inst, d_port = self._endpoint(d, "inputs")
                edge = EdgeSpec(
                    s_name,
                    s_port,
                    d_name,
                    d_port,
                    d_inst,
                    capacity,
                    policy,
                    max_age,
                    dispatch,
                    collect,
                )
                if any(e.label() == edge.label() for e in self.edges + made):
                    raise PipelineError(f"connect: {edge.label()} is already connected")
                edge.form = (
                    "collect"
                    if collect
                    else "fan-out"
                    if len(dsts) > 1
                    else "many-to-one"
                    if len(srcs) > 1
                    else "one-to-one"
                )
                made.append(edge)
        self.edges += made
        return made

    def _spec(self, name: str) -> ComponentSpec:
        if name not in self.components:
            raise PipelineError(
                f"no component named {name!r}; the app has {list(self.components) or 'none yet'}"
            )
        return self.components[name]

    def _endpoint(self, text: str, side: str) -> tuple[str, int | None, str]:
        m = _ENDPOINT.match(text.strip())
        if not m:
            raise PipelineError(
                f"bad endpoint {text!r}: expected 'name', 'name.port', 'name[i]' or 'name[i].port'"
            )
        spec = self._spec(m["name"])
        ports = getattr(spec.component, side)
        kind = "output" if side == "outputs" else "input"
        port = m["port"]
        if port is None:
            if len(ports) != 1:
                raise PipelineError(
                    f"{text!r}: {m['name']} has {kind} ports {list(ports)}; "
                    f"say which, e.g. '{m['name']}.{next(iter(ports), 'port')}'"
                    if ports
                    else f"{text!r}: {m['name']} has no {kind} port"
                )
            port = next(iter(ports))
        elif port not in ports:
            raise PipelineError(
                f"{text!r}: {m['name']} has no {kind} port {port!r}; its "
                f"{kind} ports are {list(ports)}"
            )
        return m["name"], None if m["i"] is None else int(m["i"]), port

    def flow_limit_of(self, spec: ComponentSpec) -> tuple[int | None, str]:
        """A source's flow limit and policy (its own, else the app's); (None, …) for others."""
        if spec.component.inputs:
            return None, self.flow_policy
        limit = spec.flow_limit if spec.flow_limit is not None else self.flow_limit
        return limit, spec.flow_policy or self.flow_policy

    def executor_of(self, spec: ComponentSpec) -> str:
        return spec.executor or (
            self.executor
            if self.executor in spec.component.executors
            else spec.component.executors[0]
        )

    # -- checking ----------------------------------------------------------------------------
    def order(self) -> list[str]:
        """Component names in topological order (Kahn, stable); a cycle is a PipelineError."""
        indegree = {n: 0 for n in self.components}
        after: dict[str, set[str]] = {n: set() for n in self.components}
        for e in self.edges:
            if e.dst not in after[e.src]:
                after[e.src].add(e.dst)
                indegree[e.dst] += 1
        ready = [n for n, d in indegree.items() if d == 0]
        out = []
        while ready:
            n = ready.pop(0)
            out.append(n)
            for m in sorted(after[n], key=list(self.components).index):
                indegree[m] -= 1
                if indegree[m] == 0:
                    ready.append(m)
        if len(out) != len(self.components):
            cyclic = [n for n in self.components if n not in out]
            raise PipelineError(f"the app's graph has a cycle through {cyclic}")
        return out

    def check(self) -> dict[tuple[str, str], Any]:
        """Check the whole graph before anything runs: every edge's types (naming both ends),
        every input connected, instances, executors, collect edges. Returns the resolved type of
        every (component, output port)."""
        problems = []
        resolved: dict[tuple[str, str], Any] = {}
        for name in self.order():
            spec = self.components[name]
            comp = spec.component
            incoming = [e for e in self.edges if e.dst == name]
            connected: dict[str, Any] = {}
            for e in incoming:
                got, want = resolved[(e.src, e.src_port)], limits(comp.inputs[e.dst_port])
                connected[e.dst_port] = (
                    union(connected[e.dst_port], got) if e.dst_port in connected else got
                )
                if not accepts(want, got):
                    problems.append(
                        f"edge {e.label()}: {e.src}.{e.src_port} sends "
                        f"{type_name(got)}, but {e.dst}.{e.dst_port} accepts "
                        f"{type_name(want)}"
                    )
                if e.dst_instance is not None and e.dst_instance >= spec.instances:
                    problems.append(
                        f"edge {e.label()}: {name} has {spec.instances} "
                        f"instance(s), so [{e.dst_instance}] does not exist"
                    )
            for port in comp.inputs:
                if port not in connected:
                    problems.append(
                        f"{name}.{port} ({type_name(comp.inputs[port])}) has no incoming edge"
                    )
            for port, t in comp.output_types(connected).items():
                resolved[(name, port)] = t
            executor = self.executor_of(spec)
            if executor not in comp.executors:
                problems.append(
                    f"{name}: {type(comp).__name__} runs only on {comp.executors}, not {executor!r}"
                )
        for e in self.edges:
            if not e.collect:
                continue
            src = self.components[e.src]
            if src.instances < 2:
                problems.append(
                    f"edge {e.label()}: collect gathers the instances of an "
                    f"expanded component, but {e.src} has one instance"
                )
            if src.component.holds_inputs:
                problems.append(
                    f"edge {e.label()}: collect needs a component that answers "
                    f"each input, but {e.src} holds inputs across calls"
                )
            if self.components[e.dst].instances > 1 and e.dst_instance is None:
                problems.append(
                    f"edge {e.label()}: collect delivers to one instance; "
                    f"address one, e.g. {e.dst}[0]"
                )
        if problems:
            raise PipelineError(
                f"app {self.name!r} has {len(problems)} problem(s):\n  " + "\n  ".join(problems)
            )
        return resolved

    def help(self, file: Any = None) -> str:
        """Print (and return) the graph: components with ports and types, then the edges."""
        resolved = self.check()
        out = io.StringIO()
        print(
            f"app {self.name!r} (executor: {self.executor}, app_id: {self.app_id}"
            + (", stop on error" if self.stop_on_error else "")
            + ")",
            file=out,
        )
        print("components:", file=out)
        names = self.order()
        rows = []
        for name in names:
            spec = self.components[name]
            comp = spec.component
            kind = type(comp).__name__ + (f" x{spec.instances}" if spec.instances > 1 else "")
            extra = f", timeout {spec.timeout:g} s" if spec.timeout else ""
            limit, flow_policy = self.flow_limit_of(spec)
            if limit:
                extra += f", flow limit {limit} ({flow_policy})"
            ins = ", ".join(f"{p}: {type_name(t)}" for p, t in comp.inputs.items())
            outs = ", ".join(f"{p}: {type_name(resolved[(name, p)])}" for p in comp.outputs)
            rows.append(
                (
                    name,
                    kind,
                    f"[{self.executor_of(spec)}{extra}]",
                    f"({ins or 'source'}) -> ({outs or 'sink'})",
                )
            )
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
        for row in rows:
            print(
                "  "
                + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
                + "  "
                + row[3],
                file=out,
            )
        print("edges:", file=out)
        labels = [e.label() for e in self.edges]
        lw = max((len(x) for x in labels), default=0)
        for e, label in zip(self.edges, labels, strict=True):
            form = e.form
            targets = self.components[e.dst].instances
            if form != "collect" and e.dst_instance is None and targets > 1:
                form = f"one-to-many ({e.dispatch} over {targets})"
            if self.components[e.src].instances > 1 and form == "one-to-one":
                form = f"many-to-one ({self.components[e.src].instances} instances)"
            policy = describe_policy(e.policy, e.capacity, e.max_age)
            print(f"  {label.ljust(lw)}  {form}; {policy}", file=out)
        text = out.getvalue()
        print(text, end="", file=file)
        return text

    # -- running -----------------------------------------------------------------------------
    def start(self, trace: bool = False):
        """Check, build and start the app; returns the running Runtime (wait/stop/report)."""
        from tinydl.pipeline.process import refuse_start_while_importing_main
        from tinydl.pipeline.runtime import Runtime

        refuse_start_while_importing_main()
        self.check()
        rt = Runtime(self, Trace() if trace else None)
        rt.start()
        return rt

    def run(
        self,
        timeout: float | None = None,
        trace: str | None = None,
        grace: float = 5.0,
        deployment: Any = None,
        shards: int | None = None,
    ) -> RunReport:
        """Run to the end (every source done and every queue drained), or stop after `timeout`
        seconds. `trace` writes a Chrome/Perfetto trace JSON there. Never hangs past
        timeout + grace: components still stuck then are left behind and reported.
        `deployment` (a plan from `tinydl.pipeline.deploy`) is applied first; the report then
        carries it as `report.deployment`. `shards` > 1 (or the plan's) runs the app as that
        many copies in as many processes, each with its share of the instances (shards.py)."""
        if deployment is not None:
            deployment.apply(self)
            if shards is None:
                shards = getattr(deployment, "shards", 1)
        if shards is not None and shards != 1:
            from tinydl.pipeline import shards as sharding

            if trace is not None:
                raise PipelineError(f"{self.name}: a sharded run writes no trace; run one shard")
            report = sharding.run(self, shards, timeout, grace)
            report.deployment = deployment
            return report
        rt = self.start(trace=trace is not None)
        try:
            if not rt.wait(timeout):
                rt.stop(f"timeout after {timeout:g} s")
        except KeyboardInterrupt:
            rt.stop("interrupted")
        hung = rt.join(grace)
        report = rt.report(hung)
        report.deployment = deployment
        if trace is not None:
            rt.trace.write(trace)
        return report

    @staticmethod
    def load(path: str, variables: dict[str, str] | None = None) -> App:
        """An app from a YAML file or the Markdown form (see config.py)."""
        from tinydl.pipeline.config import load_app

        return load_app(path, variables)


def _check_flow_limit(where: str, limit: int | None, policy: str) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise PipelineError(f"{where}: flow_limit must be a positive integer, got {limit!r}")
    if policy not in FLOW_POLICIES:
        raise PipelineError(f"{where}: flow_policy must be one of {FLOW_POLICIES}, got {policy!r}")


def _check_in_flight(name: str, component: Component, n: Any, timeout: float | None) -> None:
    check_count(f"{name}: in_flight", n)
    if n > 1 and (timeout is not None or component.holds_inputs or not component.inputs):
        why = (
            "a timeout"
            if timeout is not None
            else "a component that holds inputs"
            if component.holds_inputs
            else "a source"
        )
        raise PipelineError(f"{name}: in_flight > 1 does not go with {why}")

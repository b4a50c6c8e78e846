"""PyTorch: the model's graph run op by op with torch.nn.functional (eager), and through
torch.compile when asked; on the CPU, and on CUDA when torch sees a GPU.

`graph_module` turns an ir.Graph of common CNN ops into a torch.nn.Module (a small ONNX→torch
runner; onnx2torch is not needed for these ops). A graph with another op is skipped, naming it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinydl.bench.harness import Config, Model, Skip, Skipped, Target, TransferMode
from tinydl.bench.peers import installed, missing
from tinydl.ops.activation import activation_params, check_covers

# torch per activation op of tinydl.ops.activation.ACTIVATIONS: fn(torch, x, **the node's
# parameters) (activation_params); REFUSED_ACTIVATIONS are not run, for the reason given.
ACTIVATIONS = {
    "Relu": lambda t, x: t.relu(x),
    "Clip": lambda t, x, min, max: x if min is None and max is None else t.clamp(x, min, max),
    "LeakyRelu": lambda t, x, alpha: t.nn.functional.leaky_relu(x, alpha),
    "HardSigmoid": lambda t, x, alpha, beta: t.clamp(alpha * x + beta, 0, 1),
    "HardSwish": lambda t, x: t.nn.functional.hardswish(x),
    "Sigmoid": lambda t, x: t.sigmoid(x),
    "Tanh": lambda t, x: t.tanh(x),
}
REFUSED_ACTIVATIONS = {"PRelu": "PRelu is not mapped to torch"}
check_covers("torch runner", ACTIVATIONS, REFUSED_ACTIVATIONS, ops_only=True)


def _pads(node) -> tuple[int, ...]:
    pads = node.attrs.get("pads") or [0, 0, 0, 0]
    if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise Skip(f"torch runner: {node.op} '{node.name}' uses auto_pad")
    return tuple(pads)


def _op_table(torch, F) -> dict[str, Any]:
    """ONNX op -> builder(node, const) returning fn(*inputs); `const(i)` is input i as a
    constant array (None when it is computed)."""

    def conv(node, const):
        if const(1) is None or const(1).ndim != 4:
            raise Skip(f"torch runner: Conv '{node.name}' is not a 2-D conv with fixed weights")
        a = node.attrs
        t, left, b, r = _pads(node)
        stride = tuple(a.get("strides") or (1, 1))
        dil = tuple(a.get("dilations") or (1, 1))
        groups = a.get("group", 1)
        sym = (t, left) == (b, r)

        def fn(x, w, bias=None):
            if not sym:
                x = F.pad(x, (left, r, t, b))
            return F.conv2d(x, w, bias, stride, (t, left) if sym else 0, dil, groups)

        return fn

    def pool(kind):
        def build(node, const):
            a = node.attrs
            k = tuple(a["kernel_shape"])
            if len(k) != 2:
                raise Skip(f"torch runner: {node.op} '{node.name}' is not 2-D")
            t, left, b, r = _pads(node)
            if (t, left) != (b, r):
                raise Skip(f"torch runner: {node.op} '{node.name}' has asymmetric pads")
            stride = tuple(a.get("strides") or (1, 1))
            ceil = bool(a.get("ceil_mode", 0))
            if kind == "max":
                dil = tuple(a.get("dilations") or (1, 1))
                return lambda x: F.max_pool2d(x, k, stride, (t, left), dil, ceil)
            inc = bool(a.get("count_include_pad", 0))
            return lambda x: F.avg_pool2d(x, k, stride, (t, left), ceil, inc)

        return build

    def d2s(node, const):
        r = node.attrs["blocksize"]
        if node.attrs.get("mode", "DCR") == "CRD":
            return lambda x: F.pixel_shuffle(x, r)

        def dcr(x):
            n, c, h, w = x.shape
            y = x.reshape(n, r, r, c // (r * r), h, w).permute(0, 3, 4, 1, 5, 2)
            return y.reshape(n, c // (r * r), h * r, w * r)

        return dcr

    def activation(node, const):
        values = {name: const(i) for i, name in enumerate(node.inputs) if name}
        params = activation_params(node, values.get)
        if params is None:
            raise Skip(f"torch runner: {node.op} '{node.name}' has computed min/max")
        fn = ACTIVATIONS[node.op]
        return lambda x, *_: fn(torch, x, **params)

    def gemm(node, const):
        a = node.attrs

        def fn(x, w, c=None):
            x = x.t() if a.get("transA", 0) else x
            w = w.t() if a.get("transB", 0) else w
            y = a.get("alpha", 1.0) * (x @ w)
            return y if c is None else y + a.get("beta", 1.0) * c

        return fn

    def reshape(node, const):
        shape = const(1)
        if shape is None:
            raise Skip(f"torch runner: Reshape '{node.name}' has a computed shape")
        dims = [int(d) for d in shape]

        def fn(x, _s):
            out = [
                x.shape[i] if d == 0 and not node.attrs.get("allowzero", 0) else d
                for i, d in enumerate(dims)
            ]
            return x.reshape(out)

        return fn

    def simple(f):
        return lambda node, const: f

    def with_attrs(f):
        return lambda node, const: lambda *xs: f(node.attrs, *xs)

    return {
        **dict.fromkeys(ACTIVATIONS, activation),
        "Conv": conv,
        "MaxPool": pool("max"),
        "AveragePool": pool("avg"),
        "DepthToSpace": d2s,
        "Gemm": gemm,
        "Reshape": reshape,
        "Identity": simple(lambda x: x),
        "Dropout": simple(lambda x, *_: x),
        "Add": simple(torch.add),
        "Sub": simple(torch.sub),
        "Mul": simple(torch.mul),
        "Div": simple(torch.div),
        "MatMul": simple(torch.matmul),
        "GlobalAveragePool": simple(lambda x: x.mean(dim=(2, 3), keepdim=True)),
        "Concat": with_attrs(lambda a, *xs: torch.cat(xs, a["axis"])),
        "Softmax": with_attrs(lambda a, x: torch.softmax(x, a.get("axis", -1))),
        "Transpose": with_attrs(
            lambda a, x: (
                x.permute(*a["perm"]) if a.get("perm") else x.permute(*reversed(range(x.ndim)))
            )
        ),
        "Flatten": with_attrs(lambda a, x: x.reshape(math.prod(x.shape[: a.get("axis", 1)]), -1)),
        "BatchNormalization": with_attrs(
            lambda a, x, s, b, m, v: F.batch_norm(x, m, v, s, b, False, 0.0, a.get("epsilon", 1e-5))
        ),
    }


def graph_module(graph, device: str = "cpu", dtype: str = "float32"):
    """An ir.Graph as a torch.nn.Module: forward(*inputs) -> tuple of outputs."""
    import torch
    import torch.nn.functional as F

    table = _op_table(torch, F)
    missing_ops = sorted({n.op for n in graph.nodes if n.op not in table})
    if missing_ops:
        why = [
            f"{op} ({REFUSED_ACTIVATIONS[op]})" if op in REFUSED_ACTIVATIONS else op
            for op in missing_ops
        ]
        raise Skip(f"torch runner: ops not covered: {', '.join(why)}")
    tdtype = getattr(torch, dtype)

    class GraphModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weights: dict[str, torch.Tensor] = {}
            for k, (name, arr) in enumerate(graph.initializers.items()):
                t = torch.from_numpy(np.array(arr))
                if t.is_floating_point():
                    t = t.to(tdtype)
                self.register_buffer(f"w{k}", t.to(device))
                self.weights[name] = f"w{k}"
            self.steps = []
            for node in graph.nodes:

                def const(i, node=node):
                    name = node.inputs[i] if i < len(node.inputs) else ""
                    return graph.initializers.get(name) if name else None

                fn = table[node.op](node, const)
                self.steps.append((fn, list(node.inputs), list(node.outputs)))
            self.inputs = [v.name for v in graph.inputs]
            self.outputs = [v.name for v in graph.outputs]

        def forward(self, *xs):
            env = dict(zip(self.inputs, xs, strict=True))
            for name, attr in self.weights.items():
                env[name] = getattr(self, attr)
            for fn, ins, outs in self.steps:
                args = [env[i] if i else None for i in ins]
                while args and args[-1] is None:
                    args.pop()
                env[outs[0]] = fn(*args)
            return tuple(env[o] for o in self.outputs)

    return GraphModule().eval()


class TorchTarget(Target):
    engine = "torch"

    def __init__(self, model: Model, config: Config, device: str, compiled: bool):
        super().__init__(f"{'torch.compile' if compiled else 'torch'}/{device}", model, config)
        self.dev, self.compiled = device, compiled
        self.dtype = "float16" if device == "cuda" and config.precision == "fp16" else "float32"
        self.module = None
        if device == "cuda":
            self.gpu_note = "n/a"
            self.transfer_note = None

    def device_init(self) -> None:
        import torch

        self.torch = torch
        torch.set_num_threads(self.config.cpu_threads)
        if self.dev == "cuda":
            if not torch.cuda.is_available():
                raise Skip("torch sees no CUDA device (torch.cuda.is_available() is False)")
            torch.cuda.init()
            torch.backends.cudnn.benchmark = True
            # fp32 means fp32 here, as for the other targets: no TF32 convolutions or matmuls.
            exact = self.config.precision == "fp32"
            torch.backends.cudnn.allow_tf32 = not exact
            torch.backends.cuda.matmul.allow_tf32 = not exact
            self.device = f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
        else:
            self.device = f"CPU, {self.config.cpu_threads} threads (torch {torch.__version__})"
        self.info["dtype"] = self.dtype

    def load(self) -> None:
        self.module = graph_module(self.model.graph, self.dev, self.dtype)

    def compile(self):
        if not self.compiled:
            return self.module
        return self.torch.compile(self.module)

    def _inputs(self, feeds):
        torch = self.torch
        xs = []
        for v in self.model.graph.inputs:
            t = torch.from_numpy(np.ascontiguousarray(feeds[v.name])).to(self.dev)
            xs.append(t.to(getattr(torch, self.dtype)) if t.is_floating_point() else t)
        return xs

    def run(self, inst, feeds) -> list[np.ndarray]:
        with self.torch.inference_mode():
            ys = inst(*self._inputs(feeds))
            return [
                y.float().cpu().numpy() if y.is_floating_point() else y.cpu().numpy() for y in ys
            ]

    def gpu_timer(self, inst):
        if self.dev != "cuda":
            return None
        torch = self.torch
        xs = self._inputs(self.model.feeds)

        def once() -> float:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            with torch.inference_mode():
                start.record()
                inst(*xs)
                end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3

        return once

    def device_memory(self) -> int | None:
        if self.dev != "cuda" or not hasattr(self, "torch"):
            return None
        return int(self.torch.cuda.memory_allocated())

    def transfer_modes(self) -> dict[str, TransferMode]:
        if self.dev != "cuda":
            return {}
        torch = self.torch

        def h2d(non_blocking):
            def fn(host):
                dev = host.to("cuda", non_blocking=non_blocking)
                torch.cuda.synchronize()
                return dev

            return fn

        def d2h(non_blocking):
            def fn(dev, host):
                host.copy_(dev, non_blocking=non_blocking)
                torch.cuda.synchronize()
                return host

            return fn

        return {
            "pageable": TransferMode(torch.from_numpy, h2d(False), d2h(False)),
            "pinned": TransferMode(
                lambda a: torch.from_numpy(a).pin_memory(), h2d(True), d2h(True)
            ),
        }

    def close(self) -> None:
        self.module = None
        if self.dev == "cuda" and hasattr(self, "torch"):
            self.torch.cuda.empty_cache()


def targets(model: Model, config: Config) -> list[Target | Skipped]:
    if not installed("torch"):
        return [missing("PyTorch", "torch/cpu", "torch")]
    out: list[Target | Skipped] = []
    for compiled in (False, True) if config.torch_compile else (False,):
        for device in ("cpu", "cuda"):
            out.append(TorchTarget(model, config, device, compiled))
    return out

"""Fake backends: delegates that claim a chosen op set, for placement and partitioning tests."""

from __future__ import annotations

from tinydl.backends import Backend, Support
from tinydl.backends.cpu import CPUKernel


class FakeBackend(Backend):
    """Claims a chosen op set and runs it with the NumPy references, counting its runs."""

    def __init__(self, name: str, ops: set[str]):
        self.name, self.ops, self.runs = name, ops, 0

    def available(self) -> bool:
        return True

    def supports(self, node, graph) -> Support:
        return Support(node.op in self.ops, f"{self.name} has no {node.op} kernel")

    def compile(self, subgraph, options):
        kernel, fake = CPUKernel(subgraph), self

        class Counting:
            def run(self, inputs):
                fake.runs += 1
                return kernel.run(inputs)

        return Counting()


class FakeGPU(FakeBackend):
    """A GPU backend with several devices: `on_device(i)` gives one with a memory of its own
    ("NAME:i"); its kernels record the device they were compiled for."""

    def __init__(self, name: str, ops: set[str], count: int = 2, index: int | None = None):
        super().__init__(name, ops)
        self.count, self.index = count, index
        self.memory = name if index is None else f"{name}:{index}"
        self.compiled_on: list[int | None] = []

    def device_names(self) -> list[str]:
        return [f"{self.name} device {i}" for i in range(self.count)]

    def on_device(self, index: int) -> FakeGPU:
        device = FakeGPU(self.name, self.ops, self.count, index)
        device.compiled_on = self.compiled_on  # one record for the backend and its devices
        return device

    def compile(self, subgraph, options):
        self.compiled_on.append(self.index)
        return super().compile(subgraph, options)

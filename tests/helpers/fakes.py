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

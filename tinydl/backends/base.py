"""The Backend interface every delegate implements (cpu, webgpu, cuda)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinydl.ir.graph import Graph, Node

# The memory graph inputs come from and host outputs go to (NumPy arrays).
HOST = "host"


@dataclass(frozen=True)
class Support:
    """A backend's answer to "can you run this node?"; `reason` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def content_key(array: np.ndarray) -> tuple:
    """A cache key for an array's content (shape, dtype, BLAKE2 digest of the bytes). A GPU
    kernel caches its uploaded constants across plans (one plan per set of input shapes) by
    node, role and this, so a table made for one input shape (Resize taps, gather offsets) is
    never reused for another, while weights are uploaded once."""
    a = np.ascontiguousarray(array)
    return (a.shape, a.dtype.str, hashlib.blake2b(a.view(np.uint8).data, digest_size=16).digest())


@dataclass(frozen=True)
class CompileOptions:
    precision: str = "fp32"
    extra: dict[str, Any] = field(default_factory=dict)


class Kernel(ABC):
    """A compiled partition: runs its subgraph on the backend's tensors."""

    @abstractmethod
    def run(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Map input value names to backend tensors; return output names to backend tensors."""


class Backend(ABC):
    name: str = ""
    # The memory this backend's tensors live in: HOST (NumPy arrays) unless the backend has a
    # device memory of its own. Backends that share a memory exchange tensors with no transfer;
    # a value crosses between two memories at a partition boundary (through the host).
    memory: str = HOST

    @abstractmethod
    def available(self) -> bool:
        """True when the backend's libraries and a device are present."""

    def unavailable_reason(self) -> str:
        return ""

    @abstractmethod
    def supports(self, node: Node, graph: Graph) -> Support: ...

    @abstractmethod
    def compile(self, subgraph: Graph, options: CompileOptions) -> Kernel: ...

    def devices(self) -> list[str]:
        """Human-readable names of the devices this backend would use."""
        return []

    def to_device(self, array: np.ndarray) -> Any:
        return array

    def to_host(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor)

    def is_device_tensor(self, tensor: Any) -> bool:
        return False

    def adopt(self, tensor: Any) -> Any:
        """This backend's own tensor for a device tensor it accepts (e.g. another library's
        array over the same memory); the default takes it as it is."""
        return tensor

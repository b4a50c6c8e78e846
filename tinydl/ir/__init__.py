"""The intermediate representation: Graph, Node, Value, and the .tdl file format."""

from tinydl.ir.graph import Dim, Graph, Node, Shape, Value

__all__ = ["Dim", "Graph", "Node", "Shape", "Value"]

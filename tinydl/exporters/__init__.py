"""Exporters: an ir.Graph written back out in another format (ONNX)."""

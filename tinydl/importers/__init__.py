"""Importers: each turns a foreign model file into an ir.Graph, and does nothing else."""

"""Runtime: load a model file, compile it for backends, run it."""

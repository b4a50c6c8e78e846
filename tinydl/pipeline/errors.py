"""The pipeline's error: a bad app (graph, types, options, config file) or a failed run."""

from tinydl.errors import TinyDLError


class PipelineError(TinyDLError):
    """An app that cannot run as written (names the component, port or edge), or a run that
    could not finish (names what hung)."""

"""The pipeline's error: a bad app (graph, types, options, config file) or a failed run."""

from tinydl.errors import TinyDLError


class PipelineError(TinyDLError):
    """An app that cannot run as written (names the component, port or edge), or a run that
    could not finish (names what hung)."""


def check_count(label: str, value) -> None:
    """A PipelineError unless `value` is a positive integer (a bool is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PipelineError(f"{label} must be a positive integer, got {value!r}")

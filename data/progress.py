"""The old import path of ``cli.progress`` (progress bars on stderr), kept for existing code."""

from cli.progress import done_line, progress, say  # noqa: F401

"""The old import path of ``cli.config`` (the configuration mechanism), kept for existing code."""

from cli.config import *  # noqa: F401,F403 (every public name, as before)

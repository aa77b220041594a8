"""The old import path of the judgment format, now the ``judgment`` package; kept for existing code."""

from data.state import State  # noqa: F401
from judgment.axtree import *  # noqa: F401,F403
from judgment.format import *  # noqa: F401,F403
from judgment.parse import *  # noqa: F401,F403
from judgment.untrusted import *  # noqa: F401,F403

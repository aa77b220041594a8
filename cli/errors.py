"""How every command ends on a bad input: one line on stderr, exit code 2.

    except (FileNotFoundError, RunDirError) as e:
        return error_exit(e)

A missing input, a stale run directory or a bad setting is the user's to fix, not a crash: the
line says what and the code 2 tells a script it was the input, as argparse's own usage errors do.
"""

from __future__ import annotations

import sys


def error_line(e: BaseException | str, prefix: str = "error") -> str:
    """``prefix: message`` on one line (a message spanning lines is joined with ``; ``)."""
    text = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
    return f"{prefix}: {text or type(e).__name__}"


def error_exit(e: BaseException | str, prefix: str = "error") -> int:
    """Print ``error_line(e, prefix)`` on stderr and return 2, the exit code of a bad input."""
    print(error_line(e, prefix), file=sys.stderr)
    return 2

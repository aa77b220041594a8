"""Progress of the long stages on stderr: a tqdm bar (count, rate, ETA) and the closing summary line.

On a terminal the bar redraws in place; elsewhere (a log file, a pipe, a Prefect worker) it
writes a line at most every 30 s, so a log holds the ETA without a line per item.
``TQDM_DISABLE=1`` (tqdm's own variable) or ``enabled=False`` turns a bar off; stdout stays for
the stage's results.
"""

from __future__ import annotations

import os
import sys


def progress(total: int | None, desc: str, unit: str = "it", enabled: bool = True, **kwargs):
    """A tqdm bar on stderr for ``total`` items of ``unit`` (``update(n)``, ``close()``, or ``with``)."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    off = not enabled or os.environ.get("TQDM_DISABLE", "").lower() not in ("", "0", "false")
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5 if tty else 30.0, disable=off, **kwargs)


def say(line: str) -> None:
    """A line on stderr that does not break a bar being drawn."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


def done_line(command: str, what: str, seconds: float, where: str | None = None) -> str:
    """The line a long command ends with: ``proposals.mine: done: 412 candidates ... in 12 s; wrote RUN/...``."""
    return f"{command}: done: {what} in {seconds:.0f} s" + (f"; {where}" if where else "")

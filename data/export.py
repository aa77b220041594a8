"""Deprecated: ``python -m data.export`` is now ``python -m dataset.export`` (same flags).

The export moved to the ``dataset`` package, above ``teacher`` in the layering; this shim runs it
by name through ``runpy``, so that ``data`` imports nothing from a layer above it."""

import runpy
import sys

if __name__ == "__main__":
    print("python -m data.export is deprecated: use `python -m dataset.export` (same flags)", file=sys.stderr)
    runpy.run_module("dataset.export", run_name="__main__", alter_sys=True)

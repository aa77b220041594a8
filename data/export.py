"""Deprecated: ``python -m data.export`` is now ``python -m dataset.export`` (same flags).

The export moved to the ``dataset`` package, above ``teacher`` in the layering; this shim runs it
by name through ``runpy``, so that ``data`` imports nothing from a layer above it."""

import runpy

from cli.config import deprecation

if __name__ == "__main__":
    deprecation("python -m data.export", "python -m dataset.export (same flags)")
    runpy.run_module("dataset.export", run_name="__main__", alter_sys=True)

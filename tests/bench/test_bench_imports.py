"""Importing a bench script in a process leaves ``bench/`` off ``sys.path``: that folder holds
``proposals.py`` and ``search.py``, which would shadow the project's packages of the same names in
every process started from it afterwards (a Dask worker spawned by a later test failed to unpickle
its task: "No module named 'proposals.pool'; 'proposals' is not a package", and the suite hung)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, pathlib, sys
root = pathlib.Path(sys.argv[1])
bench = root / "bench"
for path in sorted(bench.glob("*.py")):
    importlib.import_module(f"bench.{path.stem}")
    shadow = [p for p in sys.path if p and pathlib.Path(p).resolve() == bench]
    assert not shadow, f"importing bench/{path.name} put bench/ on sys.path"
import proposals.pool, search.miniwob
print("ok")
"""


def test_no_bench_script_puts_its_folder_on_sys_path():
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]

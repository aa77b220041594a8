"""docs/tutorial.md is run as written: its ``bash`` and ``python`` blocks, in order, from a fresh
copy of the repository root (the code and the bundled data linked in, nothing cached), so the
page cannot drift from the code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```$", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str]]:
    """The page's ``bash`` and ``python`` blocks, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def test_blocks_are_found_in_order():
    found = blocks("a\n```bash\necho 1\n```\ntext\n```python\nprint(2)\n```\n```text\nnot run\n```\n")
    assert found == [("bash", "echo 1\n"), ("python", "print(2)\n")]


def workdir(tmp_path: Path) -> Path:
    """A repository root of its own: the code, data and configs linked in, no runs, no LLM cache."""
    for name in ("data", "configs", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def run_block(kind: str, code: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    cmd = ["bash", "-euo", "pipefail", "-c", code] if kind == "bash" else [sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tutorial_runs_as_written(tmp_path):
    page = blocks(TUTORIAL.read_text())
    assert {kind for kind, _ in page} == {"bash", "python"}
    cwd = workdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1",
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    for i, (kind, code) in enumerate(page, 1):
        done = run_block(kind, code, cwd, env)
        assert done.returncode == 0, f"block {i} ({kind}) failed:\n{code}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    run = cwd / "runs" / "tutorial"
    assert len(__import__("pandas").read_parquet(run / "export" / "trl-labels" / "train.parquet")) >= 1
    assert (run / "prm" / "config.json").exists()
    summary = json.loads((run / "search" / "summary.json").read_text())
    assert 0.0 <= summary["macro"]["success_rate"] <= 1.0

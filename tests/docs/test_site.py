"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page
missing from the navigation, or an API page whose module no longer exists fails the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make setup installs it)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "site" / "stages" / "graphs" / "index.html").read_text()
    assert "Interaction Element Graphs" in page
    api = (tmp_path / "site" / "api" / "graph" / "index.html").read_text()
    assert "load_graph" in api            # mkdocstrings rendered the docstrings, not just the page
    assert ":mod:`" not in api and "graph.passes</code>" in api   # Sphinx roles render as code
    # the API pages come from docstrings: they must not send a user to ../shared either
    assert not [str(f) for f in (tmp_path / "site").rglob("*.html") if "../shared" in f.read_text()]


def test_docs_and_readme_never_point_to_the_shared_folder():
    """Users have the repository, not the development machine's ``../shared`` folder."""
    texts = {p: p.read_text() for p in [ROOT / "README.md", *DOCS.rglob("*.md")]}
    assert not [str(p) for p, text in texts.items() if "../shared" in text or "shared/docs" in text]


def test_readme_is_short_and_carries_no_dated_timings():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert not re.search(r"\b\d+(\.\d+)? ?(s|min|seconds|minutes)\b", readme), "timings go in bench/RESULTS.md"
    assert readme.startswith("# surfprm\n\n```\nmake run") and "make test" in readme.split("```")[1]

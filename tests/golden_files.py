"""Golden-file checks: compare a test's outputs with a file under ``tests/golden/`` and fail with a
unified diff of the two; with ``SURFPRM_UPDATE_GOLDEN=1`` (``make golden``) write the file instead.

Outputs are made stable before they are written or compared (``stable``): keys whose values vary
from run to run (durations, timestamps, versions, digests of bytes that carry a library version)
become a placeholder, and per-run strings (the temporary folder, a server's port) are replaced.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SURFPRM_UPDATE_GOLDEN") == "1"
# Keys whose values change between two runs of the same code on the same input.
VARYING = frozenset({"seconds", "elapsed_s", "duration_s", "started_at", "finished_at", "created_at", "timestamp",
                     "version", "versions", "python", "pyarrow", "host", "pid"})
PORT = re.compile(r"(127\.0\.0\.1|localhost):\d+")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MAX_DIFF_LINES = 200


def stable(obj, replace: dict[str, str] | None = None, varying: Iterable[str] = VARYING):
    """``obj`` with the varying keys' values as ``"<varies>"``, digests (keys ending in ``sha256``,
    ``sha256:<hex>`` fingerprints) as ``<sha256>``, and in every string each ``replace`` key written
    as its value and a local port as ``PORT``."""
    varying = frozenset(varying)
    replace = replace or {}
    if isinstance(obj, dict):
        return {k: "<varies>" if k in varying else "<sha256>" if str(k).endswith("sha256") and v
                else stable(v, replace, varying) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [stable(v, replace, varying) for v in obj]
    if isinstance(obj, str):
        for old, new in replace.items():
            obj = obj.replace(old, new)
        return DIGEST.sub("sha256:<sha256>", PORT.sub(r"\1:PORT", obj))
    return obj


def dumps(obj) -> str:
    """The golden file's text: Markdown and other text as it is, anything else as indented JSON
    with sorted keys (one field a line, so a diff points at the field)."""
    if isinstance(obj, str):
        return obj if obj.endswith("\n") else obj + "\n"
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def check(relpath: str, found) -> None:
    """Compare ``found`` (already made ``stable``) with ``tests/golden/<relpath>``; write it there
    instead when ``SURFPRM_UPDATE_GOLDEN=1``."""
    path = GOLDEN / relpath
    text = dumps(found)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make golden` (SURFPRM_UPDATE_GOLDEN=1) and review the new file")
    expected = path.read_text()
    if text == expected:
        return
    diff = list(difflib.unified_diff(expected.splitlines(), text.splitlines(), f"golden/{relpath}", "this run",
                                     lineterm="", n=2))
    more = f"\n... {len(diff) - MAX_DIFF_LINES} more diff lines" if len(diff) > MAX_DIFF_LINES else ""
    pytest.fail(f"output differs from tests/golden/{relpath} (an intended change: `make golden`, then review "
                f"`git diff tests/golden`):\n" + "\n".join(diff[:MAX_DIFF_LINES]) + more, pytrace=False)

"""Disk cache of LLM responses, keyed by a hash of the full request.

One JSON file per request under ``<dir>/<hash[:2]>/<hash>.json``, written to a temp file and
renamed into place. A rename is atomic on POSIX, so concurrent writers (threads or processes,
several runs sharing one cache) never expose a half-written entry: the last writer of the same
key wins with an identical request, and a reader sees either nothing or a whole file. No lock is
needed and nothing has to be opened at start-up, which keeps a resumed run cheap.

Entries are not fsynced: a killed process loses nothing (the kernel holds the written file), and
an entry that a power failure leaves empty or torn reads as a miss and is asked again, so an
fsync would buy nothing a cache needs, at ~3 ms of disk wait and a quarter of the client's CPU
per answer at high concurrency (bench/RESULTS.md).

Only successful responses are stored; failures are retried on the next run. The API key is never
part of a request body, so it can be neither in a key nor in a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

from data.readers.safe_pickle import read_regular

# A response body is at most llm.client.MAX_RESPONSE_BYTES; an entry holds it and its request.
MAX_ENTRY_BYTES = 32 * 1024 * 1024


def request_key(payload: dict, endpoint: str) -> str:
    """Hex SHA-256 of the request body and the endpoint that answers it.

    ``payload`` holds the model, the messages and every sampling parameter (seed included).
    The endpoint is part of the key because two servers may serve different weights under the
    same model name (``default`` on vLLM, a local folder name)."""
    canon = json.dumps({"endpoint": endpoint, "request": payload}, sort_keys=True,
                       ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


class ResponseCache:
    """Response bodies on disk, one file per request hash."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored response body, or None when absent, unreadable or over ``MAX_ENTRY_BYTES``
        (a miss, never an error: the caller also checks the body it gets, as it checks an answer)."""
        try:
            # a FIFO planted in the cache never blocks; it, a device or a larger file is a miss
            entry = json.loads(read_regular(self.path(key), MAX_ENTRY_BYTES).decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        response = entry.get("response") if isinstance(entry, dict) else None
        return response if isinstance(response, dict) else None

    def put(self, key: str, payload: dict, response: dict) -> None:
        """Store ``response`` for ``payload`` (the request is kept beside it for inspection)."""
        entry = {"key": key, "created": time.time(), "request": payload, "response": response}
        path = self.path(key)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:          # the folder exists after the first few hundred puts: no mkdir syscall per answer
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)   # the umask applies, as to any file
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(entry, ensure_ascii=False).encode("utf-8"))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

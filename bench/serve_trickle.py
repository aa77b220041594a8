"""Threads and memory of ``llm.serve``'s server under a trickle of half-sent request bodies.

    .venv/bin/python bench/serve_trickle.py [--connections 400] [--seconds 3]

Opens ``--connections`` connections on 127.0.0.1 to a ``ChatServer`` with ``python -m
llm.serve``'s admission limits (4 active + 32 queued, the default connection cap and request time
limit), each declaring a 4 MiB body and sending one byte of it, waits ``--seconds`` and prints
the server process's threads and RSS, and what the server did with the connections.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli.config import make_parser  # noqa: E402
from llm.serve import DEFAULT_MAX_ACTIVE, DEFAULT_MAX_QUEUE, fixed_answer, serve_in_thread  # noqa: E402

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n{"


def rss_mb() -> int:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) // 1024


def main() -> None:
    ap = make_parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=400)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    srv = serve_in_thread(fixed_answer("ok"), "m", max_inflight=DEFAULT_MAX_ACTIVE + DEFAULT_MAX_QUEUE)
    rss0, threads0 = rss_mb(), threading.active_count()
    socks = []
    for _ in range(args.connections):
        s = socket.create_connection(srv.server_address[:2])
        s.sendall(HEAD)
        socks.append(s)
    time.sleep(args.seconds)
    print(f"{args.connections} trickling connections: threads {threads0} -> {threading.active_count()}, "
          f"RSS {rss0} -> {rss_mb()} MB; server: {getattr(srv, 'open_connections', '?')} open, "
          f"{srv.inflight} admitted, {getattr(srv, 'refused_connections', '?')} refused at accept")
    for s in socks:
        s.close()
    srv.shutdown()
    srv.server_close()


if __name__ == "__main__":
    main()

"""python bench/viewer_limits.py --run RUN [--baseline] [--connections 300] [--files 256] [--seconds 30]

The pair viewer under slow clients (issue 40, item 6): a server limited to ``--files`` open files
gets ``--connections`` connections that send half a request and hold it; once a second a fresh
client asks for ``/`` (2 s to answer). Prints one JSON line: answered and failed requests, the
bytes the server wrote to stderr, and the peak RSS growth while a 64 MiB form body streams to
``/audit/0``. ``--baseline`` serves the same application with uvicorn's defaults, as the viewer
did before its deadline, limits and quiet log (``dataset.viewer.server``).
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli.config import make_parser

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys, uvicorn
from dataset.viewer.app import make_app
from dataset.viewer.server import bind, serve
from dataset.viewer.source import PairSource
app = make_app(PairSource.open(sys.argv[1]), audit="bench", sample=2)
if sys.argv[2] == "baseline":
    sock = bind("127.0.0.1", 0); sock.listen(2048)
    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}/", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
else:
    serve(app, "127.0.0.1", 0, timeout_s=float(sys.argv[3]))
"""


def peak_rss_kb(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", text).group(1))


def probe(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def stream_body(port: int, mib: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /audit/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b"a" * (1 << 16))
        try:
            for _ in range(mib * 16):
                s.sendall(chunk)
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass                       # the server answered and closed: what a limit does
        return s.recv(12)


def main() -> int:
    ap = make_parser("bench/viewer_limits.py", __doc__.split("\n\n", 1)[1])
    ap.add_argument("--run", required=True)
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--timeout", type=float, default=10, help="the viewer's --request-timeout")
    args = ap.parse_args()

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.files, args.files))

    err = tempfile.TemporaryFile()
    child = subprocess.Popen([sys.executable, "-c", CHILD, args.run, "baseline" if args.baseline else "ours",
                              str(args.timeout)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=limit)
    try:
        port = int(re.search(r":(\d+)/", child.stdout.readline()).group(1))
        rss0 = peak_rss_kb(child.pid)
        answer = stream_body(port, 64)
        rss_mib = (peak_rss_kb(child.pid) - rss0) / 1024
        held, answered, failed = [], 0, 0
        for _ in range(args.connections):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                held.append(s)
            except OSError:
                break
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            ok = probe(port)
            answered, failed = answered + ok, failed + (not ok)
            time.sleep(1)
        for s in held:
            s.close()
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:      # uvicorn's graceful shutdown waits for the held connections
            child.kill()
            child.wait()
    err.seek(0, 2)
    print(json.dumps({"server": "baseline" if args.baseline else "viewer", "connections": len(held),
                      "files": args.files, "seconds": args.seconds, "answered": answered, "failed": failed,
                      "stderr_bytes": err.tell(), "post_64mib": answer.decode("latin-1").strip(),
                      "peak_rss_growth_mib": round(rss_mib, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

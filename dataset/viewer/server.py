"""How the viewer is served: uvicorn on an already bound socket, with limits against clients that
hold connections open.

uvicorn's own settings do what they can: ``h11_max_incomplete_event_size`` caps the request line
and headers (``MAX_HEAD_BYTES``), ``limit_concurrency`` answers 503 past ``MAX_CONNECTIONS`` open
connections, ``timeout_keep_alive`` closes idle kept-alive ones. uvicorn has no deadline for a
request that arrives slowly (its keep-alive timer is disarmed by every byte, and is not armed
before the first request), so ``DeadlineH11Protocol`` adds one: a connection whose request has
not fully arrived within ``timeout_s`` of its start (or of the previous response) is closed; the
body is read with the same deadline (``dataset.viewer.app.read_body`` limits its size).

When the process runs out of file descriptors, asyncio logs every failed ``accept()`` with a
traceback (in the issue: 216 MB of them in 65 s); ``quiet_exceptions`` logs such errors as one line,
at most once every ``QUIET_S`` seconds, and ``raise_fd_limit`` lifts the soft descriptor limit to
the hard one first.
"""

from __future__ import annotations

import asyncio
import errno
import resource
import socket
import sys
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 64 * 1024
MAX_CONNECTIONS = 100
KEEP_ALIVE_S = 5
QUIET_S = 10.0


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive: armed when the
    connection opens and after each response, disarmed once the request is read through."""

    timeout_s = 10.0            # set per server by ``protocol_with_deadline``

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._deadline = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and not cycle.more_body and not cycle.response_complete:
            self._disarm()          # the whole request is in: the app's answer takes what it takes

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle is None or self.cycle.response_complete:
            self._arm()             # the next request on this connection gets its own deadline

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol_with_deadline(timeout_s: float) -> type[DeadlineH11Protocol]:
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"timeout_s": timeout_s})


def raise_fd_limit() -> None:
    """The soft limit on open files up to the hard one (what a server may use without privileges)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536),
                                                        hard))
        except (ValueError, OSError):
            pass


def quiet_exceptions(loop: asyncio.AbstractEventLoop) -> None:
    """Log the loop's out-of-resource errors (EMFILE, ENFILE, ENOBUFS, ENOMEM on ``accept``) as one
    line at most every ``QUIET_S`` seconds, with how many were left unsaid; the rest as asyncio does."""
    last = {"at": -QUIET_S, "skipped": 0}

    def handler(loop, context):
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            now = time.monotonic()
            if now - last["at"] < QUIET_S:
                last["skipped"] += 1
                return
            more = f" ({last['skipped']} more since the last line)" if last["skipped"] else ""
            print(f"warning: {context.get('message', 'accept failed')}: {exc.strerror}: new connections wait{more}",
                  file=sys.stderr, flush=True)
            last.update(at=now, skipped=0)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``; a taken port is one line that says what to do."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise OSError(f"port {port} on {host} is taken (another viewer?): --port 0 picks a free one, "
                          f"or stop what listens there") from None
        raise
    return sock


def serve(app, host: str, port: int, timeout_s: float = 10.0) -> None:
    """Run ``app`` on ``host:port`` (0: a free port, printed) with the limits above."""
    import uvicorn

    raise_fd_limit()
    sock = bind(host, port)
    sock.listen(2048)              # before the line that names the port: a client may connect at once
    url_host = f"[{host}]" if ":" in host else host
    print(f"serving on http://{url_host}:{sock.getsockname()[1]}/ (Ctrl-C stops)", flush=True)
    config = uvicorn.Config(app, log_level="warning", http=protocol_with_deadline(timeout_s),
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES, limit_concurrency=MAX_CONNECTIONS,
                            timeout_keep_alive=KEEP_ALIVE_S)
    server = uvicorn.Server(config)

    async def run():
        quiet_exceptions(asyncio.get_running_loop())
        await server.serve(sockets=[sock])

    asyncio.run(run())

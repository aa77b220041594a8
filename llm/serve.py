"""Serve a local transformers model over the OpenAI chat-completions protocol.

    python -m llm.serve [--model PATH] [--host 127.0.0.1] [--port 8011]

Defaults to the default embedded model (``llm.embedded.default_model_dir()``). Endpoints: ``POST /v1/chat/completions``
(non-streaming; usage counted with the model's tokenizer), ``GET /v1/models`` and
``GET /health``. Point any client at ``http://HOST:PORT/v1``, e.g. ``llm.client`` with
``--base-url http://127.0.0.1:8011/v1 --model SmolLM2-135M-Instruct``, so every code path,
the demo included, can run through the real HTTP client.

Every error is an OpenAI error body (``{"error": {"message", "type", "code"}}``), never an
HTML page. A request that cannot be served is a 4xx, which clients do not retry: 400 for
malformed JSON (too deeply nested included), a field of the wrong type, out of range or not
finite (NaN, Infinity), ``max_tokens`` above ``--max-tokens-cap``, a prompt that does not fit
the model's context with its ``max_tokens`` (vLLM's check and message), or bytes that are not
HTTP (a TLS handshake); 413 for a body over ``--max-body-bytes`` (refused from its
``Content-Length``, before a byte of it is read); 411 for a chunked body; 405 for a wrong
method; 404 for an unknown path; 408 for a request whose line, headers and body are not all in
within ``--request-time-limit-s``. Only faults are 5xx: 429 (with ``Retry-After``) when
``--max-queue`` requests already wait, 503 when a generation runs past ``--time-limit-s`` or
``--max-connections`` connections are already open (answered at accept, nothing read), 500
for a fault while answering a valid request.

**Admission before reading.** A request is admitted (or refused with 429) from its headers,
before its body is read, and the body is read in chunks as it arrives, never allocated from its
``Content-Length``; the time limit counts from the request's first byte to its body's last, not
per read. So a trickle of half-sent bodies holds at most ``--max-connections`` threads, at most
``--max-active`` + ``--max-queue`` bodies, the bytes actually sent, and each for at most the
time limit.

The model runs one decoding step at a time for up to ``--max-active`` generations, which take
turns step by step (so a short request is not stuck behind a long one); further requests wait
in arrival order. ``/health`` and ``/v1/models`` answer at once whatever runs. A generation
stops within a step when its client disconnects. For throughput use vLLM or SGLang.
"""

from __future__ import annotations

import contextlib
import http.client
import inspect
import json
import logging
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from llm.local import Cancelled, check_request

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024     # a chat request for an 8K-token context is well under 1 MB
# The project's own endpoint callers ask for up to 1024 tokens (teacher.verify, prm.evaluate's
# ENDPOINT_MAX_TOKENS): a lower cap would refuse them. SmolLM2-135M on this 2-core machine
# decodes ~13 tokens/s on one torch thread, so 1024 tokens take ~75 s at worst (most answers
# stop at EOS far sooner) and the time limit ends anything slower.
DEFAULT_MAX_TOKENS_CAP = 1024
DEFAULT_TIME_LIMIT_S = 120.0
DEFAULT_THREADS = 1                  # torch threads: 2 decode ~4x slower than 1 on 2 shared cores
DEFAULT_MAX_ACTIVE = 4
DEFAULT_MAX_QUEUE = 32
RETRY_AFTER_S = 5
IDLE_TIMEOUT_S = 60                  # a connection that sends nothing for this long is closed
DEFAULT_MAX_CONNECTIONS = 128        # open connections (one thread each); more get 503 at accept
DEFAULT_REQUEST_TIME_LIMIT_S = 30.0  # first byte to last body byte: a 4 MiB body at ~1 Mbit/s
BODY_CHUNK = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024         # all headers together (a chat request sends < 1 KiB)
DRAIN_BYTES, DRAIN_S = 64 * 1024 * 1024, 5.0   # unread input discarded before closing


class ClientGone(Exception):
    """The client closed its connection before its request was complete."""


class RequestError(ValueError):
    """A request refused with ``status`` (a 4xx) before it reaches the model."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def client_gone(sock: socket.socket) -> bool:
    """Whether the peer closed or reset ``sock`` (one non-blocking poll, no read)."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & (select.POLLHUP | select.POLLERR):
            return True
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""   # readable and empty: EOF
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


class ChatServer(ThreadingHTTPServer):
    """An OpenAI-protocol server around ``complete(request_body) -> response_body``.

    Requests are validated (``llm.local.check_request``, ``max_tokens`` at most
    ``max_tokens_cap``, then ``check(request)`` if given, e.g. the model's context) before
    ``complete`` sees them; ``complete`` raises ``ValueError`` for a request it still cannot
    answer (HTTP 400). A ``complete`` that takes a ``stop`` keyword gets a callable returning
    ``"disconnected"`` once the client is gone or ``"time_limit"`` after ``time_limit_s``, and
    may raise ``llm.local.Cancelled`` with it. ``max_inflight`` bounds the requests being
    checked or completed at once (429 beyond). The defaults set no limit but the body size, so
    a scripted ``complete`` answers any number of requests at once."""

    daemon_threads = True
    request_queue_size = 128        # the stdlib default (5) refuses bursts of new connections

    def __init__(self, address: tuple[str, int], complete: Callable[..., dict], model_id: str,
                 handler: type[BaseHTTPRequestHandler] | None = None, *, check: Callable[[dict], None] | None = None,
                 max_tokens_cap: int | None = None, max_inflight: int | None = None,
                 time_limit_s: float | None = None, max_body_bytes: int = MAX_BODY_BYTES,
                 max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
                 request_time_limit_s: float | None = DEFAULT_REQUEST_TIME_LIMIT_S):
        super().__init__(address, handler or OpenAIHandler)
        self.complete = complete
        self.model_id = model_id
        self.check = check
        self.max_tokens_cap = max_tokens_cap
        self.max_inflight = max_inflight
        self.time_limit_s = time_limit_s
        self.max_body_bytes = max_body_bytes
        try:
            self.complete_takes_stop = "stop" in inspect.signature(complete).parameters
        except (TypeError, ValueError):
            self.complete_takes_stop = False
        self.inflight = 0
        self.cancelled = {"disconnected": 0, "time_limit": 0}
        self._inflight_lock = threading.Lock()
        self.max_connections = max_connections
        self.request_time_limit_s = request_time_limit_s
        self.open_connections = 0                 # open now (each holds a handler thread)
        self.refused_connections = 0         # answered 503 at accept
        self.expired_reads = 0               # requests cut off by the time limit
        self._reading: dict = {}             # handler -> deadline of the request it is reading

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def admit(self) -> bool:
        with self._inflight_lock:
            if self.max_inflight is not None and self.inflight >= self.max_inflight:
                return False
            self.inflight += 1
            return True

    def release(self) -> None:
        with self._inflight_lock:
            self.inflight -= 1

    # -- connections: a cap at accept, a deadline per request read --------------------------
    def process_request(self, request, client_address) -> None:
        with self._inflight_lock:
            full = self.max_connections is not None and self.open_connections >= self.max_connections
            if not full:
                self.open_connections += 1
        if full:                 # on the accepting thread: a few hundred bytes into an empty buffer
            self.refused_connections += 1
            body = json.dumps({"error": {"message": f"{self.max_connections} connections are open; retry later",
                                         "type": "server_error", "code": 503}}).encode()
            try:
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\nRetry-After: %d\r\nConnection: close\r\n\r\n%s"
                                % (len(body), RETRY_AFTER_S, body))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed()

    def _closed(self) -> None:
        with self._inflight_lock:
            self.open_connections -= 1

    def reading(self, handler, done: bool = False) -> None:
        """``handler`` starts (or, ``done``, stops) reading a request: past the time limit its
        socket's read side is shut, which ends a blocked read at once (``service_actions``)."""
        with self._inflight_lock:
            if done:
                self._reading.pop(handler, None)
            elif self.request_time_limit_s is not None:
                self._reading[handler] = time.monotonic() + self.request_time_limit_s

    def service_actions(self) -> None:
        """Called by ``serve_forever`` between polls: cut off the requests still being read past
        their deadline (their handler answers 408)."""
        now = time.monotonic()
        with self._inflight_lock:     # under the lock: a handler that is done reading is never cut
            for h in [h for h, deadline in self._reading.items() if deadline < now]:
                del self._reading[h]
                self.expired_reads += 1
                h.read_expired = True
                try:
                    h.connection.shutdown(socket.SHUT_RD)
                except OSError:
                    pass


class _HeaderBudget:
    """The handler's ``rfile`` while a request's headers are read: past ``left`` bytes in all,
    ``readline`` raises ``LineTooLong``, which the stdlib answers with 431. Its own limits (64 KiB
    a line, 100 headers) still let one request hold 6.4 MB of headers."""

    def __init__(self, raw, left: int):
        self.raw, self.left = raw, left

    def readline(self, limit: int = -1) -> bytes:
        line = self.raw.readline(self.left + 1 if limit < 0 else min(limit, self.left + 1))
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong(f"request line and headers over {MAX_HEADER_BYTES} bytes")
        return line

    def __getattr__(self, name):
        return getattr(self.raw, name)


class OpenAIHandler(BaseHTTPRequestHandler):
    """Routes the OpenAI paths to the server's ``complete``; errors in OpenAI's error shape."""

    protocol_version = "HTTP/1.1"     # keep-alive: a client's pool reuses its connections
    # Headers and body leave in separate writes; with Nagle on, the client's delayed ACK adds
    # ~40 ms to every response (16 req/s lost at 80 req/s in bench/llm_client.py).
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT_S          # a silent or half-sent request does not hold a thread forever
    server: ChatServer
    _linger = 0                       # bytes of unread input to discard before closing
    read_expired = False              # the server cut this request off (request time limit)

    def log_message(self, fmt, *args) -> None:   # access lines go to logging, not stderr
        log.debug("%s %s", self.address_string(), fmt % args)

    # -- responses ------------------------------------------------------------------------

    def send_json(self, status: int, obj, headers: dict | None = None) -> None:
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, message: str, kind: str = "invalid_request_error",
                        headers: dict | None = None) -> None:
        self.send_json(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's protocol errors (bad request line, header too long, ...) as JSON, and
        the connection closed (its input may be unread: drained first, see ``finish``)."""
        self.close_connection = True
        self._linger = max(self._linger, 1)
        if self.read_expired:           # the request line or headers came too slowly
            code, message = 408, self._expired_message()
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"     # answer with a status line and headers
        message = (message or self.responses.get(code, ("error",))[0])[:300]
        self.log_error("code %d, message %s", code, message)
        kind = "server_error" if code >= 500 else "not_found_error" if code == 404 else "invalid_request_error"
        self.send_error_json(code, message, kind, {"Connection": "close"})

    def _refuse_and_close(self, status: int, message: str, kind: str = "invalid_request_error",
                          linger: int = 1, headers: dict | None = None) -> None:
        """Answer an error and close the connection, its unread input drained (``finish``)."""
        self.close_connection = True
        self._linger = max(self._linger, linger)
        self.send_error_json(status, message, kind, {"Connection": "close", **(headers or {})})

    # -- connection handling ----------------------------------------------------------------

    def handle_one_request(self) -> None:
        # A request line starts with a method name (or a stray CRLF): anything else, e.g. a TLS
        # ClientHello, is refused at once rather than waited on for a line end that never comes.
        try:
            first = self.rfile.peek(1)[:1]
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        if first and not (first.isalpha() or first in b"\r\n"):
            self.requestline, self.request_version, self.command = "", "HTTP/1.1", ""
            hint = " (a TLS handshake? this server speaks plain HTTP)" if first in b"\x16\x80" else ""
            self.send_error(400, f"not an HTTP request{hint}")
            return
        if first:
            self.server.reading(self)     # the time limit runs from the request's first byte
        try:
            super().handle_one_request()
        finally:
            self.server.reading(self, done=True)
        if self.read_expired:
            self.close_connection = True

    def parse_request(self) -> bool:
        # The request line is read (the stdlib caps it at 64 KiB): its headers read under a budget.
        rfile, self.rfile = self.rfile, _HeaderBudget(self.rfile, MAX_HEADER_BYTES)
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = rfile
        if not parsed:
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 requests are not supported")
            return False
        if self.read_expired:           # the headers were cut off: what arrived is not a request
            self.send_error(408)
            return False
        return True

    def handle_expect_100(self) -> bool:
        # Refuse an unacceptable body before the client sends it.
        problem = self._body_problem()
        if problem:
            self._refuse_and_close(*problem, linger=0)      # the client sends nothing more
            return False
        return super().handle_expect_100()

    def _expired_message(self) -> str:
        return (f"the request was not received within this server's limit of {self.server.request_time_limit_s:g} s "
                "(--request-time-limit-s)")

    def finish(self) -> None:
        self.server.reading(self, done=True)
        try:
            if not self.wfile.closed:
                self.wfile.flush()
        except OSError:
            pass
        if self._linger:
            self._drain()
        super().finish()

    def _drain(self) -> None:
        """Discard (a bounded amount of) unread input before closing: closing a socket with
        unread data sends a reset, which can destroy the error response before the client reads
        it -- and a client retries a connection error. Memory stays at one 64 KB buffer."""
        sock, deadline, left = self.connection, time.monotonic() + DRAIN_S, DRAIN_BYTES
        try:
            sock.shutdown(socket.SHUT_WR)
            while left > 0 and (remaining := deadline - time.monotonic()) > 0:
                sock.settimeout(min(1.0, remaining))
                chunk = sock.recv(65536)
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    # -- bodies ----------------------------------------------------------------------------

    def _body_problem(self) -> tuple[int, str] | None:
        """(status, message) when the request's body must be refused from its headers."""
        if self.headers.get("Transfer-Encoding"):
            return 411, "chunked request bodies are not supported: send a Content-Length"
        raw = self.headers.get("Content-Length") or "0"
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if length < 0 or len(raw) > 20:
            return 400, f"bad Content-Length {raw[:40]!r}"
        if length > self.server.max_body_bytes:
            return 413, (f"request body of {length} bytes is over this server's limit of "
                         f"{self.server.max_body_bytes} bytes (--max-body-bytes)")
        return None

    def _read_body(self, length: int) -> bytes:
        """``length`` bytes of body, read in chunks as they arrive (``rfile.read(length)`` would
        allocate all of them up front, for a client that may send one). ``RequestError`` 408 when
        the time limit cut the request off, 400 when the client stopped short."""
        buf, idle = bytearray(), False
        try:
            while len(buf) < length:
                chunk = self.rfile.read1(min(BODY_CHUNK, length - len(buf)))
                if not chunk:
                    break
                buf += chunk
        except TimeoutError:
            idle = True
        except OSError:
            pass
        if len(buf) < length:
            self.close_connection = True
            if self.read_expired:
                raise RequestError(408, self._expired_message())
            if idle:
                raise RequestError(408, f"no byte of the request body came for {self.timeout} s")
            raise ClientGone(f"the client closed after {len(buf)} of its {length} body bytes")
        return bytes(buf)

    def read_json(self) -> dict:
        """The request body as a JSON object. ``RequestError`` (a ``ValueError``) for a body
        refused from its headers -- the connection is then closed unread -- and ``ValueError``
        for anything but a JSON object."""
        problem = self._body_problem()
        if problem:
            self.close_connection = True
            self._linger = 1
            raise RequestError(*problem)
        length = int(self.headers.get("Content-Length") or "0")
        data = self._read_body(length)
        self.server.reading(self, done=True)
        try:
            body = json.loads(data or b"null", parse_constant=_refuse_constant)
        except RecursionError:
            raise ValueError("request body is nested too deeply") from None
        if not isinstance(body, dict):
            raise ValueError("request body must be a JSON object")
        return body

    # -- routes ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": self.server.model_id, "object": "model", "created": 0, "owned_by": "surfprm"}]})
        elif path in ("/health", "/v1/health"):
            self.send_json(200, {"status": "ok", "inflight": self.server.inflight})
        else:
            self.send_error_json(404, f"no route {path}", "not_found_error")

    def _method_not_allowed(self) -> None:
        self._refuse_and_close(405, f"method {self.command} is not allowed: GET /v1/models, /health; "
                                    "POST /v1/chat/completions")

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _method_not_allowed

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._refuse_and_close(404, f"no route {path}", "not_found_error")
            return
        srv = self.server
        problem = self._body_problem()
        if problem:                        # refused from its headers, unread
            self._refuse_and_close(*problem)
            return
        if not srv.admit():                # before the body is read: a refused body is never held
            self._refuse_and_close(429, f"{srv.max_inflight} requests are in progress or waiting; retry later",
                                   "rate_limit_error", headers={"Retry-After": str(RETRY_AFTER_S)})
            return
        try:
            try:
                request = self.read_json()
                check_request(request, srv.max_tokens_cap)
            except RequestError as e:      # cut off: the connection is closed
                with contextlib.suppress(OSError):
                    self._refuse_and_close(e.status, str(e))
                return
            except ClientGone as e:        # nobody to answer
                log.info("%s: %s", self.address_string(), e)
                self.close_connection = True
                return
            except ValueError as e:        # a bad request, JSON decoding errors included
                self.send_error_json(400, str(e))
                return
            if srv.check is not None:
                srv.check(request)
            if srv.complete_takes_stop:
                response = srv.complete(request, stop=self._stopper())
            else:
                response = srv.complete(request)
        except Cancelled as e:
            srv.cancelled[e.reason] = srv.cancelled.get(e.reason, 0) + 1
            if e.reason == "time_limit":
                self.send_error_json(503, f"the generation ran past this server's time limit of {srv.time_limit_s:g} s",
                                     "server_error", {"Retry-After": str(RETRY_AFTER_S)})
            else:                          # the client is gone: nobody to answer
                log.info("%s: generation stopped (%s)", self.address_string(), e.reason)
                self.close_connection = True
        except ValueError as e:            # a request the model cannot serve (e.g. past its context)
            self.send_error_json(400, str(e))
        except Exception as e:             # a server fault: the client retries 5xx
            log.exception("completion failed")
            self.send_error_json(500, f"{type(e).__name__}: {e}", "server_error")
        else:
            self.send_json(200, response)
        finally:
            srv.release()

    def _stopper(self) -> Callable[[], str | None]:
        """``stop()`` for ``complete``: ``"disconnected"`` once the client is gone,
        ``"time_limit"`` after the server's time limit (counted from now)."""
        sock, limit = self.connection, self.server.time_limit_s
        deadline = None if limit is None else time.monotonic() + limit

        def stop() -> str | None:
            if client_gone(sock):
                return "disconnected"
            if deadline is not None and time.monotonic() > deadline:
                return "time_limit"
            return None

        return stop


def serve_in_thread(complete: Callable[..., dict], model_id: str, host: str = "127.0.0.1",
                    port: int = 0, handler: type[BaseHTTPRequestHandler] | None = None, **limits) -> ChatServer:
    """Start a server on a background thread (port 0: any free port); ``shutdown()`` stops it.
    ``limits``: ``ChatServer``'s keyword arguments (``check``, ``max_tokens_cap``, ...)."""
    server = ChatServer((host, port), complete, model_id, handler, **limits)
    # A short poll interval: shutdown() returns within 50 ms (tests start and stop many servers).
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"serve:{server.base_url}",
                     daemon=True).start()
    return server


def fixed_answer(text: str) -> Callable[[dict], dict]:
    """A ``complete`` function that answers every request with ``text`` (a scripted peer for
    benchmarks and tests that need an OpenAI-protocol server, e.g. for fill values)."""
    def complete(request: dict) -> dict:
        return {"id": "fixed", "object": "chat.completion", "model": request.get("model", "fixed"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
    return complete


def model_server(model, host: str = "127.0.0.1", port: int = 0, *, max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP,
                 max_active: int = DEFAULT_MAX_ACTIVE, max_queue: int = DEFAULT_MAX_QUEUE,
                 time_limit_s: float | None = DEFAULT_TIME_LIMIT_S, max_body_bytes: int = MAX_BODY_BYTES,
                 max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
                 request_time_limit_s: float | None = DEFAULT_REQUEST_TIME_LIMIT_S) -> ChatServer:
    """A ``ChatServer`` for a ``llm.local.LocalModel`` with the limits of ``python -m llm.serve``
    (not started: ``serve_forever()`` it)."""
    model.max_active = max_active
    return ChatServer((host, port), model.complete, model.name, check=model.check, max_tokens_cap=max_tokens_cap,
                      max_inflight=max_active + max_queue, time_limit_s=time_limit_s, max_body_bytes=max_body_bytes,
                      max_connections=max_connections, request_time_limit_s=request_time_limit_s)


@dataclass
class ServeConfig(Configurable):
    """The flags of ``python -m llm.serve``: the model, the address and the server's limits."""

    ARG_GROUP = "serve"

    model: str | None = field(default=None, metadata={
        "metavar": "FOLDER", "help": "transformers model folder (default: the default embedded model)"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=8011, metadata={"min": 0, "max": 65535, "help": "port to listen on (0: any free one)"})
    max_tokens_cap: int = field(default=DEFAULT_MAX_TOKENS_CAP, metadata={"min": 1, "help":
        "largest max_tokens a request may ask for (400 above; what the project's endpoint callers send: "
        "~75 s for SmolLM2-135M at ~13 tokens/s on one core)"})
    max_active: int = field(default=DEFAULT_MAX_ACTIVE, metadata={"min": 1, "help":
        "generations that take turns on the model step by step"})
    max_queue: int = field(default=DEFAULT_MAX_QUEUE, metadata={"min": 0, "help":
        "requests that may wait beyond those (429 with Retry-After above)"})
    time_limit_s: float = field(default=DEFAULT_TIME_LIMIT_S, metadata={"min": 0, "help":
        "a generation still running this many seconds after its request arrived ends with 503 (0: no limit)"})
    max_body_bytes: int = field(default=MAX_BODY_BYTES, metadata={"min": 1, "help":
        "larger request bodies get 413 before they are read"})
    max_connections: int = field(default=DEFAULT_MAX_CONNECTIONS, metadata={"min": 1, "help":
        "open connections (a thread each); more are answered 503 at accept"})
    request_time_limit_s: float = field(default=DEFAULT_REQUEST_TIME_LIMIT_S, metadata={"gt": 0, "help":
        "a request's line, headers and body must all arrive within this many seconds of its first byte, else 408"})
    threads: int = field(default=DEFAULT_THREADS, metadata={"min": 1, "help":
        "torch CPU threads (on 2 shared cores one thread decodes fastest)"})


def build_parser():
    ap = make_parser("python -m llm.serve", __doc__)
    ServeConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = ServeConfig.from_args(build_parser().parse_args(argv))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    from llm.local import load_local_model

    torch.set_num_threads(args.threads)
    try:
        model = load_local_model(args.model)   # load before listening: the first request is not slow
    except (ValueError, OSError) as e:          # no such model, a bad $SURFPRM_EMBEDDED_MODEL
        return error_exit(e)
    server = model_server(model, args.host, args.port, max_tokens_cap=args.max_tokens_cap,
                          max_active=args.max_active, max_queue=args.max_queue,
                          time_limit_s=args.time_limit_s or None, max_body_bytes=args.max_body_bytes,
                          max_connections=args.max_connections, request_time_limit_s=args.request_time_limit_s)
    print(f"serving {model.name} at {server.base_url} (max_tokens <= {args.max_tokens_cap}, context "
          f"{model.context} tokens, {args.max_active} active + {args.max_queue} waiting, time limit "
          f"{args.time_limit_s:g} s)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

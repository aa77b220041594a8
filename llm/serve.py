"""Serve a local transformers model over the OpenAI chat-completions protocol.

    python -m llm.serve [--model PATH] [--host 127.0.0.1] [--port 8011]

Defaults to the embedded SmolLM2-135M-Instruct. Endpoints: ``POST /v1/chat/completions``
(non-streaming; usage counted with the model's tokenizer), ``GET /v1/models`` and
``GET /health``. Point any client at ``http://HOST:PORT/v1``, e.g. ``llm.client`` with
``--base-url http://127.0.0.1:8011/v1 --model SmolLM2-135M-Instruct``, so every code path,
the demo included, can run through the real HTTP client.

A request that is not a valid chat completion (malformed JSON, a field of the wrong type or
out of range, a bad ``Content-Length``) is answered 400 with an OpenAI error body, so clients
do not retry it; only a fault while answering a valid request is a 500.

A threaded stdlib HTTP server is enough: one model answers one request at a time (generation
holds a lock), and a handful of connections wait their turn. For throughput use vLLM or SGLang.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llm.local import check_request

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024     # a chat request far beyond any context window is refused


class ChatServer(ThreadingHTTPServer):
    """An OpenAI-protocol server around ``complete(request_body) -> response_body``.

    Requests are validated (``llm.local.check_request``) before ``complete`` sees them;
    ``complete`` raises ``ValueError`` for a request it still cannot answer (HTTP 400)."""

    daemon_threads = True
    request_queue_size = 128        # the stdlib default (5) refuses bursts of new connections

    def __init__(self, address: tuple[str, int], complete: Callable[[dict], dict], model_id: str,
                 handler: type[BaseHTTPRequestHandler] | None = None):
        super().__init__(address, handler or OpenAIHandler)
        self.complete = complete
        self.model_id = model_id

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


class OpenAIHandler(BaseHTTPRequestHandler):
    """Routes the OpenAI paths to the server's ``complete``; errors in OpenAI's error shape."""

    protocol_version = "HTTP/1.1"     # keep-alive: a client's pool reuses its connections
    # Headers and body leave in separate writes; with Nagle on, the client's delayed ACK adds
    # ~40 ms to every response (16 req/s lost at 80 req/s in bench/llm_client.py).
    disable_nagle_algorithm = True
    server: ChatServer

    def log_message(self, fmt, *args) -> None:   # access lines go to logging, not stderr
        log.debug("%s %s", self.address_string(), fmt % args)

    def send_json(self, status: int, obj, headers: dict | None = None) -> None:
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self.send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def read_json(self) -> dict:
        """The request body as a JSON object (``ValueError`` for anything else)."""
        raw = self.headers.get("Content-Length") or "0"
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            # The body's end is unknown (or not worth reading): answer, then drop the connection.
            self.close_connection = True
            raise ValueError(f"bad Content-Length {raw[:40]!r} (0 to {MAX_BODY_BYTES} bytes)")
        body = json.loads(self.rfile.read(length) or b"null")
        if not isinstance(body, dict):
            raise ValueError("request body must be a JSON object")
        return body

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": self.server.model_id, "object": "model", "created": 0, "owned_by": "surfprm"}]})
        elif path == "/health":
            self.send_json(200, {"status": "ok"})
        else:
            self.send_error_json(404, f"no route {path}", "not_found_error")

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self.send_error_json(404, f"no route {path}", "not_found_error")
            return
        try:
            request = self.read_json()
            check_request(request)
            response = self.server.complete(request)
        except ValueError as e:            # a bad request, JSON decoding errors included
            self.send_error_json(400, str(e))
        except Exception as e:             # a server fault: the client retries 5xx
            log.exception("completion failed")
            self.send_error_json(500, f"{type(e).__name__}: {e}", "server_error")
        else:
            self.send_json(200, response)


def serve_in_thread(complete: Callable[[dict], dict], model_id: str, host: str = "127.0.0.1",
                    port: int = 0, handler: type[BaseHTTPRequestHandler] | None = None) -> ChatServer:
    """Start a server on a background thread (port 0: any free port); ``shutdown()`` stops it."""
    server = ChatServer((host, port), complete, model_id, handler)
    # A short poll interval: shutdown() returns within 50 ms (tests start and stop many servers).
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"serve:{server.base_url}",
                     daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llm.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="transformers model folder (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8011)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from llm.local import load_local_model

    model = load_local_model(args.model)   # load before listening: the first request is not slow
    server = ChatServer((args.host, args.port), model.complete, model.name)
    print(f"serving {model.name} at {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

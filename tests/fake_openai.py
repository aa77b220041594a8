"""A fault-injecting OpenAI-protocol server on 127.0.0.1 for the LLM client tests: the
``fault_server`` fixture, registered for every test by ``tests/conftest.py`` (``pytest_plugins``).
It is a plugin module rather than ``tests/llm/conftest.py`` because pytest imports every
conftest outside a package as the one module ``conftest``: a second one would shadow the
top-level one that tests import names from (``from conftest import ROOT``).

Each POST takes the next fault from ``server.faults`` (then answers normally): ``"500"``,
``"429:SECONDS"`` (with Retry-After), ``"401"``, ``"hang"`` (accept, never answer),
``"garbage"`` (200 with a truncated JSON body), ``"empty"`` (200, choices with content ''),
``"null"`` (200, choices with content null and no tool calls), or a dict (200 with that JSON
body: a well-formed JSON that is not a chat completion). The server counts requests, in-flight
peaks, open connections and the Authorization headers it saw.
"""

from __future__ import annotations

import threading
import time

import pytest

from llm.serve import OpenAIHandler, serve_in_thread


def echo_completion(request: dict, content: str | None = None) -> dict:
    last = request["messages"][-1]["content"]
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": request.get("model", ""),
            "choices": [{"index": i, "message": {"role": "assistant",
                                                 "content": f"echo[{i}] {last}" if content is None else content},
                         "finish_reason": "stop"} for i in range(request.get("n", 1))],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}}


class FaultHandler(OpenAIHandler):
    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def finish(self) -> None:       # the client closed the connection (or the server gave up)
        with self.server.lock:
            self.server.connections -= 1
        super().finish()

    def do_POST(self) -> None:
        srv = self.server
        with srv.lock:
            srv.requests += 1
            srv.auth.append(self.headers.get("Authorization"))
            fault = srv.faults.pop(0) if srv.faults else "ok"
            srv.inflight += 1
            srv.peak = max(srv.peak, srv.inflight)
        try:
            request = self.read_json()
            srv.bodies.append(request)
            if srv.delay_s:
                time.sleep(srv.delay_s)
            if isinstance(fault, dict):
                self.send_json(200, fault)
            elif fault == "hang":
                self.close_connection = True
                srv.release.wait(30)
            elif fault.startswith("429"):
                self.send_json(429, {"error": {"message": "slow down"}}, {"Retry-After": fault.split(":")[1]})
            elif fault == "500":
                self.send_error_json(500, "boom", "server_error")
            elif fault == "401":
                # A careless server that echoes the credentials back: the client must mask them.
                self.send_error_json(401, f"bad key {self.headers.get('Authorization')}")
            elif fault == "garbage":
                data = b'{"choices": [{"message": '
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif fault == "empty":
                self.send_json(200, echo_completion(request, content=""))
            elif fault == "null":
                body = echo_completion(request)
                for choice in body["choices"]:
                    choice["message"]["content"] = None
                self.send_json(200, body)
            else:
                self.send_json(200, echo_completion(request))
        finally:
            with srv.lock:
                srv.inflight -= 1


@pytest.fixture
def fault_server():
    server = serve_in_thread(echo_completion, "fake-model", handler=FaultHandler)
    server.lock = threading.Lock()
    server.release = threading.Event()
    server.faults, server.auth, server.bodies = [], [], []
    server.requests = server.inflight = server.peak = server.connections = 0
    server.delay_s = 0.0
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()

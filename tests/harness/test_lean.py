"""harness.lean without a browser: which actions ``vet`` lets run, and harness.miniwob.check_pages
on task-page servers that are closed, silent or missing pages."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.lean import MAX_WAIT_MS, ActionRefused, LeanHarness, vet
from harness.miniwob import MiniWoBSetupError, check_pages, task_classes


@pytest.fixture(scope="module")
def harness():
    """A lean MiniWoB harness, never started: vetting needs its action set and hosts only."""
    return LeanHarness(task_classes()["click-button"], {"base_url": "file:///x/"}, allowed_hosts=set())


@pytest.mark.parametrize("text, reason", [
    ("click('1'); __import__('os').system('touch X')", "exactly one action call"),
    ("noop(0) goto('http://127.0.0.1:9/x') # click('1')", "not a python call"),
    ("click('1')\ngoto('http://127.0.0.1:9/x')", "exactly one action call"),
    ("click(__import__('os').getcwd())", "must be literals"),
    ("eval('1')", "unknown action"),
    ("goto('http://127.0.0.1:9/x')", "leaves the configured sites"),
    (f"noop({MAX_WAIT_MS + 1})", f"at most {MAX_WAIT_MS} ms"),
    ("noop(3600000)", f"at most {MAX_WAIT_MS} ms"),
    ("mouse_click(10, 20)", "not in the run's action set"),
])
def test_vet_refuses(harness, text, reason):
    with pytest.raises(ActionRefused, match=reason) as e:
        vet(text, harness)
    assert "\n" not in str(e.value)


def test_vet_passes_the_canonical_call(harness):
    assert vet('click("12")', harness) == "click('12')"
    assert vet(f"noop({MAX_WAIT_MS})", harness) == f"noop({MAX_WAIT_MS})"
    assert vet("fill(bid='3', value='a; b')", harness) == "fill('3', 'a; b')"
    served = LeanHarness(task_classes()["click-button"], allowed_hosts={"127.0.0.1:8000"})
    assert vet("goto('http://127.0.0.1:8000/click-button.html')", served).startswith("goto(")


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self):
        found = self.path.endswith("/click-button.html")
        self.send_response(200 if found else 404)
        self.end_headers()
        self.wfile.write(b"<html></html>" if found else b"")

    def log_message(self, *args):
        pass


def test_check_pages_on_servers():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/miniwob/"
    try:
        check_pages(url, ["click-button"])
        with pytest.raises(MiniWoBSetupError, match=r"enter-text.html answered HTTP 404"):
            check_pages(url, ["click-button", "enter-text"])
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(MiniWoBSetupError, match=r"could not be fetched \(.*refused"):
        check_pages(url, ["click-button"])       # the port is closed now
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)        # accepts connections, never answers
    try:
        with pytest.raises(MiniWoBSetupError, match=r"no answer within 0.5 s") as e:
            check_pages(f"http://127.0.0.1:{silent.getsockname()[1]}/", ["click-button"], timeout_s=0.5)
        assert "\n" not in str(e.value)
    finally:
        silent.close()


def test_retask_moves_the_harness_only_within_one_browser_context():
    """``retask`` hands the next task to the harness's browser unless that task opens its context
    differently (viewport, locale, time zone): then nothing changes and the caller opens another."""
    from types import SimpleNamespace

    classes, kwargs = task_classes(), {"base_url": "file:///x/"}
    h = LeanHarness(classes["click-button"], kwargs, allowed_hosts=set())
    h.env = SimpleNamespace(task=SimpleNamespace(inner=classes["click-button"](seed=0, **kwargs)),
                            task_entrypoint=None, task_kwargs=None)       # as after a first reset

    class Wide(classes["click-tab"]):
        def __init__(self, seed, **kw):
            super().__init__(seed, **kw)
            self.viewport = {"width": 1280, "height": 720}

    assert h.retask(classes["click-tab"], kwargs)
    assert h.task_entrypoint is classes["click-tab"] and h.env.task_kwargs == kwargs
    assert h.env.task_entrypoint.get_task_id() == classes["click-tab"].get_task_id()
    assert not h.retask(Wide, kwargs)
    assert h.task_entrypoint is classes["click-tab"]
    assert h.env.task_entrypoint.get_task_id() == classes["click-tab"].get_task_id()

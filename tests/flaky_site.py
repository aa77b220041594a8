"""A local site whose start page fails to load a given number of times, then loads (OpenWebRL
A.1's retries), with an overlay over a button and a labelled search field (A.2's element probes);
a BrowserGym task that opens it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

from search.demo_site import LocalServer

PAGE = """<!doctype html><html><head><title>Flaky</title><style>
#overlay { position: fixed; left: 0; top: 0; width: 400px; height: 200px; background: #eee; }
</style></head><body>
<button id="covered" style="position: absolute; left: 50px; top: 50px">Buy now</button>
<div id="overlay">Accept cookies</div>
<button style="position: absolute; left: 50px; top: 300px" onclick="document.title='ok'">Open</button>
<label style="position: absolute; left: 50px; top: 400px">City <input type="search" name="city"></label>
</body></html>"""


class FlakySite(LocalServer):
    """``/`` answers its first ``fail`` requests with a line that is not HTTP (the page does not
    load: ERR_INVALID_HTTP_RESPONSE), then serves ``PAGE``; ``requests`` counts them."""

    def __init__(self, fail: int):
        self.requests, lock = 0, threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path != "/":
                    self.send_response(404)
                    self.end_headers()
                    return
                with lock:
                    site.requests += 1
                    failing = site.requests <= fail
                if failing:             # not HTTP at all (an empty answer Chromium itself retries once)
                    self.wfile.write(b"garbage\r\n\r\n")
                    self.close_connection = True
                    return
                body = PAGE.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)
        self.url += "/"


def open_task(url):
    from browsergym.core.task import AbstractBrowserTask

    class Open(AbstractBrowserTask):
        start_url = url

        @classmethod
        def get_task_id(cls):
            return "local.flaky"

        def setup(self, page):
            page.goto(url)
            return "Buy the item.", {}

        def validate(self, page, chat_messages):
            return 0.0, False, "", {}

    return Open


def bid_of(axtree: str, text: str) -> str:
    """The bid on the first AXTree line holding ``text``."""
    line = next(l for l in axtree.splitlines() if text in l and "[" in l)
    return line.split("[", 1)[1].split("]", 1)[0]

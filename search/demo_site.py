"""A tiny multi-page shop served on 127.0.0.1 (search box, results, detail page, order form), a
BrowserGym task over it, and gold MAG guides for that task: the demo that runs the search CLIs
without WebArena (``python -m search.mag --demo``) and the site of the search tests.

    from search.demo_site import Shop, make_task
    with Shop() as shop:
        task = make_task(shop)      # BrowserGym task class; success iff the asked order was placed
"""

from __future__ import annotations

import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ITEMS = {"kettle-blue": "Blue Kettle", "kettle-red": "Red Kettle", "mug-blue": "Blue Mug"}
GOAL = "Order 2 Blue Kettles for Ada, then tell me the order number."
TASK_ID = "demo-shop"
# The steps a person takes: MAG gold guides with their actions (the gold-guide JSONL's step records,
# search.mag.metrics; the actions feed the teacher-forced diagnostics, search.mag.diagnostics).
GOLD_STEPS = {TASK_ID: [
    {"guide": "Type kettle into the search box.", "action_type": "type", "target": "Search products",
     "content": "kettle"},
    {"guide": "Press Enter to search.", "action_type": "press_enter"},
    {"guide": "Open the Blue Kettle.", "action_type": "click", "target": "Blue Kettle"},
    {"guide": "Click Order this item.", "action_type": "click", "target": "Order this item"},
    {"guide": "Enter Ada as the name.", "action_type": "type", "target": "Name", "content": "Ada"},
    {"guide": "Choose 2 as the quantity.", "action_type": "select", "target": "Quantity", "content": "2"},
    {"guide": "Place the order.", "action_type": "click", "target": "Place order"},
    {"guide": "Read the order number.", "action_type": "finish", "content": "Order number A-100"}]}
GOLD_GUIDES = {task: [s["guide"] for s in steps] for task, steps in GOLD_STEPS.items()}


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) for ``handler``; a context manager."""

    def __init__(self, handler):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html><head><title>{title}</title></head><body>"
            f"<nav><a href='/'>Home</a></nav><main><h1>{title}</h1>{body}</main></body></html>").encode()


class Shop(LocalServer):
    """The site and its state (orders placed)."""

    def __init__(self):
        self.orders: list[dict] = []
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: bytes, status: int = 200):
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                u = urlsplit(self.path)
                q = {k: v[0] for k, v in parse_qs(u.query).items()}
                if u.path == "/":
                    body = _page("Shop", "<form action='/search' role='search'>"
                                 "<input type='search' name='q' aria-label='Search products'>"
                                 "<button type='submit'>Search</button></form>")
                elif u.path == "/search":
                    term = q.get("q", "").lower()
                    hits = [(k, v) for k, v in ITEMS.items() if term and term in v.lower()]
                    items = "".join(f"<li><a href='/item/{k}'>{html.escape(v)}</a></li>" for k, v in hits)
                    body = _page("Results", f"<p>{len(hits)} results for {html.escape(term)}</p><ul>{items}</ul>")
                elif u.path.startswith("/item/") and u.path[6:] in ITEMS:
                    k = u.path[6:]
                    body = _page(ITEMS[k], f"<p>A fine {ITEMS[k].lower()}.</p>"
                                           f"<a href='/order?item={k}'>Order this item</a>")
                elif u.path == "/order" and q.get("item") in ITEMS:
                    k = q["item"]
                    body = _page(f"Order {ITEMS[k]}", "<form method='post' action='/order'>"
                                 f"<input type='hidden' name='item' value='{k}'>"
                                 "<label>Name <input type='text' name='name'></label>"
                                 "<label>Quantity <select name='qty'><option>1</option><option>2</option>"
                                 "<option>3</option></select></label>"
                                 "<button type='submit'>Place order</button></form>")
                elif u.path == "/done":
                    body = _page("Thank you", f"<p>Order number {html.escape(q.get('n', ''))}</p>")
                else:
                    return self._send(_page("Not found", ""), 404)
                self._send(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                number = f"A-{100 + len(shop.orders)}"
                shop.orders.append({**form, "number": number})
                self.send_response(303)
                self.send_header("Location", f"/done?n={number}")
                self.end_headers()

        super().__init__(Handler)
        self.url += "/"


def make_task(shop: Shop):
    """A BrowserGym task class over ``shop``: success iff exactly the asked order was placed and
    the answer names its number."""
    from browsergym.core.task import AbstractBrowserTask

    class ShopTask(AbstractBrowserTask):
        @classmethod
        def get_task_id(cls):
            return TASK_ID

        def __init__(self, seed: int, start_url: str = shop.url):
            super().__init__(seed)
            self.start_url = start_url

        def setup(self, page):
            shop.orders.clear()
            page.goto(self.start_url)
            return GOAL, {}

        def validate(self, page, chat_messages):
            answers = [m["message"] for m in chat_messages if m["role"] == "assistant"]
            ok = (len(shop.orders) == 1 and shop.orders[0].get("item") == "kettle-blue"
                  and shop.orders[0].get("qty") == "2" and shop.orders[0].get("name") == "Ada"
                  and bool(answers) and shop.orders[0]["number"] in answers[-1])
            return float(ok), True, "", {"orders": len(shop.orders)}

    return ShopTask


def demo_config() -> dict:
    """The demo task as a task config (the keys both search CLIs read)."""
    return {"task_id": TASK_ID, "old_task_id": TASK_ID, "sites": ["demo"], "intent": GOAL}


def demo_harness(shop: Shop, **harness_kwargs):
    """A harness factory (``config -> BrowserHarness``) for the demo task on ``shop``, confined to it."""
    from harness.env import BrowserHarness, host_of

    def make(config):
        return BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}, **harness_kwargs)
    return make

"""Static HTML pages served on 127.0.0.1 and a BrowserGym task that opens one, for the MAG
observation and executor tests. ``PAGES`` maps a path to its HTML; ``/echo`` shows the query."""

from __future__ import annotations

import html
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from search.demo_site import LocalServer

LONG_LABEL = "Subscribe to the weekly newsletter about kettles, mugs, teapots and every other thing in the kitchen"

MARKS_PAGE = f"""<!doctype html><html><head><title>Marks</title>
<style>body {{ margin: 0; font: 16px sans-serif; }} .spacer {{ height: 1400px; }}
.clicky {{ cursor: pointer; display: inline-block; padding: 4px; }}</style></head><body>
<nav><a href="/echo?from=home">Home</a> <a href="/echo?from=about"><span>About <b>us</b></span></a></nav>
<form action="/echo">
  <label>Search <input type="text" name="q" placeholder="Search products"></label>
  <select name="color" aria-label="Color"><option>Red</option><option>Blue</option><option>Green</option></select>
  <label><input type="checkbox" name="gift"> Gift wrap</label>
  <textarea name="note" placeholder="Note to seller"></textarea>
  <button type="submit">Search</button>
  <input type="hidden" name="secret" value="x">
</form>
<button id="long">{LONG_LABEL}</button>
<div class="clicky" onclick="document.title='clicked'">Open menu</div>
<button style="display:none">Hidden button</button>
<button style="visibility:hidden">Invisible button</button>
<span>Plain text, not interactive</span>
<div class="spacer"></div>
<a href="/echo?from=footer">Footer link below the fold</a>
<button onclick="document.title='bottom'">Bottom button</button>
<div style="height: 900px"></div>
</body></html>"""


def many_links_page(n: int) -> str:
    links = "".join(f"<div><a href='/echo?i={i}'>Link number {i}</a></div>" for i in range(n))
    return f"<!doctype html><html><head><title>Many</title></head><body>{links}</body></html>"


FRAME_PAGE = """<!doctype html><html><head><title>Frame</title><style>body { margin: 0; }</style></head><body>
<div style="height: 100px">Top</div>
<iframe src="/inner" style="border: 10px solid black; padding: 5px; margin-left: 30px"
 width="400" height="150"></iframe>
<a href="/echo?from=far" style="position: absolute; left: 1700px; top: 20px">Far right link</a>
<button style="position: absolute; left: 1400px; top: 300px; width: 100px">Half visible</button>
</body></html>"""

INNER_PAGE = """<!doctype html><html><head><title>Inner</title></head><body style="margin: 0">
<a href="/echo?from=inner" style="display: inline-block; margin: 20px; width: 120px">Inner link</a></body></html>"""

PAGES = {"/marks": MARKS_PAGE, "/many": many_links_page(200), "/frame": FRAME_PAGE, "/inner": INNER_PAGE}


class Pages(LocalServer):
    """A server for ``PAGES`` and ``/echo`` (shows the query string as text)."""

    def __init__(self, pages: dict[str, str] | None = None):
        pages = dict(PAGES if pages is None else pages)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                u = urlsplit(self.path)
                if u.path == "/echo":
                    q = {k: v for k, v in parse_qs(u.query).items()}
                    body = ("<!doctype html><html><head><title>Echo</title></head><body>"
                            f"<p id='q'>{html.escape(repr(sorted(q.items())))}</p></body></html>")
                elif u.path in pages:
                    body = pages[u.path]
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def open_page_task(url: str, goal: str = "Look at the page."):
    """A BrowserGym task that opens ``url``; it always validates to 0."""
    from browsergym.core.task import AbstractBrowserTask

    class OpenPage(AbstractBrowserTask):
        @classmethod
        def get_task_id(cls):
            return "local.open_page"

        def setup(self, page):
            page.goto(url)
            return goal, {}

        def validate(self, page, chat_messages):
            return 0.0, False, "", {}

    return OpenPage

"""OpenWebRL's robust browser infrastructure (App. A.1) and the element probes behind its textual
feedback (App. A.2), for ``harness.env.BrowserHarness``.

    from harness.env import BrowserHarness
    from harness.robust import Robustness
    h = BrowserHarness(Task, robustness=Robustness(start_retries=2, backoff_s=1.0, blocklist="hosts.txt"))
    h.reset()               # the start page retried with backoff
    h.diagnostics           # one record per infrastructure failure

A.1, as this harness does it:
- **Retries.** The start page (browser launch, task set-up, first navigation) is tried
  ``1 + start_retries`` times; attempt k waits ``backoff_s * 2**(k-1)`` seconds first, and each
  attempt is a new BrowserGym reset (a new browser context, and a new browser unless the harness
  keeps one). What is retried is what a live site does now and then
  (``transient``): a network error (``net::ERR_*``, a refused connection), Chrome's error page, a
  time-out. A host on the blocklist is not retried.
- **Separate, named time-outs** (seconds): ``startup_s`` for the launch, the task's set-up and its
  start page, ``action_s`` for each action and the loads it triggers (Playwright's default
  time-out once the start page is up), ``screenshot_s`` for each screenshot (``timed_screenshot``).
- **Host blocklist** (``blocklist``: a text file, one host a line, ``#`` comments), beside the
  allow-list: requests to a listed host are aborted in the browser (``block_hosts``), a ``goto``
  there is refused, and a start page that fails every retry adds its host to the file, so later
  runs skip hosts that are down or hostile to automation (OpenWebRL updates its list from
  network errors at start-up the same way).
- **Diagnostics**: every infrastructure failure (a failed start attempt, an action or screenshot
  that raised, an evaluator crash) appends one record (``diagnostic``) to ``harness.diagnostics``:
  phase, attempt, error, the traceback's last frames, URL and host, seconds spent, when, and the
  process's peak memory. A search run writes them into the task's log as ``infra_diagnostic``
  lines, counted per phase in ``summary.json``'s ``infra_diagnostics`` (``search.episodes``).

A.2's element probes (``element_under``, ``focused_element``; read by ``search.agent``'s
feedback): the element that ``document.elementFromPoint`` finds at the centre of a click's target
(another element there means the click lands on it: an overlay, a banner) and the element that
has focus after typing. Both read the main frame only (targets inside an iframe give None).
"""

from __future__ import annotations

import datetime as dt
import io
import resource
import traceback
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

SCREENSHOT_MS = "_surfprm_screenshot_ms"       # set on a browser context: its screenshots' time-out


@dataclass(frozen=True)
class Robustness:
    """A.1's settings for one harness (module docstring)."""

    start_retries: int = 2            # attempts at the start page after the first
    backoff_s: float = 1.0            # the wait before retry k is backoff_s * 2**(k-1)
    startup_s: float = 30.0           # browser launch, task set-up and the start page
    action_s: float = 5.0             # each action and the page loads it triggers
    screenshot_s: float = 10.0        # each screenshot
    blocklist: str | None = None      # hosts never visited; a start page that fails every retry adds its host

    def check(self) -> Robustness:
        if self.start_retries < 0 or self.backoff_s < 0:
            raise ValueError("start retries and backoff must not be negative")
        if min(self.startup_s, self.action_s, self.screenshot_s) <= 0:
            raise ValueError("the start-up, action and screenshot time-outs must be positive")
        return self


class ScreenshotError(RuntimeError):
    """A screenshot did not finish within its time-out (or failed)."""


def transient(text: str) -> bool:
    """Whether a start-page failure is worth another attempt: a network error, a refused
    connection, Chrome's error page or a time-out; not a host this harness blocked itself."""
    if "ERR_BLOCKED_BY_CLIENT" in text:
        return False
    return any(s in text for s in ("net::ERR_", "ECONNREFUSED", "ECONNRESET", "chrome-error://", "Timeout"))


def host(url: str) -> str:
    """``host[:port]`` of a URL, lower-cased ('' for file: and about: pages)."""
    return urlsplit(url or "").netloc.lower()


def read_blocklist(path: str | Path | None) -> set[str]:
    """The hosts of a blocklist file (none when there is no file yet)."""
    if not path or not Path(path).exists():
        return set()
    lines = (line.split("#", 1)[0].strip().lower() for line in Path(path).read_text().splitlines())
    return {line for line in lines if line}


def add_to_blocklist(path: str | Path, name: str, why: str) -> None:
    """Append ``name`` to the blocklist file with why and when, unless it is there already."""
    if not name or name in read_blocklist(path):
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"{name}  # {dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} {why[:160]}\n")


def block_hosts(context, hosts: set[str]) -> None:
    """Abort every request of ``context`` to one of ``hosts`` (the page sees
    ``net::ERR_BLOCKED_BY_CLIENT``). A route costs a round trip per request, so only a non-empty
    list installs one."""
    if not hosts:
        return

    def handle(route):
        if host(route.request.url) in hosts:
            route.abort("blockedbyclient")
        else:
            route.continue_()
    context.route("**/*", handle)


def diagnostic(phase: str, error, attempt: int = 0, url: str = "", seconds: float = 0.0) -> dict:
    """One infrastructure failure as a record (module docstring)."""
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    frames = "".join(traceback.format_exception(error, limit=-3)) if isinstance(error, BaseException) else ""
    return {"phase": phase, "attempt": attempt, "error": text.splitlines()[0][:500] if text else "",
            "traceback": frames[-2000:], "url": url, "host": host(url), "seconds": round(seconds, 3),
            "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


_ORIGINAL_SCREENSHOT = None


def install_timed_screenshots() -> None:
    """Point BrowserGym's per-observation screenshot at ``timed_screenshot`` (idempotent)."""
    global _ORIGINAL_SCREENSHOT
    import browsergym.core.env as bg_env

    if bg_env.extract_screenshot is not timed_screenshot:
        _ORIGINAL_SCREENSHOT = bg_env.extract_screenshot
        bg_env.extract_screenshot = timed_screenshot


def timed_screenshot(page):
    """BrowserGym's screenshot (an RGB array) within the context's screenshot time-out
    (``SCREENSHOT_MS``; Playwright's ``page.screenshot``, which takes one, where BrowserGym's CDP
    capture has none); a page without one, or with BrowserGym's scale factor, takes BrowserGym's
    own. ``ScreenshotError`` when it fails."""
    ms = getattr(page.context, SCREENSHOT_MS, None)
    if ms is None or getattr(page, "_bgym_scale_factor", 1.0) != 1.0:
        return _ORIGINAL_SCREENSHOT(page)
    import numpy as np
    from PIL import Image

    try:
        png = page.screenshot(timeout=ms)
    except Exception as e:
        raise ScreenshotError(f"screenshot within {ms / 1000:g}s: {type(e).__name__}: {str(e).splitlines()[0]}") from e
    return np.array(Image.open(io.BytesIO(png)).convert("RGB"))


# -- A.2's element probes --------------------------------------------------------------------

_DESCRIBE = r"""const describe = el => {
  if (!el || el === document.body || el === document.documentElement) return null;
  const clean = s => (s || '').replace(/\s+/g, ' ').trim().slice(0, 60);
  const label = el.labels && el.labels.length ? el.labels[0].innerText : '';
  return {tag: el.tagName.toLowerCase(), role: el.getAttribute('role') || '', type: el.getAttribute('type') || '',
          name: clean(el.getAttribute('aria-label') || label || el.getAttribute('placeholder')
                      || el.getAttribute('title') || el.getAttribute('alt') || el.innerText || ''),
          bid: el.getAttribute('bid') || ''};
};"""

_UNDER_JS = "bid => {" + _DESCRIBE + r"""
  const t = document.querySelector('[bid="' + CSS.escape(bid) + '"]');
  if (!t) return null;
  const r = t.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (r.width === 0 || r.height === 0 || x < 0 || y < 0 || x >= innerWidth || y >= innerHeight)
    return {target: describe(t), under: null, covered: false};     // off screen: Playwright scrolls first
  const u = document.elementFromPoint(x, y);
  return {target: describe(t), under: describe(u), covered: !!u && u !== t && !t.contains(u) && !(u.control === t)};
}"""

_FOCUSED_JS = "() => {" + _DESCRIBE + " return describe(document.activeElement); }"


def element_under(page, bid: str) -> dict | None:
    """``{target, under, covered}`` for the element with BrowserGym id ``bid``: what lies at the
    centre of its box before a click (None when the main frame has no such element, or the page
    cannot be read)."""
    try:
        return page.evaluate(_UNDER_JS, str(bid))
    except Exception:       # a page mid-navigation, a closed page: no probe, no feedback line
        return None


def focused_element(page) -> dict | None:
    """The element that has focus (None: the page itself, or it cannot be read)."""
    try:
        return page.evaluate(_FOCUSED_JS)
    except Exception:
        return None


def element_text(e: dict | None) -> str:
    """``<input type=search> 'Search products' (role searchbox)`` for a probe's element."""
    if not e:
        return "nothing"
    kind = f"<{e['tag']}" + (f" type={e['type']}" if e.get("type") else "") + ">"
    return kind + (f" {e['name']!r}" if e.get("name") else "") + (f" (role {e['role']})" if e.get("role") else "")

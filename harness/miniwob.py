"""MiniWoB++ tasks offline in the browser harness: task names, seeds, the task pages, one task's harness.

    from harness.miniwob import miniwob_harness
    with miniwob_harness("click-button") as h:
        obs = h.reset(seed=3)               # obs.goal, obs.axtree, obs.url
        obs = h.step("click('12')")         # obs.last_action_error; h.reward, h.task_done
        reward, info = h.evaluate()         # the task's own validator

MiniWoB++'s task pages come with the ``miniwob`` wheel (``miniwob/html/miniwob/``) and run from
files: ``MINIWOB_URL`` (BrowserGym's variable) defaults to that folder, so nothing is served or
downloaded. A task drawn with a seed is one episode; its reward is BrowserGym's ``miniwob``
validator's (1 when MiniWoB's raw reward is positive, else 0), which only reads the page, so it
runs after every step (``live_validation``) and the task ends the episode at its first submit,
right or wrong (``task_done``).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

# Tasks an AXTree agent can complete with BrowserGym's element actions (no canvas, drag or drawing).
SUBSETS = {
    "axtree10": ["click-test", "click-button", "click-tab", "click-dialog", "click-option", "click-checkboxes",
                 "enter-text", "focus-text", "login-user", "choose-list"],
    # larger pages, several valid orders or several steps (issue 37; harness.solvers_rich). Issue 37's
    # social-media-some is not here: its Like/Retweet/... toggles print the same on or off (a CSS
    # class), so a solver acting on the page as it is cannot tell which posts it already marked.
    "rich": ["book-flight", "login-user-popup", "form-sequence-2", "search-engine", "use-autocomplete", "enter-date",
             "navigate-tree", "email-inbox", "email-inbox-delete", "email-inbox-important", "email-inbox-forward-nl",
             "multi-orderings", "multi-layouts", "click-tab-2-hard", "click-collapsible-2", "click-checkboxes-large",
             "click-checkboxes-transfer", "click-scroll-list", "enter-time", "choose-date", "choose-date-easy",
             "choose-date-medium"],
}
PREFIX = "miniwob."


class MiniWoBSetupError(ValueError):
    """A task, a seed list or the task pages are not there; the message says what."""


def parse_seeds(text: str) -> list[int]:
    """``'0-4'``, ``'0,3,7'``, ``'0-2,9'`` -> the seeds in order, without repeats."""
    seeds: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        try:
            lo, dash, hi = part.partition("-")
            span = range(int(lo), int(hi if dash else lo) + 1)
        except ValueError:
            raise MiniWoBSetupError(f"--seeds: {part!r} is not a seed or a range like 0-4") from None
        if not span:
            raise MiniWoBSetupError(f"--seeds: empty range {part!r}")
        seeds += [s for s in span if s not in seeds]
    return seeds


def default_url() -> str:
    """``file://`` URL of the task pages inside the installed ``miniwob`` wheel (found without
    importing it: its package imports selenium, which BrowserGym does not need)."""
    import importlib.util

    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MiniWoBSetupError("the miniwob wheel is not installed "
                                "(pip install --no-deps -r requirements/browsergym.txt)")
    return (Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob").as_uri() + "/"


def base_url() -> str:
    """The task pages' base URL: ``MINIWOB_URL``, else the wheel's folder. BrowserGym appends
    '<task>.html' to it as a string: the folder needs its slash."""
    return (os.environ.get("MINIWOB_URL") or default_url()).rstrip("/") + "/"


def task_classes() -> dict[str, type]:
    """MiniWoB name -> BrowserGym task class, for every task BrowserGym registers."""
    from browsergym.miniwob import ALL_MINIWOB_TASKS

    return {cls.subdomain: cls for cls in ALL_MINIWOB_TASKS}


def select_tasks(names: list[str] | None, known) -> list[str]:
    """MiniWoB names from ``--tasks`` (names, ``miniwob.`` names, subset names; none: ``axtree10``);
    ``MiniWoBSetupError`` naming the unknown ones."""
    out: list[str] = []
    for name in names or SUBSETS["axtree10"]:
        expanded = sorted(known) if name == "all" else SUBSETS.get(name, [name.removeprefix(PREFIX)])
        out += [n for n in expanded if n not in out]
    if unknown := [n for n in out if n not in known]:
        raise MiniWoBSetupError(f"unknown MiniWoB task(s) {unknown}; subsets: {', '.join(SUBSETS)}, all")
    return out


PROBE_TIMEOUT_S = 5.0       # an http MINIWOB_URL that does not answer a page within this is refused


def check_pages(url: str, names: list[str], timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """``MiniWoBSetupError`` when a ``file://`` base URL lacks a task's page, or an http(s) one does
    not serve it (closed port, no answer within ``timeout_s``, an error status): said in one line
    before any browser starts."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        for name in names:
            _probe(url, f"{url}{name}.html", timeout_s)
        return
    if parts.scheme != "file":
        return
    missing = [n for n in names if not (Path(unquote(parts.path)) / f"{n}.html").is_file()]
    if missing:
        raise MiniWoBSetupError(f"MINIWOB_URL={url}: no page for {missing}")


def _probe(base: str, page: str, timeout_s: float) -> None:
    import socket
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(page, timeout=timeout_s) as response:      # noqa: S310 (the user's server)
            response.read(1)
    except urllib.error.HTTPError as e:
        raise MiniWoBSetupError(f"MINIWOB_URL={base}: {page} answered HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, (TimeoutError, socket.timeout)):
            reason = f"no answer within {timeout_s:g} s"
        raise MiniWoBSetupError(f"MINIWOB_URL={base}: {page} could not be fetched ({reason})") from None


def miniwob_harness(name: str, url: str | None = None, lean: bool = False, **options):
    """A ``BrowserHarness`` on MiniWoB task ``name`` (``click-button`` or ``miniwob.click-button``)
    at ``url`` (default ``base_url()``), validated live; ``options`` go to ``BrowserHarness``;
    ``lean``: a ``harness.lean.LeanHarness`` (resets on one kept page, AXTree-only observations: replays).
    ``file://`` pages have no host, so every ``goto`` is refused; an http ``MINIWOB_URL`` allows
    its own host."""
    from harness.env import BrowserHarness, host_of
    from harness.lean import LeanHarness

    url = url or base_url()
    task_class = task_classes().get(name.removeprefix(PREFIX))
    if task_class is None:
        raise MiniWoBSetupError(f"unknown MiniWoB task {name!r}")
    return (LeanHarness if lean else BrowserHarness)(task_class, {"base_url": url}, allowed_hosts={host_of(url)} - {""},
                          live_validation=True, **options)

"""OpenWebRL App. A.1 and A.2 in the browser harness, on real Chromium and local pages: the start
page retried with backoff (a page that fails to load twice, then loads), the host blocklist, the
named time-outs, a diagnostic record per infrastructure failure, and the element probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from flaky_site import FlakySite, open_task
from flaky_site import bid_of as _bid
from harness.env import BrowserHarness, SiteUnreachable, host_of
from harness.robust import SCREENSHOT_MS, Robustness, ScreenshotError, read_blocklist

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def test_a_page_that_fails_twice_then_loads(tmp_path):
    with FlakySite(fail=2) as site, BrowserHarness(
            open_task(site.url), allowed_hosts={host_of(site.url)},
            robustness=Robustness(start_retries=2, backoff_s=0.05, startup_s=20, action_s=3, screenshot_s=7,
                                  blocklist=str(tmp_path / "blocked.txt"))) as h:
        obs = h.reset()
        assert "Buy now" in obs.axtree and site.requests == 3
        assert [(d["phase"], d["attempt"]) for d in h.diagnostics] == [("start", 0), ("start", 1)]
        assert all("ERR_INVALID_HTTP_RESPONSE" in d["error"] and d["host"] == host_of(site.url) for d in h.diagnostics)
        assert all(d["traceback"] and d["max_rss_mb"] > 0 and d["at"] for d in h.diagnostics)
        assert getattr(h.env.context, SCREENSHOT_MS) == 7000          # the named time-outs in force
        assert not (tmp_path / "blocked.txt").exists()                 # it loaded: nothing blocked

        # A.2's probes: the overlay takes a click on the covered button; the focused field after typing
        ax = obs.axtree
        under = h.element_under(_bid(ax, "Buy now"))
        assert under["covered"] and under["under"]["name"] == "Accept cookies" and under["target"]["name"] == "Buy now"
        assert not h.element_under(_bid(ax, "'Open'"))["covered"]
        city = _bid(ax, "searchbox 'City'")
        h.step(f"fill('{city}', 'Lyon')")
        focused = h.focused_element()
        assert focused["tag"] == "input" and focused["type"] == "search" and focused["name"] == "City"

        # a screenshot past its time-out is an infrastructure failure, recorded and raised
        setattr(h.env.context, SCREENSHOT_MS, 1)
        with pytest.raises(ScreenshotError):
            h.step("noop(0)")
        assert h.diagnostics[-1]["phase"] == "screenshot"


def test_a_page_that_never_loads_joins_the_blocklist_and_is_not_tried_again(tmp_path):
    blocklist = tmp_path / "blocked.txt"
    with FlakySite(fail=100) as site:
        robust = Robustness(start_retries=1, backoff_s=0.05, blocklist=str(blocklist))
        with BrowserHarness(open_task(site.url), robustness=robust) as h:
            with pytest.raises(SiteUnreachable, match="after 2 attempts"):
                h.reset()
            assert len(h.diagnostics) == 2 and site.requests == 2
        assert read_blocklist(blocklist) == {host_of(site.url)}
        with BrowserHarness(open_task(site.url), robustness=robust) as h:
            with pytest.raises(SiteUnreachable, match="ERR_BLOCKED_BY_CLIENT"):
                h.reset()
            assert len(h.diagnostics) == 1 and site.requests == 2     # blocked in the browser, not retried
            from data.actions import parse_action

            assert "blocklist" in h.refused(parse_action(f"goto('{site.url}x')"))

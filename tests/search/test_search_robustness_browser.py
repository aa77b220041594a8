"""OpenWebRL A.1 and A.2 through a search episode (``search.episodes.run_task``) on real Chromium:
a start page that fails to load once is retried and the run goes on, its failure an ``infra_diagnostic``
line in the task's log and counted on the result row; the policy's feedback names the overlay that
took a click and the field that has focus; ``--no-element-feedback`` leaves them out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flaky_site import FlakySite, bid_of, open_task
from harness.env import BrowserHarness, host_of
from search.agent import AXTreeAgent
from search.episodes import run_task
from search.runner import AXTreeSearch, run_summary
from search.webarena import WEBARENA_LITE

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def _episode(tmp_path, **flags):
    config = AXTreeSearch(prm="none", policy="scripted", start_backoff=0.05, max_steps=4, **flags)
    lines = []

    def propose(obs, history, feedback, n, step=0):
        if step == 0:
            return [f"click('{bid_of(obs.axtree, 'Buy now')}')"]
        if step == 1:
            return [f"fill('{bid_of(obs.axtree, 'searchbox')}', 'Lyon')"]
        return ["send_msg_to_user('done')"]

    task = {"task_id": "flaky", "old_task_id": "flaky", "sites": ["local"], "intent": "Buy the item."}
    with FlakySite(fail=1) as site:
        def make_harness(t):
            return BrowserHarness(open_task(site.url), allowed_hosts={host_of(site.url)})
        row = run_task(WEBARENA_LITE, config, task, make_harness,
                       lambda seed: AXTreeAgent(propose, None, n=1, seed=seed), lines.append)
        assert site.requests == 2
    return row, lines


def test_a_start_page_that_fails_once_is_retried_and_recorded(tmp_path):
    row, lines = _episode(tmp_path)
    assert row["termination"] == "answered" and row["infra_diagnostics"] == {"start": 1}
    kinds = [l["type"] for l in lines]
    assert kinds == ["step", "step", "step", "infra_diagnostic", "result"]
    diag = lines[3]
    assert diag["phase"] == "start" and diag["attempt"] == 0 and "ERR_INVALID_HTTP_RESPONSE" in diag["error"]
    json.dumps(lines)                                           # every line is JSON as written to the log
    assert run_summary([row])["infra_diagnostics"] == {"start": 1}

    click, fill = lines[0]["feedback"], lines[1]["feedback"]
    assert "the click landed on <div> 'Accept cookies', which covers" in click and "'Buy now'" in click
    assert "focused element: <input type=search> 'City'" in fill


def test_element_feedback_can_be_turned_off():
    """``--no-element-feedback`` switches the harness's probes off (what the feedback then says
    without them: tests/search/test_element_feedback.py)."""
    from search.episodes import configure_harness

    class Harness:
        robustness, element_probes = None, True

    h = Harness()
    configure_harness(h, AXTreeSearch(prm="none", policy="p", element_feedback=False, start_retries=0))
    assert h.element_probes is False and h.robustness.start_retries == 0
    configure_harness(h, AXTreeSearch(prm="none", policy="p"))
    assert h.element_probes is True and h.robustness.start_retries == 2

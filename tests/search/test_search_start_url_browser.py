"""In headless Chromium: a task whose setup leaves the browser on another page than its start URL
(as WebArena's logins do). The PRM's prompts in both search loops must show the task's start
URL, not the first page observed; step records count screened candidates and truncated judgments."""

from pathlib import Path

import pytest
from local_pages import Pages
from shop_scripts import mag_output

from harness.env import BrowserHarness, host_of
from judgment.parse import parse_prompt
from prm.judge import Judgment
from search.agent import run_axtree_episode
from search.mag.agent import run_mag_episode
from search.mag.som import MAG_ACTION_SUBSETS, VIEWPORT
from search.tournament import prm_pair_judge, prm_state

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def login_then_elsewhere_task(base: str):
    """A WebArena-like task: ``config['start_url']`` is /marks, but setup ends on /echo."""
    from browsergym.core.task import AbstractBrowserTask

    class Task(AbstractBrowserTask):
        @classmethod
        def get_task_id(cls):
            return "local.login_then_elsewhere"

        def __init__(self, seed: int):
            super().__init__(seed)
            self.config = {"start_url": f"{base}/marks"}

        def setup(self, page):
            page.goto(self.config["start_url"])
            page.goto(f"{base}/echo?from=login")
            return "Look around.", {}

        def validate(self, page, chat_messages):
            return 0.0, False, "", {}

    return Task


class RecordingJudge:
    """Truncates the first judgment of every batch, prefers Response 1 otherwise."""

    def __init__(self):
        self.prompts = []

    def judge_prompts(self, prompts):
        self.prompts.extend(prompts)
        return [Judgment("<think>cut", None, truncated=True) if i == 0 else Judgment("<Answer>Response 1</Answer>", 1)
                for i in range(len(prompts))]


def test_prm_prompts_hold_the_tasks_start_url():
    judge = RecordingJudge()
    seen_urls = []

    def judge_for(obs, history):
        seen_urls.append(obs.url)
        return prm_pair_judge(judge, prm_state(obs, history))

    def propose(obs, history, feedback, n, step):
        return ["scroll(0, 100)", "scroll(0, 200)", "click('nope')", "scroll(0, 100)"]

    with Pages() as pages:
        start = f"{pages.url}/marks"
        with BrowserHarness(login_then_elsewhere_task(pages.url), allowed_hosts={host_of(pages.url)}) as h:
            result = run_axtree_episode(h, propose, judge_for, n=4, max_steps=2, seed=0)
            assert h.start_url == start
        assert result.termination == "step_budget" and len(judge.prompts) == 2
        assert "/echo?from=login" in seen_urls[0] and seen_urls[0] != start
        assert {parse_prompt(p).start_url for p in judge.prompts} == {start}
        s = result.steps[0]
        assert (s.proposed, s.screened_invalid, s.screened_duplicate,
                s.judge_calls, s.judge_truncated) == (4, 1, 1, 1, 1)
        assert result.totals["judge_truncated"] == 2 and result.totals["screened_duplicate"] == 2

        mag_judge = RecordingJudge()

        def mag_judge_for(obs, history):
            return prm_pair_judge(mag_judge, prm_state(obs, history))

        def mag_propose(obs, guides, n, step):
            return [mag_output("scroll", None, "down", "Scroll down."), mag_output("scroll", None, "up", "Scroll up."),
                    "no json here"]

        with BrowserHarness(login_then_elsewhere_task(pages.url), allowed_hosts={host_of(pages.url)},
                            viewport=VIEWPORT, action_subsets=MAG_ACTION_SUBSETS) as h:
            ep = run_mag_episode(h, mag_propose, mag_judge_for, n=3, max_steps=1, seed=0)
        assert len(mag_judge.prompts) == 1 and parse_prompt(mag_judge.prompts[0]).start_url == start
        assert "/echo?from=login" in parse_prompt(mag_judge.prompts[0]).current_url
        m = ep.steps[0]
        assert (m.proposed, m.screened_invalid, m.judge_calls, m.judge_truncated) == (3, 1, 1, 1)
        assert ep.to_dict()["totals"]["judge_truncated"] == 1

"""Search as the paper runs it, without a browser: the PRM's prompt holds the task's start URL,
truncated judgments and screened-out candidates are counted per step and per run, success rates
count every task, and an endpoint PRM gets a full judgment's length by default."""

from __future__ import annotations

import argparse

import pytest

from harness.env import Observation, task_start_url
from judgment.parse import parse_prompt
from prm.judge import Judgment, judge_pairs
from search import webarena as wa
from search.agent import run_axtree_episode
from search.episodes import prm_llm_config
from search.loop import STEP_COUNTS, sum_counts
from search.runner import SearchConfig, llm_settings
from search.tournament import knockout, prm_pair_judge, prm_state

AXTREE = "[1] RootWebArea 'Shop'\n\t[12] button 'Order'\n\t[40] link 'Home'\n\t[41] link 'Help'"


def test_truncated_judgments_are_handled_like_unparsed_but_counted_apart():
    def judge(pairs):
        return [Judgment("<think>cut here", None, truncated=True) for _ in pairs]

    r = knockout(["click('12')", "click('40')"], judge, axtree=AXTREE, seed=3)
    m = r.matches[0]
    assert m.tie and m.truncated and m.verdict is None and r.winner == m.a1     # the first drawn wins, as unparsed
    assert r.judgments == {"calls": 1, "verdicts": 0, "unparsed": 0, "truncated": 1}

    def mixed(pairs):       # first order truncated, swapped order unparsed
        half = len(pairs) // 2
        return [Judgment("cut", None, truncated=True)] * half + [Judgment("no answer", None)] * half
    r2 = knockout(["click('12')", "click('40')", "click('41')"], mixed, axtree=AXTREE, both_orders=True)
    assert r2.judgments == {"calls": 4, "verdicts": 0, "unparsed": 2, "truncated": 2}
    assert r2.to_dict()["judgments"] == r2.judgments


def test_screened_candidates_are_counted():
    r = knockout(["click('12')", "click('999')", "not an action", "click( '12')", "click('40')"],
                 lambda pairs: [1] * len(pairs), axtree=AXTREE)
    assert r.screened == {"invalid": 2, "duplicate": 1} and r.to_dict()["screened"] == r.screened
    assert r.judgments == {"calls": 1, "verdicts": 1, "unparsed": 0, "truncated": 0}


class FakeHarness:
    """Two pages; the task's start URL is not the page the episode begins on (a login redirect)."""

    start_url = "http://shop/start"

    def __init__(self):
        self.browser_s = 0.0
        self.url = "http://shop/login-landing"

    def _obs(self):
        return Observation(goal="Order an iPad", axtree=AXTREE, url=self.url, start_url=self.start_url)

    def reset(self, seed=0):
        return self._obs()

    def refused(self, action):
        return None

    def step(self, action):
        self.url = "http://shop/page2"
        return self._obs()

    def evaluate(self):
        return 1.0, {}


def test_episode_step_records_and_the_prms_start_url():
    prompts = []

    class RecordingJudge:
        def judge_prompts(self, ps):
            prompts.extend(ps)
            return [Judgment("<Answer>Response 1", None, truncated=True) if i == 0 else
                    Judgment("<Answer>Response 1</Answer>", 1) for i, _ in enumerate(ps)]

    judge = RecordingJudge()

    def judge_for(obs, history):
        return prm_pair_judge(judge, prm_state(obs, history))

    def propose(obs, history, feedback, n, step):
        if step == 0:   # 2 valid, one absent bid, one garbage, one duplicate
            return ["click('12')", "click('40')", "click('777')", "hmm", "click('12')"]
        return ["send_msg_to_user('done')", "click('41')", "click('40')"]

    result = run_axtree_episode(FakeHarness(), propose, judge_for, n=5, max_steps=2)
    s0, s1 = result.steps
    assert (s0.proposed, s0.screened_invalid, s0.screened_duplicate) == (5, 2, 1)
    assert (s0.judge_calls, s0.judge_truncated, s0.judge_unparsed) == (1, 1, 0)
    assert (s1.proposed, s1.screened_invalid, s1.screened_duplicate, s1.judge_calls) == (3, 0, 0, 2)
    assert s1.judge_truncated == 2           # the first prompt of each round is cut
    assert result.totals == {"proposed": 8, "screened_invalid": 2, "screened_duplicate": 1, "judge_calls": 3,
                             "judge_unparsed": 0, "judge_truncated": 3}
    assert result.to_dict()["totals"] == result.totals
    # the prompt holds the task's start URL, on the first page and after navigating
    parts = [parse_prompt(p) for p in prompts]
    assert {p.start_url for p in parts} == {"http://shop/start"}
    assert [p.current_url for p in parts] == ["http://shop/login-landing", "http://shop/page2", "http://shop/page2"]


def test_prm_state_falls_back_only_without_a_start_url():
    obs = Observation(goal="g", axtree=AXTREE, url="http://shop/now")
    state = prm_state(obs, ["click('40')"])
    assert state.start_url == "" and state.history == ["click('40')"]
    echo_judge = type("J", (), {"judge_prompts": lambda self, ps: ps})()
    prompt = judge_pairs(echo_judge, [(state, "click('12')", "click('40')")])
    assert parse_prompt(prompt[0]).start_url == "http://shop/now"


def test_task_start_url_is_the_tasks_own():
    class WebArenaLike:
        config = {"start_url": "http://gitlab:8023/a |AND| http://wiki:8888/b"}

    class Demo:
        start_url = "http://127.0.0.1:5555/"

    assert task_start_url(WebArenaLike()) == "http://gitlab:8023/a |AND| http://wiki:8888/b"
    assert task_start_url(Demo()) == "http://127.0.0.1:5555/" and task_start_url(object()) is None


def _row(task_id, site, evaluated, success, termination, totals=None):
    return {"task_id": task_id, "site": site, "evaluated": evaluated, "success": success, "termination": termination,
            "error": "" if evaluated else "net::ERR_CONNECTION_REFUSED", "totals": totals}


def test_success_counts_every_task_and_lists_env_failures():
    t = dict.fromkeys(STEP_COUNTS, 1)
    rows = [_row(1, "shopping", True, True, "answered", t), _row(2, "shopping", False, False, "site_unreachable"),
            _row(3, "shopping", False, False, "env_error", t), _row(4, "reddit", True, False, "step_budget", t)]
    s = wa.summarize_run(rows)
    assert s["sites"]["shopping"]["success_rate"] == pytest.approx(1 / 3)       # not 1/1
    assert s["sites"]["shopping"]["env_failures"] == 2 and s["sites"]["reddit"]["success_rate"] == 0.0
    assert s["macro"]["success_rate"] == pytest.approx((1 / 3 + 0) / 2)
    assert s["tasks"] == 4 and s["env_failures"] == 2
    assert [(f["task_id"], f["termination"]) for f in s["env_failed_tasks"]] == [(2, "site_unreachable"),
                                                                                (3, "env_error")]
    assert s["totals"] == dict.fromkeys(STEP_COUNTS, 3) == sum_counts([t, t, t, {}])


def _args(*argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--prm")
    from llm import LLMConfig

    LLMConfig.add_args(ap, prefix="prm-")
    return ap.parse_args(["--prm", *argv])


def prm_config(args):
    return prm_llm_config(SearchConfig(prm=args.prm, policy="p", prm_llm=llm_settings(args, "prm-")))


def test_endpoint_prm_gets_a_full_judgments_length(tmp_path):
    assert prm_config(_args("my-prm", "--prm-base-url", "http://gpu:8000/v1")).max_tokens == 1024
    args = _args("my-prm", "--prm-base-url", "http://gpu:8000/v1", "--prm-max-tokens", "48")
    assert prm_config(args).max_tokens == 48
    cfg = tmp_path / "llm.yaml"
    cfg.write_text("max_tokens: 300\n")
    assert prm_config(_args("my-prm", "--prm-base-url", "http://x/v1", "--prm-llm-config", str(cfg))).max_tokens == 300
    assert prm_config(_args("embedded")).max_tokens == 256         # local judges: unchanged here
    # the model is the name given, unless --prm-model names it
    assert prm_config(_args("my-prm", "--prm-base-url", "http://x/v1")).model == "my-prm"
    assert prm_config(_args("embedded")).model is None and prm_config(_args("embedded")).is_local


def test_an_agent_is_get_action_obs_to_action_and_info():
    """BrowserGym's agent contract: the action to run and the step's record, which holds the
    candidates and the bracket; nothing valid is (None, record); both agents' records carry the
    loop's fields."""
    from dataclasses import asdict, fields

    from search.agent import AXTreeAgent, AXTreeStep
    from search.loop import STEP_RECORD
    from search.mag.agent import MagStep

    obs = Observation(goal="Order an iPad", axtree=AXTREE, url="http://shop/")
    seen = []

    def propose(obs, history, feedback, n, step):
        seen.append((list(history), feedback, n, step))
        return ["click('40')", "click('12')", "nothing"][:n]

    def judge_for(obs, history):
        return lambda pairs: [1 if a1 == "click('12')" else 2 for a1, a2 in pairs]

    agent = AXTreeAgent(propose, judge_for, n=3, seed=1)
    action, info = agent.get_action(obs)
    assert action == info.chosen == info.bracket["winner"] == "click('12')"
    assert info.candidates == ["click('40')", "click('12')", "nothing"]
    assert [c["dropped"] is None for c in info.bracket["candidates"]] == [True, True, False]
    assert (info.proposed, info.screened_invalid, info.judge_calls) == (3, 1, 1)
    info.feedback = "navigated"                 # what execute writes: the next step's feedback
    assert agent.get_action(obs)[0] == "click('12')" and seen[1] == (["click('12')"], "navigated", 3, 1)
    baseline = AXTreeAgent(lambda *a: ["nothing"], None, n=5)
    action, info = baseline.get_action(obs)
    assert action is None and info.error.startswith("no valid candidate: unparseable")
    assert set(STEP_RECORD) <= set(asdict(info)) and set(STEP_RECORD) <= {f.name for f in fields(MagStep)}
    assert isinstance(info, AXTreeStep)

"""The policy's prompt and action extraction, before/after feedback, and the real client path:
a scripted OpenAI-protocol policy (``n`` samples) and PRM judging a knockout."""

from scripted_llm import scripted_server

from data.state import State
from harness.env import Observation
from judgment.parse import parse_prompt
from llm import LLMConfig
from prm.judge import EndpointJudge
from search.agent import Policy, build_messages, candidate_text, describe_outcome
from search.tournament import knockout, prm_pair_judge

TREE = "RootWebArea 'Shop'\n\t[9] searchbox 'Search' value='kettel'\n\t[10] button 'Search'\n\t[12] link 'Cart'"


def obs(url="http://s/", tabs=1, tree=TREE, err="", scroll=(0, 0)):
    return Observation(goal="find kettles", axtree=tree, url=url, open_urls=[url] * tabs,
                       last_action_error=err, scroll=scroll)


def test_prompt_holds_goal_url_tree_history_and_feedback():
    msgs = build_messages("find kettles", TREE, "http://s/", ["fill('9', 'k')"], "navigated from a to b")
    user = msgs[1]["content"]
    for part in ("find kettles", "http://s/", "[12] link 'Cart'", "1. fill('9', 'k')", "navigated from a to b"):
        assert part in user
    assert "(first step)" in build_messages("g", TREE, "u", [])[1]["content"]


def test_candidate_text_is_data_actions_extract_action_or_the_raw_text():
    assert candidate_text("I will search.\n```\nclick('10')\n```") == "click('10')"
    assert candidate_text("Thought: go\nAction: click( '12' )") == "click('12')"
    assert candidate_text('```\nclick("10")\n```') == "click('10')"          # the canonical text
    assert candidate_text("not click('40') but fill('12', 'x')") == "fill('12', 'x')"    # agents act last
    assert candidate_text("  no idea ") == "no idea"      # no action: the tournament drops it, text shown
    assert candidate_text("Thought.\n```\nno idea\n```") == "no idea"        # ... the answer's block


def test_feedback_describes_what_happened():
    assert describe_outcome("click('12')", obs(), obs(url="http://s/cart")) == "navigated from http://s/ to http://s/cart"
    assert "did not navigate" in describe_outcome("click('10')", obs(), obs())
    assert "new tab" in describe_outcome("click('12')", obs(), obs(tabs=2))
    assert "typed value differs: the field shows 'kettel', asked 'kettle'" in describe_outcome(
        "fill('9', 'kettle')", obs(), obs())
    assert "typed value" not in describe_outcome("fill('9', 'kettel')", obs(), obs())
    assert "scroll did not move" in describe_outcome("scroll(0, 300)", obs(), obs())
    assert "scroll" not in describe_outcome("scroll(0, 300)", obs(), obs(scroll=(0, 300)))
    got = describe_outcome("click('77')", obs(), obs(err='ValueError: Could not find element with bid "77"'))
    assert got.startswith("element not found: there is no element [77]")


def _cfg(server, tmp_path, **kw):
    return LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(tmp_path / "cache"),
                     max_retries=0, api_key_env="SURFPRM_TEST_KEY_UNSET", **kw)


def test_policy_asks_n_samples_and_prm_judges_the_knockout(tmp_path):
    seen = []
    answers = [f"t\n```\nclick('{b}')\n```" for b in ("9", "10", "12", "10", "99")]
    policy_srv = scripted_server(lambda p: seen.append(p) or answers[:p["n"]])

    def prm(payload):
        first = parse_prompt(payload["messages"]).response_1
        return [f"ok\n<Answer>Response {1 if first == 'click(' + chr(39) + '12' + chr(39) + ')' else 2}</Answer>"]
    prm_srv = scripted_server(prm)
    try:
        policy = Policy(_cfg(policy_srv, tmp_path, temperature=1.0))
        raws = policy.propose(obs(), [], "", n=5, step=3)
        assert seen[0]["n"] == 5 and seen[0]["temperature"] == 1.0 and seen[0]["seed"] == 3
        assert raws == ["click('9')", "click('10')", "click('12')", "click('10')", "click('99')"]
        judge = prm_pair_judge(EndpointJudge(_cfg(prm_srv, tmp_path)), State(intent="find kettles", axtree=TREE, url="http://s/"))
        r = knockout(raws, judge, axtree=TREE, seed=0)
        assert r.winner == "click('12')" and len(r.matches) == 2 and "<Answer>" in r.matches[0].judgment
    finally:
        policy_srv.shutdown()
        prm_srv.shutdown()

"""Knockout best-of-N: screening, bracket shape, batching, determinism, both orders."""

import math

import pytest

from prm.judge import Judgment
from search.tournament import knockout, read_actions, screen

AXTREE = "\n".join([
    "RootWebArea 'Shop', focused",
    "\t[10] searchbox 'Search'",
    "\t[11] button 'Go'",
    "\t[12] link 'Cart'",
    "\t[13] link 'Help'",
    "\t[14] link 'About'",
    "\t[15] link 'Blog'",
    "\t[16] link 'Jobs'",
])


class Recorder:
    """A judge preferring the action ranked higher in ``prefs`` (unknown: position 1)."""

    def __init__(self, prefs=()):
        self.prefs, self.batches = list(prefs), []

    def rank(self, a):
        return self.prefs.index(a) if a in self.prefs else len(self.prefs)

    def __call__(self, pairs):
        self.batches.append(list(pairs))
        return [Judgment(f"{a1} vs {a2}", 1 if self.rank(a1) <= self.rank(a2) else 2) for a1, a2 in pairs]

    @property
    def calls(self):
        return sum(len(b) for b in self.batches)


@pytest.mark.parametrize("n", range(1, 10))
def test_n_minus_one_matches_in_ceil_log2_rounds(n):
    cands = [f"click('{10 + i}')" for i in range(n)]
    judge = Recorder(prefs=[cands[-1]])
    r = knockout(cands, judge, axtree=AXTREE if n <= 7 else None, seed=3)
    assert judge.calls == len(r.matches) == n - 1 == r.calls
    assert r.rounds == len(judge.batches) == (math.ceil(math.log2(n)) if n > 1 else 0)
    # one batch per round, holding exactly that round's matches
    for k, batch in enumerate(judge.batches, start=1):
        assert batch == [(m.a1, m.a2) for m in r.matches if m.round == k]
    assert r.winner == cands[-1]      # the judge's favourite wins wherever it is drawn


def test_odd_count_gives_byes_and_everyone_plays_or_rests_each_round():
    cands = [f"click('{10 + i}')" for i in range(5)]
    r = knockout(cands, Recorder(), axtree=AXTREE, seed=1)
    # 5 -> 3 (2 matches + bye) -> 2 (1 match + bye) -> 1
    assert [b.round for b in r.byes] == [1, 2]
    assert [sum(m.round == k for m in r.matches) for k in (1, 2, 3)] == [2, 1, 1]
    for k in (1, 2, 3):
        players = ([a for m in r.matches if m.round == k for a in (m.a1, m.a2)]
                   + [b.action for b in r.byes if b.round == k])
        assert len(players) == len(set(players))
    # the bye goes to someone who then plays on
    later = {a for m in r.matches if m.round >= 2 for a in (m.a1, m.a2)} | {b.action for b in r.byes[1:]}
    assert r.byes[0].action in later


def test_duplicates_are_merged_and_counted():
    cands = ["click('12')", "click( '12' , button='left')", 'click("12")', "fill('10', 'shoes')"]
    judge = Recorder(prefs=["fill('10', 'shoes')"])
    r = knockout(cands, judge, axtree=AXTREE)
    assert r.survivors == ["click('12')", "fill('10', 'shoes')"]
    assert r.candidates[0].count == 3
    assert [c.dropped for c in r.candidates[1:3]] == ["duplicate of 0", "duplicate of 0"]
    assert judge.calls == 1 and r.winner == "fill('10', 'shoes')"


def test_invalid_candidates_are_dropped_with_a_reason():
    cands = ["click('999')", "clik('12')", "", "I would click the cart", "drag_and_drop('12', '77')",
             "scroll(0, 200)", "fill('10', 'x')"]
    got = screen(cands, read_actions(cands, AXTREE))
    assert got[0].dropped == "bid not in AXTree: 999"
    assert got[1].dropped.startswith("unparseable") and got[2].dropped.startswith("unparseable")
    assert got[3].dropped.startswith("unparseable")
    assert got[4].dropped == "bid not in AXTree: 77"
    assert [c.action for c in got if c.dropped is None] == ["scroll(0, 200)", "fill('10', 'x')"]
    # without an AXTree only parsing is checked
    assert screen(["click('999')"], read_actions(["click('999')"]))[0].dropped is None


def test_one_survivor_needs_no_judge_and_none_gives_no_winner():
    judge = Recorder()
    r = knockout(["click('999')", "click('12')", "click('12')"], judge, axtree=AXTREE)
    assert r.winner == "click('12')" and judge.calls == 0 and r.rounds == 0 and r.matches == []
    r = knockout(["nonsense", "click('404')"], judge, axtree=AXTREE)
    assert r.winner is None and judge.calls == 0
    assert r.to_dict()["winner"] is None


def test_bracket_is_determined_by_the_seed():
    cands = [f"click('{10 + i}')" for i in range(7)]

    def bracket(seed):
        return [(m.round, m.a1, m.a2) for m in knockout(cands, Recorder(), axtree=AXTREE, seed=seed).matches]

    assert bracket(5) == bracket(5)
    assert len({tuple(bracket(s)) for s in range(10)}) > 1
    # the judge always naming position 1 makes the winner the first drawn: seeds vary it
    assert len({knockout(cands, lambda p: [1] * len(p), seed=s).winner for s in range(20)}) > 1


def test_both_orders_batches_swapped_pairs_and_resolves_disagreement():
    cands = ["click('10')", "click('11')", "click('12')"]
    judge = Recorder(prefs=["click('11')", "click('12')", "click('10')"])
    r = knockout(cands, judge, axtree=AXTREE, seed=0, both_orders=True)
    assert judge.calls == 4 == r.calls and len(judge.batches) == 2
    first = judge.batches[0]
    assert first[1] == (first[0][1], first[0][0])       # same round: pair, then the pair swapped
    assert r.winner == "click('11')"
    assert all(not m.tie for m in r.matches)
    # a position-biased judge (always 1) ties every match: the first drawn advances, marked tie
    r = knockout(cands, lambda p: [(1, "always one")] * len(p), seed=0, both_orders=True)
    assert all(m.tie and m.winner == m.a1 for m in r.matches)
    assert r.matches[0].judgment == "always one" and r.matches[0].verdict_swapped == 1


def test_unparsed_verdict_is_recorded_and_judge_length_checked():
    r = knockout(["click('10')", "click('11')"], lambda p: [Judgment("???", None)], seed=0)
    assert r.matches[0].verdict is None and r.matches[0].tie and r.winner == r.matches[0].a1
    with pytest.raises(ValueError):
        knockout(["click('10')", "click('11')"], lambda p: [], seed=0)


def test_prm_prompt_template_reaches_the_judge(tmp_path):
    """``--prm-prompt-template``: the PRM's match prompts are the user's text with the state filled in."""
    from data.state import State
    from prm.judge import Judgment
    from search.runner import parse_config
    from search.tournament import prm_format, prm_pair_judge
    from search.webarena import WEBARENA_LITE

    template = tmp_path / "t.yaml"
    template.write_text("user: '{start_url} | {current_url} | {response_1} vs {response_2}'\n")
    flags = ["--prm", "none", "--policy", "m"]
    fmt = prm_format(parse_config(WEBARENA_LITE, flags + ["--prm-prompt-template", str(template)]))
    seen = []

    class Judge:
        def judge_prompts(self, prompts):
            seen.extend(prompts)
            return [Judgment("<Answer>Response 1</Answer>", 1) for _ in prompts]

    state = State(intent="buy", axtree="[1] RootWebArea 'x'", url="http://s/now", start_url="http://s/start")
    verdicts = prm_pair_judge(Judge(), state, fmt=fmt)([("click('1')", "click('2')")])
    assert verdicts[0].verdict == 1
    assert seen == [[{"role": "user", "content": "http://s/start | http://s/now | click('1') vs click('2')"}]]
    assert prm_format(parse_config(WEBARENA_LITE, flags)).template is None

"""Knockout search latency on the local test shop with the embedded models.

    .venv/bin/python bench/search.py [--steps 4] [--n 5] [--max-tokens 48]

Part 1 runs one guided episode (embedded SmolLM2 as policy with N samples and as PRM, headless
Chromium, the shop of ``search/demo_site.py``) and reports per-step latency split into
policy, judge and browser time. The 135M model rarely writes a valid action, so each step's
samples are joined by two scripted valid ones (``scroll(0, 200)``, a click on the first link):
the tournament then always has matches and the browser always acts. Part 2 judges one knockout round's pairs (N // 2 matches, and the
N - 1 of a whole bracket) on one state with the local judge in one batch versus one call at a
time. Caches are off (a fresh folder), greedy judging, so the figures are compute, not disk.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "search")]

from data.config import make_parser  # noqa: E402
from search.demo_site import Shop, make_task  # noqa: E402
from prm.judge import LocalJudge, judge_pairs  # noqa: E402
from search.agent import Policy, run_axtree_episode  # noqa: E402
from harness.env import BrowserHarness, host_of  # noqa: E402
from search.tournament import prm_pair_judge, prm_state  # noqa: E402
from llm.embedded import default_model_dir  # noqa: E402
from llm import LLMConfig  # noqa: E402
from data.judgment import State  # noqa: E402


def main(argv=None) -> int:
    ap = make_parser(prog="bench/search.py")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--axtree-chars", "--budget", dest="axtree_chars", type=int, default=1500,
                    help="AXTree characters in prompts (--budget is its old name)")
    args = ap.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="bench-search-")
    policy = Policy(LLMConfig(temperature=1.0, max_tokens=args.max_tokens, cache_dir=cache), budget=args.axtree_chars)
    judge = LocalJudge.from_pretrained(str(default_model_dir()), max_tokens=args.max_tokens, batch_size=8)

    def judge_for(obs, history):
        return prm_pair_judge(judge, prm_state(obs, history),
                              budget=args.axtree_chars)

    with Shop() as shop, BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        t = time.perf_counter()
        h.reset(0)
        reset_s = time.perf_counter() - t
        def propose(obs, history, feedback, n, step):
            from graph.axtree import parse_axtree

            link = next(x.bid for x in parse_axtree(obs.axtree).nodes if x.role == "link" and x.bid)
            return policy.propose(obs, history, feedback, n, step) + ["scroll(0, 200)", f"click('{link}')"]

        result = run_axtree_episode(h, propose, judge_for, n=args.n, max_steps=args.steps, seed=0)
        axtree = h._observe(h.env._get_obs()).axtree
    steps = result.steps
    split = {k: statistics.mean(getattr(s, k) for s in steps) for k in ("policy_s", "judge_s", "browser_s")}
    out = {"episode": {"steps": len(steps), "termination": result.termination, "first_reset_s": round(reset_s, 2),
                       "mean_per_step_s": {k: round(v, 3) for k, v in split.items()},
                       "matches_per_step": [len(s.bracket["matches"]) if s.bracket else 0 for s in steps]}}
    state = State(intent="Order 2 Blue Kettles for Ada", axtree=axtree, url=shop.url)
    actions = [f"click('{b}')" for b in range(4, 4 + args.n)]
    rounds = {}
    for label, pairs in (("one_round", [(actions[i], actions[i + 1]) for i in range(0, args.n - 1, 2)]),
                         ("whole_bracket", [(actions[0], a) for a in actions[1:]])):
        items = [(state, a1, a2) for a1, a2 in pairs]
        judge_pairs(judge, items[:1], budget=args.axtree_chars)          # warm-up
        t = time.perf_counter()
        judge_pairs(judge, items, budget=args.axtree_chars)
        batched = time.perf_counter() - t
        t = time.perf_counter()
        for it in items:
            judge_pairs(judge, [it], budget=args.axtree_chars)
        single = time.perf_counter() - t
        rounds[label] = {"pairs": len(items), "batched_s": round(batched, 2), "one_at_a_time_s": round(single, 2),
                         "speedup": round(single / batched, 2)}
    out["judge"] = rounds
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

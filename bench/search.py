"""Knockout search latency on the local test shop with the embedded models.

    .venv/bin/python bench/search.py [--steps 4] [--n 5] [--max-tokens 48] [--judge-mode score-both]
                                     [--parts episode judge] [--threads 2] [--repeat 1]

Part ``episode`` runs one guided episode (embedded SmolLM2 as policy with N samples and as PRM,
headless Chromium, the shop of ``search/demo_site.py``) and reports per-step latency split into
policy, judge and browser time, and the judge's seconds per match. The 135M model rarely writes a
valid action, so each step's samples are joined by two scripted valid ones (``scroll(0, 200)``, a
click on the first link): the tournament then always has matches and the browser always acts.
Part ``judge`` judges one knockout round's pairs (N // 2 matches, and the N - 1 of a whole
bracket) on the shop's first page with the local judge in one batch versus one call at a time,
``--repeat`` times (the fastest run is kept), and the prompt's tokens and where its two orders part.

The PRM judges as a local PRM does in search by default (``--prm-judge-mode auto`` = ``score-both``:
``llm.scoring``); ``--judge-mode generate`` generates ``--max-tokens`` instead. Caches are off (a
fresh folder), so the figures are compute, not disk. Torch runs on ``--threads`` threads.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "search")]

from cli.config import make_parser  # noqa: E402
from data.state import State
from harness.env import BrowserHarness, host_of  # noqa: E402
from judgment.format import render_pair
from judgment.parse import swap_responses  # noqa: E402
from llm import LLMConfig  # noqa: E402
from llm.embedded import default_model_dir  # noqa: E402
from prm.judge import JUDGE_MODES, LocalJudge, judge_pairs  # noqa: E402
from search.agent import Policy, run_axtree_episode  # noqa: E402
from search.demo_site import Shop, make_task  # noqa: E402
from search.tournament import prm_pair_judge, prm_state  # noqa: E402


def episode(args, judge, policy, shop) -> dict:
    """One guided episode's per-step split."""
    def judge_for(obs, history):
        return prm_pair_judge(judge, prm_state(obs, history), budget=args.axtree_chars)

    def propose(obs, history, feedback, n, step):
        from graph.axtree import parse_axtree

        link = next(x.bid for x in parse_axtree(obs.axtree).nodes if x.role == "link" and x.bid)
        return policy.propose(obs, history, feedback, n, step) + ["scroll(0, 200)", f"click('{link}')"]

    with BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        t = time.perf_counter()
        h.reset(0)
        reset_s = time.perf_counter() - t
        result = run_axtree_episode(h, propose, judge_for, n=args.n, max_steps=args.steps, seed=0)
    steps = result.steps
    split = {k: statistics.mean(getattr(s, k) for s in steps) for k in ("policy_s", "judge_s", "browser_s")}
    matches = [len(s.bracket["matches"]) if s.bracket else 0 for s in steps]
    return {"steps": len(steps), "termination": result.termination, "first_reset_s": round(reset_s, 2),
            "mean_per_step_s": {k: round(v, 3) for k, v in split.items()}, "matches_per_step": matches,
            "judge_s_per_match": round(sum(s.judge_s for s in steps) / max(sum(matches), 1), 3)}


def prompt_tokens(judge, state, a1, a2, budget) -> dict:
    """The chat-templated prompt's tokens, and where it and its swapped order part."""
    from llm.scoring import prompt_text

    messages, _ = render_pair(state, a1, a2, budget)
    given, swapped = (judge.tokenizer(prompt_text(judge.tokenizer, m), add_special_tokens=False)["input_ids"]
                      for m in (messages, swap_responses(messages)))
    return {"tokens": len(given), "orders_part_at": len(os.path.commonprefix([given, swapped]))}


def timed(fn) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``fn()``: on a shared machine the CPU
    seconds (with one torch thread) are the steadier figure."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def rounds(args, judge, state) -> dict:
    """One round's and a whole bracket's pairs judged in one batch and one at a time."""
    actions = [f"click('{b}')" for b in range(4, 4 + args.n)]
    out = {"prompt": prompt_tokens(judge, state, actions[0], actions[1], args.axtree_chars)}
    for label, pairs in (("one_round", [(actions[i], actions[i + 1]) for i in range(0, args.n - 1, 2)]),
                         ("whole_bracket", [(actions[0], a) for a in actions[1:]])):
        items = [(state, a1, a2) for a1, a2 in pairs]
        judge_pairs(judge, items[:1], budget=args.axtree_chars)          # warm-up
        batched, single = [], []
        for _ in range(args.repeat):
            batched.append(timed(lambda items=items: judge_pairs(judge, items, budget=args.axtree_chars)))
            single.append(timed(lambda items=items: [judge_pairs(judge, [it], budget=args.axtree_chars)
                                                  for it in items]))
        (b, b_cpu), (s, s_cpu) = min(batched), min(single)
        out[label] = {"pairs": len(items), "batched_s": round(b, 2), "one_at_a_time_s": round(s, 2),
                      "batched_s_per_match": round(b / len(items), 3), "speedup": round(s / b, 2),
                      "batched_cpu_s_per_match": round(b_cpu / len(items), 3),
                      "one_at_a_time_cpu_s_per_match": round(s_cpu / len(items), 3)}
    return out


def main(argv=None) -> int:
    import torch

    ap = make_parser(prog="bench/search.py")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--axtree-chars", "--budget", dest="axtree_chars", type=int, default=1500,
                    help="AXTree characters in prompts (--budget is its old name)")
    ap.add_argument("--judge-mode", choices=JUDGE_MODES, default="score-both",
                    help="how the local PRM judges (search's default for a local PRM: score-both)")
    ap.add_argument("--parts", nargs="+", choices=("episode", "judge"), default=["episode", "judge"])
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--repeat", type=int, default=1, help="runs of the judge part (the fastest is kept)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = tempfile.mkdtemp(prefix="bench-search-")
    policy = Policy(LLMConfig(temperature=1.0, max_tokens=args.max_tokens, cache_dir=cache), budget=args.axtree_chars)
    judge = LocalJudge.from_pretrained(str(default_model_dir()), max_tokens=args.max_tokens, batch_size=8,
                                       mode=args.judge_mode)
    out = {"judge_mode": args.judge_mode, "threads": torch.get_num_threads(), "load_before": os.getloadavg()}
    with Shop() as shop:
        if "episode" in args.parts:
            out["episode"] = episode(args, judge, policy, shop)
        if "judge" in args.parts:
            state = State(intent="Order 2 Blue Kettles for Ada", axtree=shop_axtree(shop), url=shop.url)
            out["judge"] = rounds(args, judge, state)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


def shop_axtree(shop) -> str:
    """The shop's first page's AXTree, from the browser."""
    with BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        h.reset(0)
        return h._observe(h.env._get_obs()).axtree


if __name__ == "__main__":
    sys.exit(main())

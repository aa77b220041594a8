"""The embedded candidates as judges on the shared traces' mined pairs: generate vs score.

    .venv/bin/python bench/embedded_models.py [--models smollm2-135m,qwen2.5-coder-0.5b]
        [--pairs 40] [--gen-pairs 10] [--axtree-chars 2000] [--max-tokens 192] [--out FILE.json]

Ingests ``../shared/data/agentlab_workarena``, builds the graphs and mines grounded negatives
with fill values from a scripted OpenAI-protocol server (as ``bench/flat_axtree.py``: the rules
are measured there, not the model's wording); the run is kept in
``.cache/bench/embedded_models/run`` and reused. The sampled pairs are rendered exactly as
``teacher.verify`` renders them (the benchmark's prompt, Action-Only, a coin per pair puts the
demonstrated action at ``label``; AXTree budget ``--axtree-chars`` characters, ``make run``'s 2000 by
default) and ``--pairs`` of them (spread over the rules, seeded) are judged by each model
(``llm.embedded.MODELS``, prepared with ``python -m llm.embedded prepare --model NAME``):

* ``generate``: ``prm.judge.LocalJudge`` writes a judgment (greedy, ``--max-tokens``) and its
  answer tag is read (``parse_verdict``); on the first ``--gen-pairs`` pairs only (slow on CPU);
* ``score``: the likelier of the two answer tags after the prompt (``llm.scoring``);
* ``score, both orders (debiased)``, derived from the ``score`` run: one verdict per pair from
  ``margin(as given) - margin(swapped)`` (``margin = log p(tag 1) - log p(tag 2)``), which
  cancels a constant pull toward one position; two forward passes per verdict.

Each pair is judged in both orders (the prompt as rendered and with the responses swapped).
Reported per model and mode: parsed share of verdicts, agreement with the demonstrated label
(per verdict, unparsed counting as wrong; and per pair: right in both orders), position bias
(share of parsed verdicts naming Response 1, where 50% is right in both orders; pairs that name the
same position in both orders), seconds per verdict, and the load average.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from cli.config import make_parser  # noqa: E402

RUN = ROOT / ".cache" / "bench" / "embedded_models" / "run"


def mined_run(shared: Path, sample: int) -> Path:
    """The shared traces ingested, graphed and mined (scripted fill values); reused when present."""
    if (RUN / "candidates.parquet").exists():
        return RUN
    from data.ingest import ingest
    from graph.build import build_graphs
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.mine import MineConfig, mine

    RUN.mkdir(parents=True, exist_ok=True)
    ingest("agentlab", [shared / "agentlab_workarena"], RUN)
    build_graphs(RUN)

    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted")
    try:
        mine(RUN, MineConfig(sample_size=sample, seed=42),
             LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(RUN.parent / "llm-cache")), workers=2)
    finally:
        server.shutdown()
    return RUN


def pick(pairs, n: int, seed: int = 0):
    """``n`` pairs spread over the rules (round robin over rules, seeded order within each)."""
    by_rule = defaultdict(list)
    for p in pairs:
        by_rule[p.row["rule"]].append(p)
    rng = random.Random(seed)
    for v in by_rule.values():
        rng.shuffle(v)
    out, rules = [], sorted(by_rule)
    while len(out) < n and any(by_rule.values()):
        for r in rules:
            if by_rule[r] and len(out) < n:
                out.append(by_rule[r].pop())
    return out


def measure(judge, pairs) -> dict:
    from judgment.parse import swap_responses
    from prm.judge import judge_expected, position_stats

    t0 = time.perf_counter()
    outcomes = judge_expected(judge, [p.messages for p in pairs], [p.label for p in pairs], both_orders=True)
    seconds = time.perf_counter() - t0
    assert all(swap_responses(p.messages) is not None for p in pairs)
    verdicts = [(o.first, o.expected) for o in outcomes] + [(o.swapped, 3 - o.expected) for o in outcomes]
    n = len(verdicts)
    parsed = sum(j.verdict is not None for j, _ in verdicts)
    pos = position_stats(outcomes)
    row = {"pairs": len(pairs), "verdicts": n,
            "parsed": parsed / n, "truncated": sum(j.truncated for j, _ in verdicts) / n,
            "agree_verdicts": sum(j.verdict == e for j, e in verdicts) / n,
            "agree_first_order": sum(o.first.verdict == o.expected for o in outcomes) / len(outcomes),
            "pairs_right_both_orders": sum(o.correct for o in outcomes) / len(outcomes),
            "chose_position_1": pos["chose_position_1"], "position_biased_pairs": pos["position_biased"],
            "s_per_verdict": seconds / n, "seconds": seconds,
            "margins": [[o.first.margin, o.swapped.margin, o.expected] for o in outcomes]}
    return row


def debiased(row: dict) -> dict | None:
    """Scoring with both orders combined: the pair's preference for the response shown first is
    ``margin(as given) - margin(swapped)`` (a constant pull toward one position cancels), one
    verdict per pair from two forward passes; position bias is nil by construction."""
    if not row["margins"] or row["margins"][0][0] is None:
        return None
    right = [(1 if m1 - m2 > 0 else 2) == e for m1, m2, e in row["margins"]]
    n = len(right)
    return {**{k: row[k] for k in ("model", "pairs", "load_avg")}, "mode": "score, both orders (debiased)",
            "verdicts": n, "parsed": 1.0, "truncated": 0.0, "agree_verdicts": sum(right) / n,
            "agree_first_order": sum(right) / n, "pairs_right_both_orders": sum(right) / n,
            "chose_position_1": None, "position_biased_pairs": 0,
            "s_per_verdict": 2 * row["s_per_verdict"], "seconds": row["seconds"], "margins": []}


def main(argv: list[str] | None = None) -> int:
    from data.rundir import RunDir
    from judgment.format import JudgmentFormat
    from judgment.pairs import load_pairs
    from llm.embedded import MODELS, model_dir
    from prm.judge import LocalJudge

    ap = make_parser(prog="bench/embedded_models.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b")
    ap.add_argument("--modes", default="score,generate")
    ap.add_argument("--pairs", type=int, default=40, help="pairs judged by scoring (both orders)")
    ap.add_argument("--gen-pairs", type=int, default=10, help="pairs judged by generation (both orders)")
    ap.add_argument("--axtree-chars", "--budget", dest="axtree_chars", type=int, default=2000,
                    help="AXTree characters in the prompt (make run: 2000; --budget is its old name)")
    ap.add_argument("--max-tokens", type=int, default=192, help="generation length for 'generate'")
    ap.add_argument("--sample", type=int, default=120, help="pairs the miner samples")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = ap.parse_args(argv)
    torch_threads = os.cpu_count()

    run = mined_run(args.shared, args.sample)
    pairs = pick(load_pairs(RunDir(run), 0, JudgmentFormat(axtree_chars=args.axtree_chars)), args.pairs)
    mined = pq.read_metadata(run / "candidates.parquet").num_rows
    print(f"run {run}: {mined} candidates; judging {len(pairs)} pairs "
          f"(labels: {sum(p.label == 1 for p in pairs)} at position 1), AXTree budget {args.axtree_chars}", flush=True)
    results = {"pairs": len(pairs), "gen_pairs": min(args.gen_pairs, len(pairs)), "budget": args.axtree_chars,
               "max_tokens": args.max_tokens, "cpus": torch_threads, "rows": []}
    for name in args.models.split(","):
        path = model_dir(name)
        if not (path / "config.json").exists():
            print(f"skip {name}: run `python -m llm.embedded prepare --model {name}`")
            continue
        judge = LocalJudge.from_pretrained(str(path), max_tokens=args.max_tokens, batch_size=4)
        for mode in args.modes.split(","):
            judge.mode = mode
            subset = pairs if mode != "generate" else pairs[:args.gen_pairs]
            load0 = os.getloadavg()[0]
            row = {"model": name, "mode": mode, **measure(judge, subset),
                   "load_avg": round((load0 + os.getloadavg()[0]) / 2, 2)}
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
            if mode == "score" and (d := debiased(row)) is not None:
                results["rows"].append(d)
                print(json.dumps(d), flush=True)
        del judge
        assert name in MODELS
    print("\n| model | mode | pairs (verdicts) | parsed | agree (verdicts) | right both orders | "
          "chose pos. 1 | pos.-biased pairs | s/verdict | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results["rows"]:
        c1 = "n/a" if r["chose_position_1"] is None else f"{r['chose_position_1']:.0%}"
        print(f"| {r['model']} | {r['mode']} | {r['pairs']} ({r['verdicts']}) | {r['parsed']:.0%} | "
              f"{r['agree_verdicts']:.0%} | {r['pairs_right_both_orders']:.0%} | {c1} | "
              f"{r['position_biased_pairs']} | {r['s_per_verdict']:.1f} | {r['load_avg']} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Pairwise and best-of-N accuracy of a comparative PRM, WebPRMBench-style.

    python -m prm.evaluate --model runs/demo/prm/cpu-demo --bench runs/demo/export/trl-labels/test.parquet \\
        --out runs/demo/prm/eval-trained.json --max-tokens 24
    python -m prm.evaluate --model my-prm --base-url http://gpu:8000/v1 --bench webprmbench.parquet --out prm.json
    python -m prm.evaluate --compare base.json trained.json [--out compare.md]

``--bench`` is WebPRMBench-format Parquet (``state_idx, pair_idx, expected, prompt,
source_name``; the benchmark's own prompts are used as given) or this project's export
(``data.export --format webprmbench``, or a TRL ``trl``/``trl-labels`` split, whose ``label`` is
the expected answer and whose pairs are grouped into states by ``(traj_id, step_idx)``). When a
``candidates.parquet`` is found (``--candidates``, or in the run directory above the bench file)
pairs are joined to it by ``pair_id`` for their rule, axis and GMCP flag.

Metrics (fractions in [0, 1]):
- pairwise accuracy: pairs judged correctly / pairs; an unparsed verdict or an outage is wrong;
  with ``--both-orders`` a pair is correct only if both orders pick the expected action.
- best-of-N accuracy: states whose positive wins every one of its pairs / states (one wrong or
  unparsed pair makes the state wrong).
- both per ``source_name`` and macro-averaged (the unweighted mean over sources); on the
  project's data also per rule, per axis and GMCP vs non-GMCP.
``--out FILE.json`` gets the metrics, ``FILE.md`` a Markdown table, ``FILE.pairs.jsonl`` every
judgment. ``--compare`` puts several result files in one table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from prm.judge import judge_expected, make_judge, position_stats
from teacher.llm import LLMConfig

BENCH_COLUMNS = ("state_idx", "pair_idx", "expected", "prompt", "source_name")


def _prompt(p) -> list[dict]:
    if isinstance(p, str):
        return [{"role": "user", "content": p}]
    return [{"role": m["role"], "content": m["content"]} for m in p]


def find_candidates(bench: Path) -> Path | None:
    for parent in list(bench.resolve().parents)[:3]:
        if (parent / "candidates.parquet").exists():
            return parent / "candidates.parquet"
    return None


def load_bench(path: str | Path, candidates: str | Path | None = None, limit_states: int | None = None) -> list[dict]:
    """Benchmark rows normalized to ``state, pair_idx, expected, prompt, source_name`` plus
    ``pair_id, rule, axis, gmcp`` where known (see the module doc for the accepted formats)."""
    path = Path(path)
    rows = pq.read_table(path).to_pylist()
    cand = {}
    cpath = Path(candidates) if candidates else find_candidates(path)
    if cpath is not None and rows and "pair_id" in rows[0]:
        cols = ["pair_id", "traj_id", "step_idx", "site", "rule", "axis", "gmcp"]
        cand = {c["pair_id"]: c for c in pq.read_table(cpath, columns=cols).to_pylist()}
    out, states = [], {}
    for r in rows:
        c = cand.get(r.get("pair_id"), {})
        if "state_idx" in r:
            state = r["state_idx"]
        else:
            traj, step = r.get("traj_id", c.get("traj_id")), r.get("step_idx", c.get("step_idx"))
            state = states.setdefault((traj, step) if traj is not None else r.get("pair_id", len(states)), len(states))
        expected = r["expected"] if "expected" in r else r["label"]
        site = r.get("site") or c.get("site")
        gmcp = r.get("gmcp", c.get("gmcp"))
        out.append({"state": state, "pair_idx": r.get("pair_idx"), "expected": int(expected),
                    "prompt": _prompt(r["prompt"]), "source_name": r.get("source_name") or
                    (f"surfprm/{site}" if site else path.stem), "pair_id": r.get("pair_id"),
                    "rule": r.get("rule", c.get("rule")), "axis": r.get("axis", c.get("axis")),
                    "gmcp": None if gmcp is None else ("gmcp" if gmcp else "non_gmcp")})
    if limit_states is not None:
        keep = sorted({r["state"] for r in out})[:limit_states]
        out = [r for r in out if r["state"] in set(keep)]
    return out


def _group(rows: list[dict], correct: list[bool], unparsed: list[bool]) -> dict:
    states: dict = defaultdict(list)
    for r, ok in zip(rows, correct):
        states[r["state"]].append(ok)
    n = len(rows)
    return {"pairwise": sum(correct) / n if n else None, "bon": sum(all(v) for v in states.values()) / len(states)
            if states else None, "pairs": n, "correct": sum(correct), "states": len(states),
            "states_correct": sum(all(v) for v in states.values()), "unparsed": sum(unparsed)}


def score(rows: list[dict], correct: list[bool], unparsed: list[bool] | None = None) -> dict:
    """The metrics of judged pairs (``correct[i]`` for ``rows[i]``): overall, per source, macro
    over sources, and per rule / axis / GMCP where the rows carry them."""
    unparsed = unparsed or [False] * len(rows)

    def by(key: str) -> dict:
        groups: dict = defaultdict(list)
        for i, r in enumerate(rows):
            if r.get(key) is not None:
                groups[r[key]].append(i)
        return {k: _group([rows[i] for i in ix], [correct[i] for i in ix], [unparsed[i] for i in ix])
                for k, ix in sorted(groups.items())}

    by_source = by("source_name")
    macro = {m: (sum(s[m] for s in by_source.values()) / len(by_source) if by_source else None)
             for m in ("pairwise", "bon")}
    result = {"macro": macro, "overall": _group(rows, correct, unparsed), "by_source": by_source,
              "unparsed": sum(unparsed)}
    for key, name in (("rule", "by_rule"), ("axis", "by_axis"), ("gmcp", "by_gmcp")):
        groups = by(key)
        if groups:
            result[name] = groups
    return result


def evaluate(judge_, bench_rows: list[dict], both_orders: bool = False) -> tuple[dict, list[dict]]:
    """Judge every benchmark pair; returns (metrics, per-pair records)."""
    t0 = time.perf_counter()
    outcomes = judge_expected(judge_, [r["prompt"] for r in bench_rows], [r["expected"] for r in bench_rows],
                              both_orders)
    metrics = score(bench_rows, [o.correct for o in outcomes], [o.unparsed for o in outcomes])
    metrics["infra_errors"] = sum(o.first.infra_error is not None or
                                  (o.swapped is not None and o.swapped.infra_error is not None) for o in outcomes)
    metrics["position"] = position_stats(outcomes)
    metrics["seconds"] = round(time.perf_counter() - t0, 2)
    records = [{"state": r["state"], "pair_idx": r["pair_idx"], "pair_id": r["pair_id"], "expected": r["expected"],
                "verdict": o.first.verdict, "swapped_verdict": o.swapped.verdict if o.swapped else None,
                "correct": o.correct, "judgment": o.first.text, "infra_error": o.first.infra_error}
               for r, o in zip(bench_rows, outcomes)]
    return metrics, records


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def markdown(result: dict) -> str:
    """One model's results as a Markdown table (percentages)."""
    lines = [f"### {result.get('name') or result.get('model')} on `{result.get('bench', '')}`", "",
             "| group | pairwise % | best-of-N % | pairs | states | unparsed |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    sections = [("", result["by_source"])] + [(f"{k[3:]}: ", result[k]) for k in ("by_rule", "by_axis", "by_gmcp")
                                               if k in result]
    for prefix, groups in sections:
        for name, g in groups.items():
            lines.append(f"| {prefix}{name} | {_pct(g['pairwise'])} | {_pct(g['bon'])} | {g['pairs']} | "
                         f"{g['states']} | {g['unparsed']} |")
    o = result["overall"]
    lines.append(f"| **macro (over sources)** | **{_pct(result['macro']['pairwise'])}** | "
                 f"**{_pct(result['macro']['bon'])}** | {o['pairs']} | {o['states']} | {result['unparsed']} |")
    pos = result.get("position") or {}
    if pos.get("chose_position_1") is not None:
        lines += ["", f"Position 1 chosen in {_pct(pos['chose_position_1'])}% of parsed verdicts "
                  f"(right in {_pct(pos['expected_position_1'])}%); judged in both orders: "
                  f"{pos['judged_both_orders']}, position-biased: {pos['position_biased']}."]
    return "\n".join(lines) + "\n"


def compare(results: list[dict]) -> str:
    """Several models' results in one Markdown table: a pairwise and a best-of-N column each."""
    names = [r.get("name") or r.get("model") for r in results]
    head = "| group | " + " | ".join(f"{n} pairwise % | {n} best-of-N %" for n in names) + " |"
    lines = [head, "| --- |" + " ---: | ---: |" * len(results)]
    keys = []
    for section in ("by_source", "by_rule", "by_axis", "by_gmcp"):
        for r in results:
            for name in r.get(section, {}):
                if (section, name) not in keys:
                    keys.append((section, name))
    for section, name in keys:
        label = name if section == "by_source" else f"{section[3:]}: {name}"
        cells = []
        for r in results:
            g = r.get(section, {}).get(name)
            cells += [_pct(g["pairwise"]), _pct(g["bon"])] if g else ["-", "-"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [c for r in results for c in (_pct(r["macro"]["pairwise"]), _pct(r["macro"]["bon"]))]
    lines.append("| **macro** | " + " | ".join(f"**{c}**" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def run(config: LLMConfig, bench: str, out: str | Path, both_orders: bool = False, batch_size: int = 8,
        candidates: str | None = None, limit_states: int | None = None, name: str | None = None) -> dict:
    """Evaluate one model on one benchmark file and write ``out`` (JSON), its ``.md`` and ``.pairs.jsonl``."""
    rows = load_bench(bench, candidates, limit_states)
    if not rows:
        raise ValueError(f"{bench} has no pairs")
    judge_ = make_judge(config, batch_size)
    metrics, records = evaluate(judge_, rows, both_orders)
    result = {"name": name or Path(config.model or "embedded").name, "model": config.model or "embedded",
              "endpoint": config.endpoint, "bench": str(bench),
              "protocol": {"both_orders": both_orders, "max_tokens": config.max_tokens,
                           "temperature": config.temperature, "unparsed_counts_as": "wrong"}, **metrics}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    with open(out.with_suffix(".pairs.jsonl"), "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prm.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", help="WebPRMBench-format Parquet, or a TRL export split")
    ap.add_argument("--out", help="result JSON (a .md table and a .pairs.jsonl are written beside it); "
                                  "with --compare: an optional Markdown file")
    ap.add_argument("--both-orders", action="store_true",
                    help="judge each pair in both orders; correct only if both pick the expected action")
    ap.add_argument("--batch-size", type=int, default=8, help="prompts per local generation batch")
    ap.add_argument("--candidates", help="candidates.parquet to join by pair_id (default: found above --bench)")
    ap.add_argument("--limit-states", type=int, default=None, help="only the first N states (quick checks)")
    ap.add_argument("--name", help="label in tables (default: the model folder's name)")
    ap.add_argument("--compare", nargs="+", metavar="RESULT_JSON", help="print several results in one table")
    LLMConfig.add_args(ap)
    args = ap.parse_args(argv)
    if args.compare:
        table = compare([json.loads(Path(p).read_text()) for p in args.compare])
        if args.out:
            Path(args.out).write_text(table)
        print(table)
        return 0
    if not args.bench or not args.out:
        ap.error("--bench and --out are required (or --compare)")
    result = run(LLMConfig.from_args(args), args.bench, args.out, args.both_orders, args.batch_size,
                 args.candidates, args.limit_states, args.name)
    print(markdown(result))
    return 0 if not result["infra_errors"] else 3


if __name__ == "__main__":
    sys.exit(main())

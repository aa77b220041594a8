"""Pairwise and best-of-N accuracy of a comparative PRM, WebPRMBench-style, as the paper evaluates it.

    python -m prm.evaluate --model runs/demo/prm/cpu-demo --bench runs/demo/export/trl-labels/test.parquet \\
        --out runs/demo/prm/eval-trained.json --max-tokens 24
    python -m prm.evaluate --model my-prm --base-url http://gpu:8000/v1 --bench webprmbench.parquet --out prm.json
    python -m prm.evaluate ... --include-sources                 # Mind2Web back in the macro average
    python -m prm.evaluate --compare base.json trained.json [--out compare.md]

``--bench`` is WebPRMBench-format Parquet (``state_idx, pair_idx, expected, prompt,
source_name``; the benchmark's own prompts are used as given, a string or a list of chat
messages) or this project's export (``dataset.export --format webprmbench``, or a TRL
``trl``/``trl-labels`` split, whose ``label`` is the expected answer and whose pairs are grouped
into states by ``(traj_id, step_idx)``). When a ``candidates.parquet`` is found
(``--candidates``, or in the run directory above the bench file) pairs are joined to it by
``pair_id`` for their rule, axis and GMCP flag.

Protocol (paper §5.1, §5.3):
- A state is ``(source_name, state_idx)``: state numbers may repeat across sources.
- Sources whose name contains ``mind2web`` (case-insensitive) are left out of the macro
  averages and of the pooled figures by default: the SFT demonstrations come from Mind2Web
  environments, so that subset is in-distribution (paper §5.1). They are still judged and
  reported per source (``in_macro: false``). ``--include-sources`` brings them all back,
  ``--include-sources NAME...`` those whose name contains one of the NAMEs.
- pairwise accuracy: pairs judged correctly / pairs; with ``--both-orders`` a pair is correct
  only if both orders pick the expected action.
- best-of-N accuracy: states whose positive wins every one of its pairs / states.
- macro: the unweighted mean of the per-source values over the sources in the macro.
- intervals (``pairwise_ci``, ``bon_ci`` per source and for the macro; the Markdown's last two
  columns): 95% percentile bootstrap over states, stratified by source (``intervals``).
- outcomes: every judgment is a verdict, ``unparsed`` (no valid answer), ``truncated`` (the
  generation hit the length limit before a valid answer) or an outage (``infra_errors``). An
  unparsed or truncated judgment or an outage counts as wrong (and makes its state wrong);
  unparsed and truncated are counted apart, per source and pooled, with ``truncated_share``.
- GMCP partition of benchmark pairs (§5.3, "both candidates operate on genuine page elements
  with identical action types"): each prompt is read back (``judgment.parse.parse_prompt``), the
  action of each response is read with ``data.actions.extract_action`` and the
  AXTree is parsed; a pair is GMCP when both actions are element actions with the same op whose
  targets are present, once each, in the AXTree. ``gmcp_partition`` gives pairwise/BoN on the
  GMCP and non-GMCP pairs pooled over the macro sources, their counts, why pairs are non-GMCP,
  and the prompts that could not be read (unparseable prompt, AXTree or action).
- On the project's data also per rule, per axis and GMCP vs non-GMCP from ``candidates.parquet``
  (``by_gmcp``), pooled over the macro sources.
Judges that generate (behind an endpoint, or a local judge in ``--judge-mode generate``) get
``max_tokens`` = 1024 unless ``--max-tokens`` (or an ``--llm-config`` file) says otherwise, so a
full judgment (think, criteria, analysis, answer) fits; local judges in a scoring mode keep
``llm.client``'s default. A local judge loads with ``--device auto|cpu|cuda`` and ``--dtype
auto|float32|bfloat16`` (auto: bfloat16 on a GPU, float32 on the CPU; ``prm.judge.placement``);
the result's ``protocol`` records the device and dtype it ran in.
``--out FILE.json`` gets the metrics, ``FILE.md`` a Markdown table, ``FILE.pairs.jsonl`` every
judgment. ``--compare`` puts several result files in one table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from cli.config import CLIParser, Configurable, make_parser
from cli.errors import error_exit
from data.actions import ELEMENT_OPS, Action, extract_action
from judgment.format import JudgmentFormat
from judgment.parse import parse_prompt, rerender_prompt
from llm import LLMConfig
from prm.judge import (
    DEVICES,
    DTYPES,
    GENERATE_MAX_TOKENS,
    JUDGE_MODES,
    generate_max_tokens,
    judge_expected,
    make_judge,
    position_stats,
)

BENCH_COLUMNS = ("state_idx", "pair_idx", "expected", "prompt", "source_name")
EXCLUDED_BY_DEFAULT = "mind2web"        # left out of the macro unless --include-sources (paper §5.1)
ENDPOINT_MAX_TOKENS = GENERATE_MAX_TOKENS   # default completion length for judges that generate (endpoints too)


def _prompt(p) -> list[dict]:
    if isinstance(p, str):
        return [{"role": "user", "content": p}]
    return [{"role": m["role"], "content": m["content"]} for m in p]


def find_candidates(bench: Path) -> Path | None:
    for parent in list(bench.resolve().parents)[:3]:
        if (parent / "candidates.parquet").exists():
            return parent / "candidates.parquet"
    return None


# -- the GMCP partition of benchmark pairs ---------------------------------------------------------
def _targets(action: Action) -> list[str]:
    out = [str(action.args[0][1])]
    if action.op == "drag_and_drop":
        out.append(str(action.args[1][1]))
    return out


def pair_structure(prompt: list[dict] | str) -> tuple[str | None, str]:
    """``("gmcp" | "non_gmcp", why)`` for a benchmark prompt, or ``(None, what could not be read)``
    with ``what`` one of ``prompt``, ``axtree``, ``action`` (see the module doc)."""
    from graph.axtree import AXTreeParseError, parse_axtree

    parts = parse_prompt(prompt)
    if parts is None:
        return None, "prompt"
    try:
        tree = parse_axtree(parts.axtree)
    except AXTreeParseError:
        return None, "axtree"
    a1, a2 = extract_action(parts.response_1), extract_action(parts.response_2)
    if a1 is None or a2 is None:
        return None, "action"
    if a1.op not in ELEMENT_OPS or a2.op not in ELEMENT_OPS:
        return "non_gmcp", "not a page-element action"
    if a1.op != a2.op:
        return "non_gmcp", "different ops"
    bids, dups = tree.by_bid(), set(tree.duplicate_bids())
    targets = _targets(a1) + _targets(a2)
    if any(t not in bids for t in targets):
        return "non_gmcp", "target not in the AXTree"
    if any(t in dups for t in targets):
        return "non_gmcp", "target not unique in the AXTree"
    return "gmcp", "same op on page elements"


def load_bench(path: str | Path, candidates: str | Path | None = None, limit_states: int | None = None) -> list[dict]:
    """Benchmark rows normalized to ``state, pair_idx, expected, prompt, source_name`` plus
    ``pair_id, rule, axis, gmcp`` where known and ``bench_gmcp, bench_gmcp_why`` (the GMCP
    partition read from the prompt). A state is ``(source_name, state)``; ``limit_states`` keeps
    the first N states in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"benchmark {path} not found (a WebPRMBench or TRL split Parquet: "
                                "`python -m dataset.export --run RUN --format webprmbench` writes "
                                "RUN/export/webprmbench.parquet)")
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
        prompt = _prompt(r["prompt"])
        structure, why = pair_structure(prompt)
        out.append({"state": state, "pair_idx": r.get("pair_idx"), "expected": int(expected),
                    "prompt": prompt, "source_name": r.get("source_name") or
                    (f"surfprm/{site}" if site else path.stem), "pair_id": r.get("pair_id"),
                    "rule": r.get("rule", c.get("rule")), "axis": r.get("axis", c.get("axis")),
                    "gmcp": None if gmcp is None else ("gmcp" if gmcp else "non_gmcp"),
                    "bench_gmcp": structure, "bench_gmcp_why": why})
    if limit_states is not None:
        keep = set(list(dict.fromkeys(_state_key(r) for r in out))[:limit_states])
        out = [r for r in out if _state_key(r) in keep]
    return out


# -- metrics ---------------------------------------------------------------------------------------
def _state_key(row: dict) -> tuple:
    return (row.get("source_name"), row["state"])


def excluded_by_default(source: str) -> bool:
    return EXCLUDED_BY_DEFAULT in str(source).lower()


def split_sources(sources, include: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(sources in the macro, sources left out). Mind2Web sources are left out unless ``include``
    is ``[]`` (all back) or names a substring of theirs (case-insensitive)."""
    inside, left_out = [], []
    for s in sources:
        back = include is not None and (not include or any(i.lower() in str(s).lower() for i in include))
        (left_out if excluded_by_default(s) and not back else inside).append(s)
    return inside, left_out


def _group(rows: list[dict], ix: list[int], correct: list[bool], unparsed: list[bool],
           truncated: list[bool]) -> dict:
    states: dict = defaultdict(list)
    for i in ix:
        states[_state_key(rows[i])].append(correct[i])
    n = len(ix)
    right = sum(correct[i] for i in ix)
    states_right = sum(all(v) for v in states.values())
    n_trunc = sum(truncated[i] for i in ix)
    return {"pairwise": right / n if n else None, "bon": states_right / len(states) if states else None,
            "pairs": n, "correct": right, "states": len(states), "states_correct": states_right,
            "unparsed": sum(unparsed[i] for i in ix), "truncated": n_trunc,
            "truncated_share": n_trunc / n if n else None}


BOOTSTRAP = 2000          # resamples for the intervals (prm.evaluate's result: *_ci)


def intervals(rows: list[dict], correct: list[bool], sources: list[str], inside: list[str],
              n: int = BOOTSTRAP, seed: int = 0) -> dict:
    """95% percentile intervals of pairwise and best-of-N accuracy per source and of their macro:
    a bootstrap over states (a state's pairs move together; Wilson over pairs would treat the four
    pairs of one state as independent), stratified by source, so that the macro's replicate is the
    mean of the sources' replicates on their own resampled states. Seeded: a rerun gives the same."""
    import numpy as np

    rng = np.random.default_rng(seed)
    tables: dict = {s: defaultdict(lambda: [0, 0]) for s in sources}
    for r, c in zip(rows, correct):
        t = tables[r["source_name"]][r["state"]]
        t[0], t[1] = t[0] + c, t[1] + 1
    reps = {}
    for s, table in tables.items():
        right, pairs = np.array(list(table.values()), dtype=float).T
        ix = rng.integers(0, len(right), size=(n, len(right)))
        reps[s] = np.stack([right[ix].sum(1) / pairs[ix].sum(1), (right[ix] == pairs[ix]).mean(1)])

    def ci(rep) -> dict:
        lo, hi = np.percentile(rep, [2.5, 97.5], axis=1)
        return {"pairwise_ci": [float(lo[0]), float(hi[0])], "bon_ci": [float(lo[1]), float(hi[1])]}

    out = {"by_source": {s: ci(rep) for s, rep in reps.items()}}
    if inside:
        out["macro"] = ci(np.mean([reps[s] for s in inside], axis=0))
    return out


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def score(rows: list[dict], correct: list[bool], unparsed: list[bool] | None = None,
          truncated: list[bool] | None = None, include_sources: list[str] | None = None) -> dict:
    """The metrics of judged pairs (``correct[i]`` for ``rows[i]``): per source (all of them),
    macro over the sources in the macro (``split_sources``), pooled figures over those sources
    (overall, per rule / axis / GMCP flag where the rows carry them, and the prompt-read GMCP
    partition when the rows carry ``bench_gmcp``)."""
    unparsed = unparsed or [False] * len(rows)
    truncated = truncated or [False] * len(rows)
    sources = list(dict.fromkeys(r["source_name"] for r in rows))
    inside, left_out = split_sources(sources, include_sources)
    pooled = [i for i, r in enumerate(rows) if r["source_name"] in set(inside)]

    def by(key: str, ix: list[int]) -> dict:
        groups: dict = defaultdict(list)
        for i in ix:
            if rows[i].get(key) is not None:
                groups[rows[i][key]].append(i)
        return {k: _group(rows, g, correct, unparsed, truncated) for k, g in sorted(groups.items())}

    by_source = by("source_name", list(range(len(rows))))
    for name, g in by_source.items():
        g["in_macro"] = name in inside
    macro = {m: _mean([by_source[s][m] for s in inside]) for m in ("pairwise", "bon", "truncated_share")}
    if rows:
        ci = intervals(rows, correct, sources, inside)
        for name, g in by_source.items():
            g.update(ci["by_source"][name])
        macro.update(ci.get("macro", {}))
    result = {"macro": macro, "macro_sources": sorted(inside), "excluded_sources": sorted(left_out),
              "overall": _group(rows, pooled, correct, unparsed, truncated), "by_source": by_source,
              "unparsed": sum(unparsed), "truncated": sum(truncated)}
    for key, name in (("rule", "by_rule"), ("axis", "by_axis"), ("gmcp", "by_gmcp")):
        groups = by(key, pooled)
        if groups:
            result[name] = groups
    if rows and "bench_gmcp" in rows[0]:
        result["gmcp_partition"] = gmcp_partition(rows, pooled, correct, unparsed, truncated)
    return result


def gmcp_partition(rows, pooled, correct, unparsed, truncated) -> dict:
    """Pairwise/BoN on the GMCP and non-GMCP benchmark pairs pooled over ``pooled`` (a state's
    BoN within a subset counts its pairs in that subset), with counts and unreadable prompts."""
    sub = {k: [i for i in pooled if rows[i]["bench_gmcp"] == k] for k in ("gmcp", "non_gmcp")}
    parsed = len(sub["gmcp"]) + len(sub["non_gmcp"])
    return {"gmcp": _group(rows, sub["gmcp"], correct, unparsed, truncated),
            "non_gmcp": _group(rows, sub["non_gmcp"], correct, unparsed, truncated),
            "gmcp_share": len(sub["gmcp"]) / parsed if parsed else None,
            "non_gmcp_why": dict(Counter(rows[i]["bench_gmcp_why"] for i in sub["non_gmcp"])),
            "unparseable": dict(Counter(rows[i]["bench_gmcp_why"] for i in pooled if rows[i]["bench_gmcp"] is None)),
            "pairs": len(pooled)}


def evaluate(judge_, bench_rows: list[dict], both_orders: bool = False,
             include_sources: list[str] | None = None) -> tuple[dict, list[dict]]:
    """Judge every benchmark pair; returns (metrics, per-pair records)."""
    t0 = time.perf_counter()
    outcomes = judge_expected(judge_, [r["prompt"] for r in bench_rows], [r["expected"] for r in bench_rows],
                              both_orders)
    truncated = [bool(getattr(o.first, "truncated", False) or
                      (o.swapped is not None and getattr(o.swapped, "truncated", False))) for o in outcomes]
    unparsed = [o.unparsed and not t for o, t in zip(outcomes, truncated)]
    metrics = score(bench_rows, [o.correct for o in outcomes], unparsed, truncated, include_sources)
    metrics["infra_errors"] = sum(o.first.infra_error is not None or
                                  (o.swapped is not None and o.swapped.infra_error is not None) for o in outcomes)
    metrics["position"] = position_stats(outcomes)
    metrics["seconds"] = round(time.perf_counter() - t0, 2)
    records = [{"source_name": r["source_name"], "state": r["state"], "pair_idx": r["pair_idx"],
                "pair_id": r["pair_id"], "expected": r["expected"], "verdict": o.first.verdict,
                "swapped_verdict": o.swapped.verdict if o.swapped else None, "correct": o.correct,
                "truncated": t, "unparsed": u, "bench_gmcp": r.get("bench_gmcp"),
                "judgment": o.first.text, "infra_error": o.first.infra_error,
                "margin": o.first.margin, "swapped_margin": o.swapped.margin if o.swapped else None}
               for r, o, t, u in zip(bench_rows, outcomes, truncated, unparsed)]
    return metrics, records


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _ci(ci) -> str:
    return "-" if not ci else f"[{_pct(ci[0])}, {_pct(ci[1])}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (``DataFrame.to_markdown``, through tabulate): the first column left-aligned,
    the figures right-aligned and written as given (no number parsing: "50.00" stays "50.00")."""
    import pandas as pd

    return pd.DataFrame(rows, columns=header).to_markdown(
        index=False, colalign=("left",) + ("right",) * (len(header) - 1), disable_numparse=True)


def _group_label(section: str, name: str, in_macro: bool = True) -> str:
    if section == "by_source":
        return name if in_macro else f"{name} (not in macro)"
    if section == "gmcp_partition":
        return f"pooled {'GMCP' if name == 'gmcp' else 'non-GMCP'} pairs"
    return f"{section[3:]}: {name}"


def markdown(result: dict) -> str:
    """One model's results as a Markdown table (percentages)."""
    def row(label, g):
        return [label, _pct(g["pairwise"]), _pct(g["bon"]), str(g["pairs"]), str(g["states"]), str(g["unparsed"]),
                str(g.get("truncated", 0)), _ci(g.get("pairwise_ci")), _ci(g.get("bon_ci"))]

    rows = [row(_group_label("by_source", name, g.get("in_macro", True)), g) for name, g in result["by_source"].items()]
    for k in ("by_rule", "by_axis", "by_gmcp"):
        rows += [row(_group_label(k, name), g) for name, g in result.get(k, {}).items()]
    part = result.get("gmcp_partition")
    if part:
        rows += [row(_group_label("gmcp_partition", k), part[k]) for k in ("gmcp", "non_gmcp")]
    o = result["overall"]
    rows.append(["**macro (over sources)**", f"**{_pct(result['macro']['pairwise'])}**",
                 f"**{_pct(result['macro']['bon'])}**"] + [str(o[k]) for k in ("pairs", "states", "unparsed")]
                + [str(o.get("truncated", 0)), _ci(result["macro"].get("pairwise_ci")),
                   _ci(result["macro"].get("bon_ci"))])
    lines = [f"### {result.get('name') or result.get('model')} on `{result.get('bench', '')}`", "",
             _table(["group", "pairwise %", "best-of-N %", "pairs", "states", "unparsed", "truncated",
                     "pairwise 95% CI", "best-of-N 95% CI"], rows)]
    if result.get("excluded_sources"):
        lines += ["", "Not in the macro (in-distribution for the SFT data, paper §5.1; `--include-sources` "
                  "brings them back): " + ", ".join(f"`{s}`" for s in result["excluded_sources"]) + "."]
    if part:
        unreadable = ", ".join(f"{k} {v}" for k, v in sorted(part["unparseable"].items())) or "none"
        why = ", ".join(f"{k}: {v}" for k, v in sorted(part["non_gmcp_why"].items())) or "-"
        lines += ["", f"GMCP partition (read from the prompts, pooled over the macro sources): "
                  f"{part['gmcp']['pairs']} GMCP, {part['non_gmcp']['pairs']} non-GMCP "
                  f"({_pct(part['gmcp_share'])}% GMCP); non-GMCP because {why}; unreadable: {unreadable}."]
    pos = result.get("position") or {}
    if pos.get("chose_position_1") is not None:
        lines += ["", f"Position 1 chosen in {_pct(pos['chose_position_1'])}% of parsed verdicts "
                  f"(right in {_pct(pos['expected_position_1'])}%); judged in both orders: "
                  f"{pos['judged_both_orders']}, position-biased: {pos['position_biased']}."]
    return "\n".join(lines) + "\n"


def compare(results: list[dict]) -> str:
    """Several models' results in one Markdown table: a pairwise and a best-of-N column each."""
    names = [r.get("name") or r.get("model") for r in results]
    header = ["group"] + [f"{n} {m}" for n in names for m in ("pairwise %", "best-of-N %")]
    keys = []
    for section in ("by_source", "by_rule", "by_axis", "by_gmcp", "gmcp_partition"):
        for r in results:
            for name in r.get(section, {}):
                if section == "gmcp_partition" and name not in ("gmcp", "non_gmcp"):
                    continue
                if (section, name) not in keys:
                    keys.append((section, name))
    rows = []
    for section, name in keys:
        in_macro = all(r.get("by_source", {}).get(name, {}).get("in_macro", True) for r in results)
        cells = []
        for r in results:
            g = r.get(section, {}).get(name)
            cells += [_pct(g["pairwise"]), _pct(g["bon"])] if g else ["-", "-"]
        rows.append([_group_label(section, name, in_macro)] + cells)
    rows.append(["**macro**"] + [f"**{_pct(r['macro'][m])}**" for r in results for m in ("pairwise", "bon")])
    return _table(header, rows) + "\n"


def judge_config(args: argparse.Namespace, prefix: str = "", config: LLMConfig | None = None,
                 judge_mode: str = "generate") -> LLMConfig:
    """The judge's ``LLMConfig`` from the flags: a judge that generates (an endpoint, or a local
    judge in ``generate`` mode) gets ``max_tokens >= GENERATE_MAX_TOKENS`` unless ``max_tokens``
    was given (flag or config file; ``prm.judge.generate_max_tokens``)."""
    cfg = config if config is not None else LLMConfig.from_args(args, prefix=prefix)
    return generate_max_tokens(cfg, judge_mode, given="max_tokens" in LLMConfig.given_names(args, prefix))


def rerender(rows: list[dict], fmt: JudgmentFormat) -> int:
    """Render every row's prompt again in ``fmt`` (a user's template); rows whose prompt lacks the
    benchmark's structure keep theirs. Returns how many kept theirs."""
    kept = 0
    for r in rows:
        again = rerender_prompt(r["prompt"], fmt)
        if again is None:
            kept += 1
        else:
            r["prompt"] = again
    return kept


@dataclass
class EvaluateOptions(Configurable):
    """What ``prm.evaluate`` judges and writes (``run``'s settings, which the evaluate-prm flow
    passes whole); every field is a flag (``cli.config``); the judge itself is an ``LLMConfig``
    (``--model``, ``--base-url``, ``--max-tokens``, ...)."""

    ARG_GROUP = "evaluation"

    bench: str | None = field(default=None, metadata={"help": "WebPRMBench-format Parquet, or a TRL export split"})
    out: str | None = field(default=None, metadata={
        "help": "result JSON (a .md table and a .pairs.jsonl are written beside it); with --compare: an optional "
                "Markdown file"})
    both_orders: bool = field(default=False, metadata={
        "help": "judge each pair in both orders; correct only if both pick the expected action"})
    include_sources: list[str] | None = field(default=None, metadata={
        "nargs": "*", "metavar": "NAME",
        "help": "bring sources left out of the macro by default (Mind2Web: in-distribution for the SFT data, "
                "paper §5.1) back in: all of them, or those whose name contains a NAME"})
    batch_size: int = field(default=8, metadata={"min": 1, "help": "prompts per local generation batch"})
    candidates: str | None = field(default=None, metadata={
        "help": "candidates.parquet to join by pair_id (default: found above --bench)"})
    limit_states: int | None = field(default=None, metadata={"min": 1,
                                                             "help": "only the first N states (quick checks)"})
    name: str | None = field(default=None, metadata={"help": "label in tables (default: the model folder's name)"})
    compare: list[str] | None = field(default=None, metadata={
        "metavar": "RESULT_JSON", "help": "print several results in one table"})
    prompt_template: str | None = field(default=None, metadata={
        "metavar": "FILE", "help": "re-render the benchmark's prompts with a YAML template (user, optional system)"})
    judge_mode: str = field(default="generate", metadata={
        "choices": JUDGE_MODES,
        "help": "a local judge's verdicts: generate a judgment and read its tag; score the two answer tags "
                "(one forward pass, always a verdict; with --both-orders position bias stays measurable); "
                "score-both (both orders combined: no position bias by construction); rationale"})
    device: str = field(default="auto", metadata={
        "choices": DEVICES, "help": "where a local judge folder loads (auto: cuda when one is visible, else cpu)"})
    dtype: str = field(default="auto", metadata={
        "choices": DTYPES, "help": "a local judge's weights (auto: bfloat16 on a GPU, float32 on the CPU)"})


def run(config: LLMConfig, options: EvaluateOptions) -> dict:
    """Evaluate one model (the judge ``config``) on ``options.bench`` and write ``options.out``
    (JSON), its ``.md`` and ``.pairs.jsonl``. ``options.prompt_template`` re-renders the
    benchmark's prompts; ``judge_mode``, ``device`` and ``dtype`` are a local judge's
    (``prm.judge.JUDGE_MODES``, ``placement``; an endpoint always generates)."""
    if not options.bench or not options.out:
        raise ValueError("--bench and --out are required")
    fmt = JudgmentFormat.from_options(options.prompt_template) if options.prompt_template else None
    rows = load_bench(options.bench, options.candidates, options.limit_states)
    if not rows:
        raise ValueError(f"{options.bench} has no pairs")
    not_rerendered = rerender(rows, fmt) if fmt is not None else 0
    judge_ = make_judge(config, options.batch_size, mode=options.judge_mode, device=options.device, dtype=options.dtype)
    metrics, records = evaluate(judge_, rows, options.both_orders, options.include_sources)
    result = {"name": options.name or Path(config.model or "embedded").name, "model": config.model or "embedded",
              "endpoint": config.endpoint, "bench": str(options.bench),
              "protocol": {"both_orders": options.both_orders,
                           "judge_mode": options.judge_mode if config.is_local else "generate",
                           "max_tokens": config.max_tokens,
                           "device": getattr(judge_, "device", None), "dtype": getattr(judge_, "dtype", None),
                           "temperature": config.temperature, "unparsed_counts_as": "wrong",
                           "truncated_counts_as": "wrong", "states": "(source_name, state_idx)",
                           "excluded_by_default": EXCLUDED_BY_DEFAULT, "include_sources": options.include_sources,
                           "prompt_format": fmt.describe() if fmt is not None else "as given",
                           "prompts_not_rerendered": not_rerendered},
              **metrics}
    out = Path(options.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    with open(out.with_suffix(".pairs.jsonl"), "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return result


def build_parser(prog: str = "python -m prm.evaluate", doc: str = __doc__) -> CLIParser:
    """The command's parser: ``EvaluateOptions`` and the judge's ``LLMConfig``, nothing by hand."""
    ap = make_parser(prog, doc)
    EvaluateOptions.add_args(ap)
    LLMConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    opts = EvaluateOptions.from_args(args)
    if opts.compare:
        table = compare([json.loads(Path(p).read_text()) for p in opts.compare])
        if opts.out:
            Path(opts.out).write_text(table)
        print(table)
        return 0
    if not opts.bench or not opts.out:
        ap.error("--bench and --out are required (or --compare)")
    try:
        result = run(judge_config(args, judge_mode=opts.judge_mode), opts)
    except (FileNotFoundError, ValueError) as e:      # a missing or unreadable benchmark: one line, as every stage
        return error_exit(e)
    print(markdown(result))
    return 0 if not result["infra_errors"] else 3


if __name__ == "__main__":
    sys.exit(main())

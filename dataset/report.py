"""The report of a synthesis run: Markdown and PNG plots under ``RUN/report/``.

    python -m dataset.report --run RUN

Reads ``stats.json``, ``candidates.parquet``, ``preferences.parquet``, ``discarded.parquet`` and
the audits ``proposals.audit`` wrote (``audit/<table>.json``, used only while they match the
table's current bytes) and writes ``report/README.md`` with: the rule and axis distribution
(pool, verified sample, kept), the GMCP ratio re-derived by the audit next to the paper's
reference points (24.19% for WebArbiter's data, 74.60% for surfPRM-data), the verification
outcome per rule, the attempts histogram, and a cost table in the terms of the paper's Table 4
(calls, calls per pair, first-attempt passes, passes per retry, discards, input and output
tokens, dollars per pair), then one example pair (the first kept, else the first discarded, by
pair id), the stage timings ``stats.json`` records, and what
the teacher's figures mean for this run's teacher. Plots use matplotlib's Agg backend (no
display); the distribution plot draws the pool and the verified sample on panels of their own
(the sample is a few pairs of a pool of hundreds), and the attempts plot runs to the run's K.
Every plot gives one meaning one colour (``COLORS``: kept is the same green everywhere), counts
on integer ticks, and a plot that would carry fewer than two bars is left out (its table says
it). Every figure is computed from the files, so the report of the same run is the same text.

Text that comes from the run (page text in the example's intent, URL and actions, the teacher's
answer, model names, reasons) is never Markdown: inline it is a code span whose backtick run is
longer than any in the text, on one line (a newline could open a heading), and a block is a code
fence longer than any backtick run inside it, so no heading, tag, link or image from a page renders;
bidi and other invisible controls show as ``[U+XXXX]`` (``dataset.readable.visible``).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

from cli.config import CLIParser, make_parser
from cli.errors import error_exit
from data.rundir import RunDir, atomic_write_bytes, atomic_write_text
from data.schema import AXES, AXIS_OF, RULES
from dataset.readable import describe, target, visible, why_worse
from dataset.stats import wilson
from dataset.tables import read_pinned, require_run_dir

GMCP_WEBARBITER, GMCP_PAPER = 0.2419, 0.7460
# Table 4 of the paper (surfPRM-data verification).
PAPER_COST = {"pairs": 10000, "kept": 9821, "calls_per_pair": 1.12, "input_tokens_per_call": 3100,
              "output_tokens_per_call": 472, "usd_per_pair": 0.0334}
_VERIFY_COLS = ["pair_id", "rule", "axis", "gmcp", "attempts", "prompt_tokens", "completion_tokens", "cost_usd"]
_EXAMPLE_COLS = ["pair_id", "rule", "axis", "intent", "url", "label", "action_pos", "action_neg", "response_1",
                 "response_2", "verdicts"]
EXAMPLE_CHARS = 600         # of the kept judgment or a discarded answer
# one colour per meaning, the same in every plot (matplotlib's tab10 entries)
COLORS = {"pool": "#1f77b4", "sample": "#9467bd", "kept": "#2ca02c", "discarded": "#d62728", "paper": "#999999"}


def md_code(text, table: bool = False) -> str:
    """``text`` as an inline code span that nothing in it can close or break out of: whitespace runs
    (newlines too) become one space, the fence is one backtick longer than the longest run inside,
    and in a table cell ``|`` is escaped (GFM splits cells before it reads code spans)."""
    text = " ".join(visible(str(text)).split()) or " "
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    body = f"{fence}{pad}{text}{pad}{fence}"
    return body.replace("|", "\\|") if table else body


def md_fence(text: str) -> list[str]:
    """``text`` as a fenced code block no line of it can close (the fence outlasts every backtick run)."""
    text = visible(text)
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return [fence + "text", text, fence]


def _read(path: Path, columns: list[str]) -> list[dict]:
    """``columns`` of a table by its pinned schema (``dataset.tables``); none when it is absent."""
    return read_pinned(path, columns) if path.exists() else []


def read_audit(root: Path, table: str) -> dict | None:
    """The audit of ``table`` written by ``proposals.audit``, or None when there is none or it
    was made of other bytes than the table now holds (a stale audit is no audit)."""
    path, data = root / "audit" / f"{table}.json", root / f"{table}.parquet"
    if not path.exists() or not data.exists():
        return None
    audit = json.loads(path.read_text())
    return audit if audit.get("table_sha256") == hashlib.sha256(data.read_bytes()).hexdigest() else None


def _gmcp(audit: dict | None, rows: list[dict]) -> tuple[float | None, int, str]:
    """(GMCP ratio, pairs, where it comes from): the audit's when there is one, else the
    table's stored ``gmcp`` flags."""
    if audit is not None:
        return (audit["gmcp_ratio"] if audit["pairs"] else None), audit["pairs"], "audit"
    return (sum(r["gmcp"] for r in rows) / len(rows) if rows else None), len(rows), "stored flag"


def _example(root: Path) -> dict | None:
    """The first kept pair by id (with its judgment), else the first discarded (with its reason and
    last answer), else None; with each target's role and name and the rule's line on why a⁻ is worse."""
    for name, extra in (("preferences", ["judgment", "traj_id", "step_idx"]),
                        ("discarded", ["reason", "texts", "traj_id", "step_idx"])):
        rows = _read(root / f"{name}.parquet", _EXAMPLE_COLS + extra)
        if rows:
            row = min(rows, key=lambda r: r["pair_id"])
            return {**row, "status": "kept" if name == "preferences" else "discarded",
                    "answer": row["judgment"] if name == "preferences" else (row["texts"] or [""])[-1],
                    **_readable(root, row)}
    return None


def _readable(root: Path, row: dict) -> dict:
    """The example's ``pos_target`` and ``neg_target`` (``dataset.readable.target`` on its O_t) and ``why``."""
    from graph.axtree import AXTreeParseError, parse_axtree

    run = RunDir(root)
    state = run.states([(row["traj_id"], row["step_idx"])]).get((row["traj_id"], row["step_idx"])) \
        if run.trajectories.exists() else None
    try:
        tree = parse_axtree(state.axtree) if state is not None else None
    except AXTreeParseError:
        tree = None
    cands = root / "candidates.parquet"
    evidence = next((c["evidence"] for c in _read(cands, ["pair_id", "evidence"]) if c["pair_id"] == row["pair_id"]),
                    None) if cands.exists() else None
    return {"pos_target": target(tree, row["action_pos"]), "neg_target": target(tree, row["action_neg"]),
            "why": why_worse(row["rule"], evidence)}


def _timings(stats: dict) -> dict[str, float]:
    """Seconds per stage, for the stages whose ``stats.json`` entry records them."""
    return {stage: e["seconds"] for stage, e in stats.items() if isinstance(e, dict) and "seconds" in e}


def collect(run_dir: str | Path) -> dict:
    """Every figure of the report, from the run's files."""
    run = RunDir(run_dir)
    stats = run.read_stats()
    cands = _read(run.root / "candidates.parquet", ["rule", "axis", "gmcp", "sampled"])
    kept = _read(run.root / "preferences.parquet", _VERIFY_COLS)
    disc = _read(run.root / "discarded.parquet", _VERIFY_COLS + ["reason"])
    sample = [c for c in cands if c["sampled"]]
    verify = stats.get("teacher.verify", {})
    decided = kept + disc
    calls = sum(r["attempts"] for r in decided)
    ptok = sum(r["prompt_tokens"] for r in decided)
    ctok = sum(r["completion_tokens"] for r in decided)
    usd = sum(r["cost_usd"] for r in decided)
    at = Counter(r["attempts"] for r in kept)
    k_set = verify.get("config", {}).get("k", 1)
    k = max([min(k_set, verify.get("config", {}).get("effective_k", k_set)), *at, *(r["attempts"] for r in disc)])
    audit_c, audit_p = read_audit(run.root, "candidates"), read_audit(run.root, "preferences")
    return {
        "run": run.root.resolve().name,
        "dist": {name: {"rule": Counter(r["rule"] for r in rows), "axis": Counter(r["axis"] for r in rows)}
                 for name, rows in (("pool", cands), ("sample", sample), ("kept", kept))},
        "gmcp": {"pool": _gmcp(audit_c, cands), "sample": _gmcp(audit_c and audit_c["sample"], sample),
                 "kept": _gmcp(audit_p, kept)},
        "outcome_by_rule": {rule: {"kept": sum(r["rule"] == rule for r in kept),
                                   "discarded": sum(r["rule"] == rule for r in disc)} for rule in RULES},
        "discard_reasons": Counter(r["reason"] for r in disc),
        "attempts_kept": at,
        "attempts_discarded": Counter(r["attempts"] for r in disc),
        "cost": {"pairs": len(decided), "kept": len(kept), "discarded": len(disc),
                 "pending": verify.get("pending", 0), "calls": calls,
                 "calls_per_pair": calls / len(decided) if decided else 0.0,
                 "first_attempt_passes": at.get(1, 0),
                 "passes_per_retry": {i: at.get(i, 0) for i in range(2, k + 1)},
                 "input_tokens": ptok, "output_tokens": ctok,
                 "input_tokens_per_call": ptok / calls if calls else 0.0,
                 "output_tokens_per_call": ctok / calls if calls else 0.0,
                 "usd": usd, "usd_per_pair": usd / len(decided) if decided else 0.0},
        "teacher_model": verify.get("teacher_model", "?"),
        "teacher_local": str(verify.get("endpoint", "")).startswith("local:"),
        "verdict_mode": verify.get("config", {}).get("verdict_mode", "generate"),
        "replay": verify.get("replay"),
        "k": k,
        "audit": audit_c or {},
        "example": _example(run.root),
        "timings": _timings(stats),
    }


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.2%}"


def distribution_figure(r: dict):
    """Pairs by rule and by axis: the pool on the top panels, the verified sample and the kept
    pairs below on a scale of their own (beside a pool of hundreds they would not show)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 6.4), width_ratios=[len(RULES), len(AXES) + 1])
    for col, key, cats in ((0, "rule", RULES), (1, "axis", AXES)):
        for row, names in ((0, ("pool",)), (1, ("sample", "kept"))):
            ax, width = axes[row][col], 0.8 / len(names)
            for i, name in enumerate(names):
                offset = (i - (len(names) - 1) / 2) * width
                ax.bar([j + offset for j in range(len(cats))], [r["dist"][name][key].get(c, 0) for c in cats],
                       width, label=name, color=COLORS[name])
            ax.set_xticks(range(len(cats)), [c.replace("_", "\n") for c in cats], fontsize=7)
            ax.set_title(f"{' and '.join(names)}: pairs by {key}", fontsize=9)
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def outcome_figure(r: dict):
    """Kept and discarded pairs per rule, stacked, on integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    kept = [r["outcome_by_rule"][x]["kept"] for x in RULES]
    disc = [r["outcome_by_rule"][x]["discarded"] for x in RULES]
    ax.bar(range(len(RULES)), kept, label="kept", color=COLORS["kept"])
    ax.bar(range(len(RULES)), disc, bottom=kept, label="discarded", color=COLORS["discarded"])
    ax.set_xticks(range(len(RULES)), [x.replace("_", "\n") for x in RULES], fontsize=7)
    ax.set_ylabel("pairs")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("verification outcome per rule")
    ax.legend(fontsize=7)
    return fig


def attempts_figure(r: dict):
    """Pairs by attempts (kept: the attempt that agreed; discarded: the attempts spent), up to K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ks = list(range(1, r["k"] + 1))
    kept = [r["attempts_kept"].get(k, 0) for k in ks]
    ax.bar(ks, kept, label="kept (attempt that agreed)", color=COLORS["kept"])
    ax.bar(ks, [r["attempts_discarded"].get(k, 0) for k in ks], bottom=kept, label="discarded (attempts spent)",
           color=COLORS["discarded"])
    ax.set_xlabel("attempts")
    ax.set_ylabel("pairs")
    ax.set_xticks(ks)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    return fig


def bars(values) -> int:
    """How many bars a plot of ``values`` shows (zero-height bars draw nothing)."""
    return sum(1 for v in values if v)


def plotted(r: dict) -> set[str]:
    """The plots of ``r`` that carry two bars or more (the others are left out)."""
    out = {"gmcp.png"}
    if bars(v for name in ("pool", "sample", "kept") for v in r["dist"][name]["rule"].values()) >= 2:
        out.add("distribution.png")
    if bars(o[k] for o in r["outcome_by_rule"].values() for k in ("kept", "discarded")) >= 2:
        out.add("outcome_by_rule.png")
    if bars([*r["attempts_kept"].values(), *r["attempts_discarded"].values()]) >= 2:
        out.add("attempts.png")
    return out


def _plots(fig_dir: Path, r: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    names, wanted = [], plotted(r)
    for name in {"distribution.png", "outcome_by_rule.png", "attempts.png"} - wanted:
        (fig_dir / name).unlink(missing_ok=True)      # an earlier report's plot would show stale figures

    def save(fig, name):
        buf = io.BytesIO()
        # No timestamp or software tag in the file: the same run gives the same bytes.
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        atomic_write_bytes(fig_dir / name, buf.getvalue())
        names.append(name)

    if "distribution.png" in wanted:
        save(distribution_figure(r), "distribution.png")

    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = ["WebArbiter data\n(paper)", "surfPRM-data\n(paper)", "this run\npool", "this run\nsample",
              "this run\nkept"]
    vals = [GMCP_WEBARBITER, GMCP_PAPER] + [r["gmcp"][k][0] or 0.0 for k in ("pool", "sample", "kept")]
    ax.bar(labels, [100 * v for v in vals], color=[COLORS[k] for k in ("paper", "paper", "pool", "sample", "kept")])
    for i, v in enumerate(vals):
        ax.text(i, 100 * v + 1, f"{100 * v:.1f}%", ha="center", fontsize=8)
    ax.set_ylabel("GMCP %")
    ax.set_ylim(0, 105)
    ax.tick_params(axis="x", labelsize=7)
    save(fig, "gmcp.png")

    if "outcome_by_rule.png" in wanted:
        save(outcome_figure(r), "outcome_by_rule.png")
    if "attempts.png" in wanted:
        save(attempts_figure(r), "attempts.png")
    return names


def markdown_table(columns: list[str], rows: list[list], align: str) -> str:
    """A Markdown table of cells formatted by the caller (``DataFrame.to_markdown``, tabulate's
    pipe format, its number parsing off so that ``1.90`` stays ``1.90``); ``align`` has one letter
    per column, ``l`` or ``r``."""
    import pandas as pd

    return pd.DataFrame(rows, columns=columns).to_markdown(
        index=False, disable_numparse=True, colalign=[{"l": "left", "r": "right"}[a] for a in align])


def _figure(r: dict, name: str, alt: str) -> list[str]:
    """The Markdown of plot ``name``, or a line saying why it is left out."""
    if name in plotted(r):
        return [f"![{alt}]({name})", ""]
    return [f"*No {alt} plot: it would show fewer than two bars; the table says it all.*", ""]


def render_markdown(r: dict) -> str:
    """The report's Markdown (figures referenced by file name)."""
    c = r["cost"]
    dist = [[rule, AXIS_OF[rule], *(str(r["dist"][n]["rule"].get(rule, 0)) for n in ("pool", "sample", "kept"))]
            for rule in RULES]
    dist += [[f"*{axis}*", "", *(str(r["dist"][n]["axis"].get(axis, 0)) for n in ("pool", "sample", "kept"))]
             for axis in AXES]
    lines = [f"# Synthesis report: {md_code(r['run'])}", "",
             f"Teacher: {md_code(r['teacher_model'])}. Pairs verified: {c['pairs']} (kept {c['kept']}, discarded "
             f"{c['discarded']}, pending {c['pending']}).", "",
             "## Rules and axes", "", *_figure(r, "distribution.png", "distribution"),
             markdown_table(["rule", "axis", "pool", "sample", "kept"], dist, "llrrr")]
    gmcp = [["WebArbiter's data (paper)", f"{GMCP_WEBARBITER:.2%}", "", ""],
            ["surfPRM-data (paper)", f"{GMCP_PAPER:.2%}", "", ""]]
    gmcp += [[f"this run: {name}", _pct(r["gmcp"][name][0]), str(r["gmcp"][name][1]), r["gmcp"][name][2]]
             for name in ("pool", "sample", "kept")]
    lines += ["", "## Grounded minimal contrastive pairs (GMCP)", "", "![gmcp](gmcp.png)", "",
              markdown_table(["data", "GMCP", "pairs", "from"], gmcp, "lrrl")]
    lines += ["", "`audit`: re-derived from the files by `python -m proposals.audit` (both actions and O_t re-parsed)."]
    if any(r["gmcp"][name][2] != "audit" for name in ("pool", "sample", "kept")):
        lines[-1] += (" `stored flag`: the table's own `gmcp` column, not audited (`python -m proposals.audit "
                      "--run RUN --table candidates|preferences` audits it).")
    s = r["audit"].get("sample", {})
    if s:
        lines += ["", f"Residual of the verified sample (`proposals.audit`): virtual positives "
                      f"{_pct(s.get('virtual_positive_ratio'))}, affordance mismatches "
                      f"{_pct(s.get('affordance_mismatch_ratio'))}, other {s.get('other', 'n/a')}; "
                      f"hallucinated targets in the pool: {r['audit'].get('hallucinated_targets', 'n/a')} "
                      f"(paper: 16.6%, 9.1%, 0)."]
    outcome = []
    for rule in RULES:
        o = r["outcome_by_rule"][rule]
        n = o["kept"] + o["discarded"]
        outcome.append([rule, str(o["kept"]), str(o["discarded"]), _pct(o["kept"] / n if n else None)])
    lines += ["", "## Verification outcome per rule", "", *_figure(r, "outcome_by_rule.png", "outcome by rule"),
              markdown_table(["rule", "kept", "discarded", "kept %"], outcome, "lrrr")]
    if r["discard_reasons"]:
        reasons = sorted(r["discard_reasons"].items())
        lines += ["", "Discard reasons: " + ", ".join(f"{md_code(k)} {v}" for k, v in reasons)
                  + "."]
    if r.get("replay"):
        lines += replay_lines(r["replay"])
    attempts = [[str(k), str(r["attempts_kept"].get(k, 0)), str(r["attempts_discarded"].get(k, 0))]
                for k in range(1, r["k"] + 1)]
    lines += ["", "## Attempts", "", *_figure(r, "attempts.png", "attempts"),
              markdown_table(["attempts", "kept at this attempt", "discarded after"], attempts, "rrr")]
    p = PAPER_COST
    retry = ", ".join(f"{k}: {v}" for k, v in c["passes_per_retry"].items())
    cost = [["pairs verified", str(c["pairs"]), f"{p['pairs']:,}"],
            ["kept", f"{c['kept']} ({_pct(c['kept'] / c['pairs'] if c['pairs'] else None)})",
             f"{p['kept']:,} ({p['kept'] / p['pairs']:.2%})"],
            ["teacher calls", str(c["calls"]), ""],
            ["calls per pair", f"{c['calls_per_pair']:.2f}", f"{p['calls_per_pair']:.2f}"],
            ["first-attempt passes", str(c["first_attempt_passes"]), ""],
            ["passes per retry (attempt: pairs)", retry, ""],
            ["discards", str(c["discarded"]), f"{p['pairs'] - p['kept']:,}"],
            ["input tokens (per call)", f"{c['input_tokens']:,} ({c['input_tokens_per_call']:.0f})",
             f"(~{p['input_tokens_per_call']:,})"],
            ["output tokens (per call)", f"{c['output_tokens']:,} ({c['output_tokens_per_call']:.0f})",
             f"(~{p['output_tokens_per_call']})"],
            ["dollars (per pair)", f"${c['usd']:.4f} (${c['usd_per_pair']:.4f})", f"(${p['usd_per_pair']:.4f})"]]
    lines += ["", "## Cost (the paper's Table 4 terms)", "", markdown_table(["", "this run", "paper"], cost, "lrr"),
              "", "Tokens and dollars count every attempt's answer, including answers served from the LLM "
                  "cache (what the run would cost from scratch); local models cost 0."]
    lines += ["", "## What the teacher's figures mean", "", _teacher_note(r)]
    lines += _example_lines(r["example"])
    lines += ["", "## Stage timings", ""]
    if r["timings"]:
        timings = [[md_code(s, table=True), f"{t:.1f}"] for s, t in r["timings"].items()]
        lines += [markdown_table(["stage", "seconds"], timings,
                                 "lr")]
        lines += ["", "Wall-clock seconds of each stage's last run as `stats.json` records them (a rerun served from "
                      "the LLM cache is faster); stages that record none are not listed."]
    else:
        lines.append("No stage of this run recorded its time in `stats.json`.")
    return "\n".join(lines) + "\n"


REPLAY_OUTCOMES = ("equivalent", "harmful", "detour", "not_executable", "replay_mismatch")
# False negatives in the paper's human audit of 100 pairs (§4.3): surfPRM-data and WebArbiter's data.
FN_PAPER, FN_WEBARBITER = 0.12, 0.30


def _share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n:.0%} [{lo:.0%}, {hi:.0%}]" if n else "n/a"


def replay_lines(replay: dict) -> list[str]:
    """The replay verifier's outcome table (``teacher.verify --verifier replay``): counts per rule,
    axis and overall, and the false-negative rate (``equivalent`` among the pairs replayed to a
    verdict, i.e. without ``replay_mismatch``) with its Wilson 95% interval."""
    rows = [[md_code(g, table=True), *map(str, (c.get(o, 0) for o in REPLAY_OUTCOMES)),
             _share(c.get("equivalent", 0), sum(c.values()) - c.get("replay_mismatch", 0))]
            for key in ("by_rule", "by_axis") for g, c in replay.get(key, {}).items()]
    total = replay.get("outcomes", {})
    rows.append(["**all**", *map(str, (total.get(o, 0) for o in REPLAY_OUTCOMES)),
                 _share(total.get("equivalent", 0), sum(total.values()) - total.get("replay_mismatch", 0))])
    return ["", "## Replay outcomes (ground truth)", "",
            f"Every pair replayed in MiniWoB++ (`teacher.verify --verifier replay`, solver "
            f"{md_code(replay.get('backend', '?'))}). False negatives = `equivalent` among the pairs replayed to a "
            "verdict, "
            f"Wilson 95% interval; the paper's human audit found {FN_PAPER:.0%} for surfPRM-data and "
            f"{FN_WEBARBITER:.0%} for WebArbiter's data (§4.3).", "",
            markdown_table(["rule / axis", *REPLAY_OUTCOMES, "false negatives"], rows, "l" + "r" * 6)]


def _teacher_note(r: dict) -> str:
    if r.get("replay"):
        return ("No model judged these pairs: each was replayed in MiniWoB++ and the task's own validator decided "
                "(the replay table above). Attempts, tokens and dollars are zero by construction; the kept share is "
                "the share of mined negatives that are true negatives.")
    if r["teacher_local"]:
        return (f"The teacher {md_code(r['teacher_model'])} is a small local model (verdict mode "
                f"`{r['verdict_mode']}`): it "
                "exercises the pipeline end to end, and its kept share, agreement and GMCP figures say how this "
                "model judges, not how good the data is. The kept pairs are those it happened to agree on; a "
                "dataset to train on is verified by a strong teacher behind an OpenAI-compatible endpoint "
                "(`make run TEACHER=\"--base-url URL --model M\" VERIFY_ARGS=\"--k 5\"`), whose agreement with "
                "the demonstrations is the paper's filter.")
    return (f"The teacher {md_code(r['teacher_model'])} answered through an endpoint (verdict mode "
            f"`{r['verdict_mode']}`): a "
            "pair is kept when one of its attempts agrees with the demonstration, so the kept share measures how "
            "often this teacher confirms the demonstrated action, a filter, not an independent label.")


def _example_lines(ex: dict | None) -> list[str]:
    if ex is None:
        return ["", "## An example pair", "", "No pair was verified."]
    better = ex["label"]
    answer = ex["answer"] if len(ex["answer"]) <= EXAMPLE_CHARS else ex["answer"][:EXAMPLE_CHARS] + " [...]"
    verdicts = ", ".join(f"{v['attempt']}: {v['outcome']} ({v['mode']})" for v in ex["verdicts"]) or "none"
    target = {1: ex["pos_target"] if better == 1 else ex["neg_target"],
              2: ex["neg_target"] if better == 1 else ex["pos_target"]}
    actions = [[f"Response {pos}", md_code(ex[f"response_{pos}"], table=True),
                md_code(describe(target[pos]), table=True),
                "demonstrated (better)" if pos == better else "negative"] for pos in (1, 2)]
    lines = ["", "## An example pair", "",
             f"{md_code(ex['pair_id'])} ({ex['status']}; rule {md_code(ex['rule'])}, axis {md_code(ex['axis'])}) "
             f"on {md_code(ex['url'])}.", "",
             f"Intent: {md_code(ex['intent'])}", "", markdown_table(["", "action", "target", ""], actions, "llll")]
    if ex.get("why"):
        lines += ["", f"Why the negative is worse ({md_code(ex['rule'])}): {md_code(ex['why'])}"]
    lines += ["", f"Teacher attempts: {verdicts}." + (f" Discarded: {md_code(ex['reason'])}."
                                                    if ex["status"] == "discarded" else ""),
              "", "Kept judgment:" if ex["status"] == "kept" else "Last answer:", "", *md_fence(answer)]
    return lines


def write_report(run_dir: str | Path) -> Path:
    """Write ``RUN/report/README.md`` and its PNG plots; returns the Markdown's path."""
    r = collect(run_dir)
    out = Path(run_dir) / "report"
    _plots(out, r)
    path = out / "README.md"
    atomic_write_text(path, render_markdown(r))
    return path


def build_parser() -> CLIParser:
    ap = make_parser("python -m dataset.report", __doc__)
    ap.add_argument("--run", required=True, help="run directory to write report/ into")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    require_run_dir(ap, args.run)
    try:
        print(f"wrote {write_report(args.run)}")
    except (FileNotFoundError, ValueError) as e:
        return error_exit(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())

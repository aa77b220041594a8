"""The report of a synthesis run: Markdown and PNG plots under ``RUN/report/``.

    python -m data.report --run RUN

Reads ``stats.json``, ``candidates.parquet``, ``preferences.parquet``, ``discarded.parquet`` and
the audits ``proposals.audit`` wrote (``audit/<table>.json``, used only while they match the
table's current bytes) and writes ``report/README.md`` with: the rule and axis distribution
(pool, verified sample, kept), the GMCP ratio re-derived by the audit next to the paper's
reference points (24.19% for WebArbiter's data, 74.60% for surfPRM-data), the verification outcome per rule, the attempts histogram, and a cost table
in the terms of the paper's Table 4 (calls, calls per pair, first-attempt passes, passes per
retry, discards, input and output tokens, dollars per pair). Plots use matplotlib's Agg
backend (no display). Every figure is computed from the files, so the report of the same run is
the same text.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from data.rundir import RunDir, atomic_write_bytes, atomic_write_text
from data.schema import AXES, AXIS_OF, RULES

GMCP_WEBARBITER, GMCP_PAPER = 0.2419, 0.7460
# Table 4 of the paper (surfPRM-data verification).
PAPER_COST = {"pairs": 10000, "kept": 9821, "calls_per_pair": 1.12, "input_tokens_per_call": 3100,
              "output_tokens_per_call": 472, "usd_per_pair": 0.0334}
_VERIFY_COLS = ["pair_id", "rule", "axis", "gmcp", "attempts", "prompt_tokens", "completion_tokens", "cost_usd"]


def _read(path: Path, columns: list[str]) -> list[dict]:
    return pq.read_table(path, columns=columns).to_pylist() if path.exists() else []


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
                 "passes_per_retry": {k: at.get(k, 0) for k in range(2, max([5, *at]) + 1)},
                 "input_tokens": ptok, "output_tokens": ctok,
                 "input_tokens_per_call": ptok / calls if calls else 0.0,
                 "output_tokens_per_call": ctok / calls if calls else 0.0,
                 "usd": usd, "usd_per_pair": usd / len(decided) if decided else 0.0},
        "teacher_model": verify.get("teacher_model", "?"),
        "audit": audit_c or {},
    }


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.2%}"


def _plots(fig_dir: Path, r: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    names = []

    def save(fig, name):
        buf = io.BytesIO()
        # No timestamp or software tag in the file: the same run gives the same bytes.
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        atomic_write_bytes(fig_dir / name, buf.getvalue())
        names.append(name)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, key, cats in ((axes[0], "rule", RULES), (axes[1], "axis", AXES)):
        width = 0.27
        for i, name in enumerate(("pool", "sample", "kept")):
            ax.bar([j + (i - 1) * width for j in range(len(cats))], [r["dist"][name][key].get(c, 0) for c in cats],
                   width, label=name)
        ax.set_xticks(range(len(cats)), [c.replace("_", "\n") for c in cats], fontsize=7)
        ax.set_title(f"pairs by {key}")
        ax.legend(fontsize=7)
    save(fig, "distribution.png")

    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels = ["WebArbiter data\n(paper)", "surfPRM-data\n(paper)", "this run\npool", "this run\nsample",
              "this run\nkept"]
    vals = [GMCP_WEBARBITER, GMCP_PAPER] + [r["gmcp"][k][0] or 0.0 for k in ("pool", "sample", "kept")]
    ax.bar(labels, [100 * v for v in vals], color=["#999", "#999", "C0", "C0", "C0"])
    for i, v in enumerate(vals):
        ax.text(i, 100 * v + 1, f"{100 * v:.1f}%", ha="center", fontsize=8)
    ax.set_ylabel("GMCP %")
    ax.set_ylim(0, 105)
    ax.tick_params(axis="x", labelsize=7)
    save(fig, "gmcp.png")

    fig, ax = plt.subplots(figsize=(7, 3.4))
    kept = [r["outcome_by_rule"][x]["kept"] for x in RULES]
    disc = [r["outcome_by_rule"][x]["discarded"] for x in RULES]
    ax.bar(range(len(RULES)), kept, label="kept")
    ax.bar(range(len(RULES)), disc, bottom=kept, label="discarded")
    ax.set_xticks(range(len(RULES)), [x.replace("_", "\n") for x in RULES], fontsize=7)
    ax.set_title("verification outcome per rule")
    ax.legend(fontsize=7)
    save(fig, "outcome_by_rule.png")

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ks = list(range(1, max([5, *r["attempts_kept"], *r["attempts_discarded"]]) + 1))
    ax.bar(ks, [r["attempts_kept"].get(k, 0) for k in ks], label="kept (attempt that agreed)")
    ax.bar(ks, [r["attempts_discarded"].get(k, 0) for k in ks], bottom=[r["attempts_kept"].get(k, 0) for k in ks],
           label="discarded (attempts spent)")
    ax.set_xlabel("attempts")
    ax.set_ylabel("pairs")
    ax.set_xticks(ks)
    ax.legend(fontsize=7)
    save(fig, "attempts.png")
    return names


def render_markdown(r: dict) -> str:
    """The report's Markdown (figures referenced by file name)."""
    c = r["cost"]
    lines = [f"# Synthesis report: `{r['run']}`", "",
             f"Teacher: `{r['teacher_model']}`. Pairs verified: {c['pairs']} (kept {c['kept']}, discarded "
             f"{c['discarded']}, pending {c['pending']}).", "",
             "## Rules and axes", "", "![distribution](distribution.png)", "",
             "| rule | axis | pool | sample | kept |", "| --- | --- | ---: | ---: | ---: |"]
    for rule in RULES:
        lines.append(f"| {rule} | {AXIS_OF[rule]} | " + " | ".join(str(r["dist"][n]["rule"].get(rule, 0))
                                                                for n in ("pool", "sample", "kept")) + " |")
    for axis in AXES:
        lines.append(f"| *{axis}* | | " + " | ".join(str(r["dist"][n]["axis"].get(axis, 0))
                                                   for n in ("pool", "sample", "kept")) + " |")
    lines += ["", "## Grounded minimal contrastive pairs (GMCP)", "", "![gmcp](gmcp.png)", "",
              "| data | GMCP | pairs | from |", "| --- | ---: | ---: | --- |",
              f"| WebArbiter's data (paper) | {GMCP_WEBARBITER:.2%} | | |",
              f"| surfPRM-data (paper) | {GMCP_PAPER:.2%} | | |"]
    for name in ("pool", "sample", "kept"):
        ratio, n, source = r["gmcp"][name]
        lines.append(f"| this run: {name} | {_pct(ratio)} | {n} | {source} |")
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
    lines += ["", "## Verification outcome per rule", "", "![outcome by rule](outcome_by_rule.png)", "",
              "| rule | kept | discarded | kept % |", "| --- | ---: | ---: | ---: |"]
    for rule in RULES:
        o = r["outcome_by_rule"][rule]
        n = o["kept"] + o["discarded"]
        lines.append(f"| {rule} | {o['kept']} | {o['discarded']} | {_pct(o['kept'] / n if n else None)} |")
    if r["discard_reasons"]:
        lines += ["", "Discard reasons: " + ", ".join(f"`{k}` {v}" for k, v in sorted(r["discard_reasons"].items()))
                  + "."]
    lines += ["", "## Attempts", "", "![attempts](attempts.png)", "",
              "| attempts | kept at this attempt | discarded after |", "| ---: | ---: | ---: |"]
    for k in range(1, max([5, *r["attempts_kept"], *r["attempts_discarded"]]) + 1):
        lines.append(f"| {k} | {r['attempts_kept'].get(k, 0)} | {r['attempts_discarded'].get(k, 0)} |")
    p = PAPER_COST
    retry = ", ".join(f"{k}: {v}" for k, v in c["passes_per_retry"].items())
    lines += ["", "## Cost (the paper's Table 4 terms)", "",
              "| | this run | paper |", "| --- | ---: | ---: |",
              f"| pairs verified | {c['pairs']} | {p['pairs']:,} |",
              f"| kept | {c['kept']} ({_pct(c['kept'] / c['pairs'] if c['pairs'] else None)}) | "
              f"{p['kept']:,} ({p['kept'] / p['pairs']:.2%}) |",
              f"| teacher calls | {c['calls']} | |",
              f"| calls per pair | {c['calls_per_pair']:.2f} | {p['calls_per_pair']:.2f} |",
              f"| first-attempt passes | {c['first_attempt_passes']} | |",
              f"| passes per retry (attempt: pairs) | {retry} | |",
              f"| discards | {c['discarded']} | {p['pairs'] - p['kept']:,} |",
              f"| input tokens (per call) | {c['input_tokens']:,} ({c['input_tokens_per_call']:.0f}) | "
              f"(~{p['input_tokens_per_call']:,}) |",
              f"| output tokens (per call) | {c['output_tokens']:,} ({c['output_tokens_per_call']:.0f}) | "
              f"(~{p['output_tokens_per_call']}) |",
              f"| dollars (per pair) | ${c['usd']:.4f} (${c['usd_per_pair']:.4f}) | (${p['usd_per_pair']:.4f}) |",
              "", "Tokens and dollars count every attempt's answer, including answers served from the LLM "
                  "cache (what the run would cost from scratch); local models cost 0."]
    return "\n".join(lines) + "\n"


def write_report(run_dir: str | Path) -> Path:
    """Write ``RUN/report/README.md`` and its PNG plots; returns the Markdown's path."""
    r = collect(run_dir)
    out = Path(run_dir) / "report"
    _plots(out, r)
    path = out / "README.md"
    atomic_write_text(path, render_markdown(r))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m data.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    args = ap.parse_args(argv)
    print(f"wrote {write_report(args.run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Flatten indented AgentLab traces into WebPRM Collection rows (the paper's source format).

    python -m graph.flatten --input RUN/trajectories.parquet --out flat/rows.jsonl

The paper mines WebPRM Collection rows, whose ``text_observation`` is a flat AXTree: one
``[bid] role 'name' key: value`` line per node, no indentation, no HTML, after a
``Tab 0 (current): title`` header and a blank line (WebArena's observation text with the
indentation stripped). This module writes that form from BrowserGym's indented
``flatten_axtree_to_str`` text, so that flat-mode structure inference can be measured against
the indented truth of the same observations:

* every node keeps its line, bid (or lack of one) and order; only the depth goes;
* names stay Python ``repr`` literals; properties become ``key: value`` (flags ``key: True``,
  whitespace runs in values folded to one space, as a value cannot span lines); the
  ``value='v'`` field becomes a ``value: v`` property;
* the HTML is dropped;
* one row per observation in the WebPRM schema: ``task_id`` is the trajectory (so two runs of
  one task stay two trajectories), ``step_id`` the step, ``chosen`` the demonstrated action and
  thought, ``action_history``/``thought_history`` the earlier ones, ``rejected`` None (the
  traces hold no rejected action). Only successful trajectories are written (the Collection's
  chosen actions are expert demonstrations); the last observation of a trajectory, which has
  no action, is left out, as the Collection has no row without a chosen action.

Input: a canonical ``trajectories.parquet`` (``python -m data.ingest --source agentlab``).
Read the output back with ``python -m data.ingest --source webprm --input FILE``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from graph.axtree import parse_axtree, parse_props


def flat_line(bid: str | None, role: str, name: str, value, props: dict) -> str:
    """One node in the flat form: ``[bid] role 'name' key: value ...``."""
    parts = [f"[{bid}] {role} {name!r}" if bid is not None else f"{role} {name!r}"]
    if value is not None:
        props = {"value": value, **props}
    for key, val in props.items():
        parts.append(f"{key}: {' '.join(str(val).split())}")
    return " ".join(parts)


def flatten_observation(text: str, tabs: list[str] | None = None) -> str:
    """BrowserGym's indented AXTree text -> WebPRM's flat ``text_observation``.

    ``tabs`` are the titles of the open pages, the current one marked by a ``(current)``
    suffix already applied; by default one current tab titled with the root's name."""
    tree = parse_axtree(text, "indented")
    lines = [flat_line(n.bid, n.role, n.name, n.value, parse_props(n.rest) or {}) for n in tree.nodes]
    header = " | ".join(tabs) if tabs else f"Tab 0 (current): {tree.nodes[0].name}"
    return header + "\n\n" + "\n".join(lines)


def _tabs(row: dict) -> list[str] | None:
    """WebArena's tab header: every open page, the current one marked. Titles of the other
    tabs are not recorded in the traces; their URL stands in."""
    urls = json.loads(row["meta"] or "{}").get("open_pages_urls") or []
    if len(urls) < 2:
        return None
    title = parse_axtree(row["observation"], "indented").nodes[0].name
    return [f"Tab {i} (current): {title}" if u == row["url"] else f"Tab {i}: {u}" for i, u in enumerate(urls)]


def webprm_rows(rows: Iterable[dict]) -> Iterator[dict]:
    """Canonical rows (indented observations) -> WebPRM Collection rows, per trajectory in step order."""
    by_traj: dict[str, list[dict]] = {}
    for r in rows:
        by_traj.setdefault(r["traj_id"], []).append(r)
    for traj, steps in sorted(by_traj.items()):
        steps.sort(key=lambda r: r["step_idx"])
        if not steps[0]["success"]:
            continue
        actions, thoughts = [], []
        for r in steps:
            if r["obs_format"] != "indented" or not r["action"]:
                continue
            yield {
                "task_id": traj, "step_id": r["step_idx"], "intent": r["intent"],
                "website_name": r["site"], "start_url": steps[0]["url"],
                "thought_history": list(thoughts), "action_history": list(actions),
                "current_url": r["url"],
                "text_observation": flatten_observation(r["observation"], _tabs(r)),
                "checklist": None, "checklist_target_list": None,
                "chosen": {"thought": r["thought"] or "", "action": r["action"]},
                "rejected": None,
            }
            actions.append(r["action"])
            thoughts.append(r["thought"] or "")


def flatten_run(trajectories: Path, out: Path) -> int:
    """Write the WebPRM rows of a canonical ``trajectories.parquet`` as JSONL; returns the row count."""
    rows = pq.read_table(trajectories).to_pylist()
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for row in webprm_rows(rows):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


@dataclass
class FlattenCommand(Configurable):
    """The flags of ``python -m graph.flatten``."""

    ARG_GROUP = "flatten"

    input: str = field(metadata={"help": "a canonical trajectories.parquet, or a run directory holding one"})
    out: str = field(metadata={"help": "JSONL file to write"})


def build_parser():
    ap = make_parser("python -m graph.flatten", __doc__)
    FlattenCommand.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = FlattenCommand.from_args(build_parser().parse_args(argv))
    src, out = Path(args.input), Path(args.out)
    src = src / "trajectories.parquet" if src.is_dir() else src
    if not src.exists():
        return error_exit(f"{src} not found")
    n = flatten_run(src, out)
    print(f"{n} WebPRM rows -> {out}")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())

"""Where the viewer's pairs come from: a run directory or a WebPRMBench-format Parquet file.

A run directory gives every verified pair, kept (``preferences.parquet``) and discarded
(``discarded.parquet``), read with their pinned schemas (``dataset.tables.read_pinned``), joined to
``candidates.parquet`` for the targets' bids, nodes and the rule's evidence, and to
``trajectories.parquet`` for the state the teacher judged (intent, URLs, history, O_t); a run
verified with ``--verifier replay`` adds each pair's ``replay_outcome`` (listed) and
``replay_evidence`` (read with the pair's page). A
WebPRMBench file holds only prompts: the state is parsed back out of each row's prompt
(``judgment.parse.parse_prompt``) and the positive is the response at ``expected``.

The list is read once (light columns); the heavy columns of one pair (messages, judgment texts,
the observation) are read when its page is asked for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from data.actions import ActionParseError, parse_action
from data.rundir import RunDir, RunDirError
from data.state import State
from dataset.readable import mark_icons, readable, target, why_worse
from dataset.tables import read_pinned
from graph.axtree import AXTree, AXTreeParseError, parse_axtree
from graph.parsed import Parsed
from judgment.format import JudgmentFormat, recorded_axtree_chars, render_pair
from judgment.parse import parse_prompt
from proposals.audit import bid_counts, classify, element_targets, mined_identity, node_bid_counts

_LIST_COLUMNS = ["pair_id", "site", "traj_id", "task_id", "step_idx", "rule", "axis", "gmcp", "label",
                 "action_pos", "action_neg", "response_1", "response_2", "attempts", "verdicts", "teacher_model",
                 "intent", "url"]
_CANDIDATE_COLUMNS = ["pair_id", "pos_bid", "neg_bid", "pos_node", "neg_node", "evidence", "value_source",
                      "pos_kind"]
_BID = re.compile(r"^\s*\[([^\]\s]+)\]")
# written by ``teacher.verify --verifier replay`` (teacher.replay); a run verified before the
# replay verifier existed lacks them, and reads as one whose pairs have no replay outcome
_REPLAY_COLUMNS = ["replay_outcome"]


def decision(verdicts: list[dict]) -> dict | None:
    """The attempt that decided a pair: the last one with a verdict (a kept pair's agreeing one),
    or None when no attempt gave one."""
    return next((v for v in reversed(verdicts) if v["verdict"] is not None), None)


def _with_replay(path: Path, columns: list[str]) -> list[str]:
    """``columns`` and the replay columns the file has (none in a run older than the replay verifier)."""
    names = set(pq.read_schema(path).names)
    return [*columns, *(c for c in _REPLAY_COLUMNS if c in names)]


def replay_view(outcome: str | None, evidence: str | None) -> dict | None:
    """A pair's replay result as the page shows it: the outcome, where the replay stood (task,
    seed, step), each branch (the action, its resulting state hash, reward, done flag, error, and
    the solver's steps, actions and final reward after it), whether a⁺ and a⁻ led to the same
    state, and for a ``replay_mismatch`` the recorded and replayed O_t hashes. None without an
    outcome (an LLM-verified pair); an evidence string that is not a JSON object is shown raw."""
    if outcome is None:
        return None
    try:
        ev = json.loads(evidence or "{}")
    except ValueError:
        ev = None
    if not isinstance(ev, dict):
        return {"outcome": outcome, "raw": evidence, "branches": {}, "same_state": None, "mismatch": None, "where": {}}
    branches = {k: ev[k] for k in ("pos", "neg") if isinstance(ev.get(k), dict)}
    hashes = [branches[k].get("hash") for k in ("pos", "neg") if k in branches]
    mismatch = None
    if ev.get("mismatch"):
        mismatch = {k: ev[k] for k in ("mismatch", "recorded_hash", "replayed_hash", "history_step", "action",
                                       "error", "branch") if ev.get(k) is not None}
    return {"outcome": outcome, "raw": None, "branches": branches, "mismatch": mismatch,
            # equal resulting AXTree hashes are what makes a pair `equivalent` at once (teacher.replay.classify)
            "same_state": hashes[0] == hashes[1] if len(hashes) == 2 and None not in hashes else None,
            "where": {k: ev[k] for k in ("task", "seed", "step", "observation_hash") if k in ev}}


def _summary(row: dict, kept: bool) -> dict:
    """A list row: the table's columns plus the derived fields the filters and the audit use."""
    pos_first = row["label"] == 1
    decided = decision(row["verdicts"])
    row = {"replay_outcome": None, **row, "kept": kept,
           "action_pos": row["response_1"] if pos_first else row["response_2"],
           "action_neg": row["response_2"] if pos_first else row["response_1"],
           "verdict_source": decided["mode"] if decided else "none",
           # which action the teacher preferred, in the pair's own terms
           "teacher_choice": None if decided is None else ("pos" if decided["verdict"] == row["label"] else "neg")}
    return row


def _readable(pair: dict, tree: AXTree | None) -> None:
    """Add each target's role and name (``pos_target``, ``neg_target``: None for a virtual target)
    and the rule's one line on why a⁻ is worse (``why``) to a list row."""
    pair["pos_target"] = target(tree, pair["action_pos"])
    pair["neg_target"] = target(tree, pair["action_neg"])
    pair["why"] = why_worse(pair.get("rule"), pair.get("evidence"))


@dataclass
class Observation:
    """O_t as lines, the targets' lines marked, and each target's containment path."""

    lines: list[dict]                  # {"text", "mark": None | "pos" | "neg" | "both", "anchor"}
    paths: dict[str, list[str]]        # "pos" / "neg" -> "role 'name'" from the root down
    targets: dict[str, list[str]]      # "pos" / "neg" -> the bids they act on
    anchors: dict[str, str] = field(default_factory=dict)   # "pos" / "neg" -> id of its target's line
    tree: AXTree | None = None


def targets_of(action: str) -> list[str]:
    try:
        return element_targets(parse_action(action))
    except ActionParseError:
        return []


def observation(text: str, obs_format: str | None, pos: str, neg: str) -> Observation:
    """O_t with the lines of both actions' targets marked (``anchor`` set on the first line of
    each, for scrolling to it) and their containment paths from the parsed AXTree."""
    targets = {"pos": targets_of(pos), "neg": targets_of(neg)}
    lines, anchors = [], {}
    for line in text.splitlines():
        m = _BID.match(line)
        bid = m.group(1) if m else None
        hit = [k for k in ("pos", "neg") if bid is not None and bid in targets[k]]
        mark = "both" if len(hit) == 2 else (hit[0] if hit else None)
        first = [k for k in hit if k not in anchors]
        anchor = f"target-{first[0]}" if first else None
        for k in first:                # both actions on one element: one line, one anchor for both
            anchors[k] = anchor
        lines.append({"text": mark_icons(line), "mark": mark, "anchor": anchor})
    try:
        tree = parse_axtree(text, obs_format)
    except AXTreeParseError:
        tree = None
    paths = {}
    for k, bids in targets.items():
        node = tree.by_bid().get(bids[0]) if tree is not None and bids else None
        if node is not None:
            paths[k] = [f"{n.role} '{readable(n.name)}'" if n.name else n.role
                        for n in [*reversed(tree.ancestors(node)), node]]
    return Observation(lines, paths, targets, anchors, tree)


@dataclass
class PairSource:
    """The pairs of one run directory or WebPRMBench file, listed once."""

    path: Path
    kind: str                                  # 'run' | 'bench'
    pairs: list[dict] = field(default_factory=list)
    by_id: dict[str, dict] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """The folder the audit writes under: the run directory, or ``<file stem>.audit/`` next to
        a WebPRMBench file."""
        return self.path if self.kind == "run" else self.path.with_name(self.path.stem + ".audit")

    def replay_outcomes(self) -> dict[str, str | None]:
        """pair id -> its replay outcome (None: not replay-verified), for the audit's summary."""
        return {p["pair_id"]: p.get("replay_outcome") for p in self.pairs}

    @property
    def audit_dir(self) -> Path:
        return self.root / "audit" if self.kind == "run" else self.root

    @classmethod
    def open(cls, run: str | Path | None = None, bench: str | Path | None = None) -> "PairSource":
        if (run is None) == (bench is None):
            raise ValueError("give a run directory or a WebPRMBench file, not both")
        if run is not None:
            src = cls(Path(run).resolve(), "run")
            src.pairs = src._run_pairs()
        else:
            src = cls(Path(bench).resolve(), "bench")
            src.pairs = src._bench_pairs()
        src.by_id = {p["pair_id"]: p for p in src.pairs}
        return src

    # -- run directories -------------------------------------------------------------------
    def _run_pairs(self) -> list[dict]:
        kept_path, disc_path = self.path / "preferences.parquet", self.path / "discarded.parquet"
        if not kept_path.exists() and not disc_path.exists():
            raise RunDirError(f"{self.path}: no preferences.parquet or discarded.parquet (run teacher.verify first)")
        rows = [_summary(r, True) for r in (read_pinned(kept_path, _with_replay(kept_path, _LIST_COLUMNS))
                                            if kept_path.exists() else [])]
        disc_columns = _with_replay(disc_path, [*_LIST_COLUMNS, "reason"])
        rows += [_summary(r, False) for r in (read_pinned(disc_path, disc_columns) if disc_path.exists() else [])]
        cands = self.path / "candidates.parquet"
        extra = {c["pair_id"]: c for c in read_pinned(cands, _CANDIDATE_COLUMNS)} if cands.exists() else {}
        for r in rows:
            r.update({k: v for k, v in extra.get(r["pair_id"], {}).items() if k != "pair_id"})
        trees = self._trees({(r["traj_id"], r["step_idx"]) for r in rows})
        for r in rows:
            _readable(r, trees.get((r["traj_id"], r["step_idx"])))
        return sorted(rows, key=lambda r: (r["traj_id"], r["step_idx"], r["pair_id"]))

    def _trees(self, keys: set[tuple[str, int]]) -> dict[tuple[str, int], AXTree]:
        """The parsed O_t of each ``(traj_id, step_idx)`` (a step whose O_t does not parse is left out)."""
        f = self.path / "trajectories.parquet"
        if not keys or not f.exists():
            return {}
        names = pq.read_schema(f).names
        trajs = [("traj_id", "in", sorted({t for t, _ in keys}))]
        out, lines = {}, {}
        if "site" in names:      # the trees graph.build parsed (graph.parsed), where it did
            parsed = Parsed(self.path)
            for r in pq.read_table(f, columns=["traj_id", "step_idx", "site"], filters=trajs).to_pylist():
                key = (r["traj_id"], r["step_idx"])
                site = parsed.site(r["site"]) if key in keys and key not in out else None
                if site is not None and key in site:
                    out[key] = site.tree(key)
        if not keys - out.keys():
            return out
        cols = [c for c in ("traj_id", "step_idx", "observation", "obs_format") if c in names]
        rows = pq.read_table(f, columns=cols, filters=trajs).to_pylist()
        for r in rows:
            if (r["traj_id"], r["step_idx"]) in keys and (r["traj_id"], r["step_idx"]) not in out:
                try:
                    out[(r["traj_id"], r["step_idx"])] = parse_axtree(r["observation"], r.get("obs_format"), lines)
                except AXTreeParseError:
                    pass
        return out

    def _run_row(self, pair: dict) -> dict:
        """The pair's heavy columns: messages and judgment (kept) or reason and texts (discarded)."""
        name, cols = (("preferences.parquet", ["judgment", "messages"]) if pair["kept"]
                      else ("discarded.parquet", ["reason", "texts"]))
        if pair.get("replay_outcome") is not None:
            cols.append("replay_evidence")
        table = pq.read_table(self.path / name, columns=["pair_id", *cols], filters=[("pair_id", "=", pair["pair_id"])])
        return table.to_pylist()[0]

    def _step(self, pair: dict) -> dict:
        cols = ["traj_id", "step_idx", "site", "url", "observation", "obs_format", "html"]
        f = self.path / "trajectories.parquet"
        cols = [c for c in cols if c in pq.read_schema(f).names]
        rows = pq.read_table(f, columns=cols, filters=[("traj_id", "=", pair["traj_id"]),
                                                        ("step_idx", "=", pair["step_idx"])]).to_pylist()
        return rows[0] if rows else {}

    def _verify_format(self) -> JudgmentFormat:
        """The format ``teacher.verify`` rendered with, as its ``stats.json`` entry records it
        (``untrusted``, ``axtree_chars``, ``prompt_template``); the defaults where it records none."""
        config = RunDir(self.path).read_stats().get("teacher.verify", {}).get("config", {})
        return JudgmentFormat.from_options(config.get("prompt_template"), config.get("untrusted", "escape"),
                                           recorded_axtree_chars(config))

    # -- WebPRMBench files ------------------------------------------------------------------
    def _bench_pairs(self) -> list[dict]:
        table = pq.read_table(self.path)
        if not {"prompt", "expected"} <= set(table.column_names):
            raise RunDirError(f"{self.path}: not a WebPRMBench-format file (it needs the columns prompt and expected)")
        out = []
        for i, r in enumerate(table.to_pylist()):
            parts = parse_prompt(r["prompt"])
            if parts is None:
                continue
            label = int(r["expected"])
            pid = r.get("pair_id") or f"{r.get('state_idx', i)}-{r.get('pair_idx', 0)}"
            pos, neg = (parts.response_1, parts.response_2) if label == 1 else (parts.response_2, parts.response_1)
            out.append({"pair_id": str(pid), "kept": True, "rule": r.get("rule") or "", "axis": r.get("axis") or "",
                        "gmcp": None, "site": r.get("source_name") or "", "traj_id": r.get("traj_id") or "",
                        "task_id": r.get("task_id") or "", "step_idx": r.get("step_idx"), "label": label,
                        "response_1": parts.response_1, "response_2": parts.response_2, "action_pos": pos,
                        "action_neg": neg, "verdicts": [], "verdict_source": "none", "teacher_choice": None,
                        "replay_outcome": None,
                        "intent": parts.intent, "url": parts.current_url, "row": i})
            try:
                tree = parse_axtree(parts.axtree)
            except AXTreeParseError:
                tree = None
            _readable(out[-1], tree)
        return out

    def bench_prompt(self, pair: dict) -> list[dict]:
        """A WebPRMBench row's prompt as chat messages (a file may hold it as one string)."""
        prompt = pq.read_table(self.path, columns=["prompt"]).slice(pair["row"], 1).column("prompt")[0].as_py()
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt

    # -- one pair --------------------------------------------------------------------------
    def state(self, pair: dict) -> tuple[State, str | None, dict]:
        """(the judged state, its observation format, its trajectories row or {})."""
        if self.kind == "bench":
            parts = parse_prompt(self.bench_prompt(pair))
            history = [line for line in parts.trajectory.splitlines() if line.strip()]
            return State(parts.intent, parts.axtree, parts.current_url, parts.start_url, history), None, {}
        state = RunDir(self.path).states([(pair["traj_id"], pair["step_idx"])]).get((pair["traj_id"], pair["step_idx"]))
        step = self._step(pair)
        if state is None:
            state = State(pair["intent"], "", pair["url"], pair["url"], [])
        return state, step.get("obs_format"), step

    def residual(self, pair: dict, obs: Observation, step: dict) -> dict | None:
        """The GMCP audit's class of the pair (``proposals.audit.classify``), re-derived from O_t."""
        if self.kind == "bench":
            return None
        counts = bid_counts(obs.tree, None) if obs.tree is not None else None
        node_bids = None
        if obs.tree is not None and step:
            targets = tuple(sorted(set(obs.targets["pos"]) | set(obs.targets["neg"])))
            node_bids = node_bid_counts(obs.tree, step["site"], step["url"], step.get("html"), targets,
                                        mined_identity(self.path))
        return classify(pair["action_pos"], pair["action_neg"], counts, node_bids)

    def attempts(self, pair: dict, heavy: dict) -> list[dict]:
        """Every teacher attempt with its verdict and, where the run kept it, its text."""
        texts = heavy.get("texts") or []
        out = []
        for i, v in enumerate(pair["verdicts"]):
            text = texts[i] if i < len(texts) else None
            if text is None and pair["kept"] and i == len(pair["verdicts"]) - 1:
                text = heavy.get("judgment")
            out.append({**v, "text": text,
                        "agrees": None if v["verdict"] is None else v["verdict"] == pair["label"]})
        return out

    def prompt(self, pair: dict, heavy: dict, state: State) -> tuple[list[dict], bool]:
        """(the prompt messages the teacher saw, whether they are re-rendered): a kept pair's own
        messages without the answer; a discarded pair's re-rendered in the run's verify format."""
        if self.kind == "bench":
            return self.bench_prompt(pair), False
        if heavy.get("messages"):
            return [m for m in heavy["messages"] if m["role"] != "assistant"], False
        return render_pair(state, pair["response_1"], pair["response_2"], fmt=self._verify_format())[0], True

    def detail(self, pair_id: str) -> dict:
        """Everything the pair page shows."""
        pair = self.by_id[pair_id]
        heavy = self._run_row(pair) if self.kind == "run" else {}
        state, obs_format, step = self.state(pair)
        obs = observation(state.axtree, obs_format, pair["action_pos"], pair["action_neg"])
        try:
            evidence = json.loads(pair.get("evidence") or "{}")
        except ValueError:
            evidence = {"raw": pair.get("evidence")}
        messages, rerendered = self.prompt(pair, heavy, state)
        return {"pair": pair, "state": state, "obs": obs, "evidence": evidence,
                "residual": self.residual(pair, obs, step),
                "attempts": self.attempts(pair, heavy), "reason": heavy.get("reason"),
                "messages": messages, "rerendered": rerendered,
                "replay": replay_view(pair.get("replay_outcome"), heavy.get("replay_evidence"))}

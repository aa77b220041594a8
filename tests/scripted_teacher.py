"""A scripted teacher behind the OpenAI protocol, and a small run directory of real steps.

``make_run(dir)`` ingests the bundled AgentLab sample and writes a ``candidates.parquet`` whose
sampled pairs are real demonstrated steps (positive: the demonstrated action; negative: a click
on another element of the same observation), without running the miner (its fill values need
the real model). ``ScriptedTeacher`` answers each request from a per-pair script of outcomes by
attempt (the attempt is the request's seed): ``agree``, ``disagree``, ``unparsed`` (no answer
tag), ``bare`` (the right tag with no other section), ``truncated`` (cut off before its tag,
finish_reason ``length``), ``outage`` (HTTP 500); it counts what it answered. Candidates are read
back with ``judgment.parse.parse_prompt``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.schema import RULES
from judgment.parse import parse_prompt
from llm.serve import OpenAIHandler, serve_in_thread

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "bundled" / "agentlab_workarena.parquet"


def make_run(root: Path, n_pairs: int = 6) -> list[dict]:
    """A run directory with ``n_pairs`` sampled candidates on real steps; returns them."""
    from data.ingest import ingest
    from data.schema import AXIS_OF, CANDIDATE_SCHEMA

    ingest("canonical", [BUNDLED], root)
    rows = pq.read_table(root / "trajectories.parquet").to_pylist()
    rows = sorted((r for r in rows if r["success"] and r["action"] and r["action"].startswith("click(")),
                  key=lambda r: (r["task_id"], r["traj_id"], r["step_idx"]))
    cands, tasks = [], []
    for r in rows:
        if len(cands) == n_pairs:
            break
        if tasks.count(r["task_id"]) >= 2:     # spread the pairs over several tasks
            continue
        pos_bid = re.match(r"click\('([^']+)'\)", r["action"]).group(1)
        other = [b for b in re.findall(r"^\t*\[([^\]]+)\] (?:link|button)", r["observation"], re.M) if b != pos_bid]
        if not other:
            continue
        rule = RULES[len(cands) % len(RULES)]
        neg = f"click('{other[len(other) // 2]}')"
        pid = hashlib.blake2b(f"{r['traj_id']}|{r['step_idx']}|{neg}".encode(), digest_size=8).hexdigest()
        tasks.append(r["task_id"])
        cands.append({"pair_id": pid, "site": r["site"], "traj_id": r["traj_id"], "task_id": r["task_id"],
                      "step_idx": r["step_idx"], "rule": rule, "axis": AXIS_OF[rule], "action_pos": r["action"],
                      "action_neg": neg, "gmcp": True, "sampled": True, "pos_kind": "element", "pos_bid": pos_bid,
                      "pos_node": "e-pos", "neg_bid": other[len(other) // 2], "neg_node": "e-neg", "op_pos": "click",
                      "op_neg": "click", "value_source": None, "evidence": "{}", "mode": "graph"})
    cands.append({**cands[0], "pair_id": "ffffffffffffffff", "sampled": False})   # outside the sample
    # Written as a stage writes it (the lock, then the file, then its stats.json entry), so that
    # teacher.verify finds its producer recorded.
    from data.rundir import RunDir, StageStats

    run = RunDir(root)
    run.check_inputs("proposals.mine", run.trajectories)
    pq.write_table(pa.Table.from_pylist(cands, schema=CANDIDATE_SCHEMA), root / "candidates.parquet")
    run.write_stage(StageStats("proposals.mine", n_in=len(cands), n_out=len(cands)), [])
    return cands[:-1]


def judgment(label: int) -> str:
    """A full judgment in the benchmark's output format, preferring ``label``."""
    other = 3 - label
    return (f"<think>Response 1 and Response 2 target different elements of the page.</think>\n"
            f"<Criteria>Task progress (0.6) and element grounding (0.4).</Criteria>\n"
            f"<Analysis>Response {label} clicks the element that the intent needs next on this page, so it "
            f"makes progress. Response {other} targets an element that does not advance the task and would "
            f"cost extra steps.</Analysis>\n<Answer>Response {label}</Answer>")


class ScriptedTeacher:
    """``script[pair_id]`` lists outcomes by attempt (seed - base_seed); missing: 'agree'."""

    def __init__(self, pairs: list[dict], base_seed: int = 0):
        self.by_actions = {frozenset((p["action_pos"], p["action_neg"])): p for p in pairs}
        self.base_seed = base_seed
        self.script: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.answered: list[str] = []        # request hashes, one per answered request
        self.seen: list[tuple[str, int]] = []  # (pair_id, attempt) of every request received
        self.hold_after: int | None = None   # answer this many, then hold the rest
        self.release = threading.Event()
        self.held = 0
        self.admitted = 0                   # answers let through while ``hold_after`` is set

    def outcome(self, request: dict) -> tuple[dict, str, int]:
        parts = parse_prompt(request["messages"])
        pair = self.by_actions[frozenset((parts.response_1, parts.response_2))]
        label = 1 if parts.response_1 == pair["action_pos"] else 2
        attempt = request["seed"] - self.base_seed
        script = self.script.get(pair["pair_id"], [])
        return pair, (script[attempt] if attempt < len(script) else "agree"), label

    def text(self, outcome: str, label: int) -> str:
        return {"agree": judgment(label), "disagree": judgment(3 - label),
                "unparsed": "Both responses look reasonable; it is hard to say.",
                "bare": f"<Answer>Response {label}</Answer>",
                "truncated": judgment(label)[:60]}[outcome]


def request_hash(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


class _Handler(OpenAIHandler):
    def do_POST(self) -> None:
        srv = self.server
        teacher: ScriptedTeacher = srv.teacher
        request = self.read_json()
        pair, outcome, label = teacher.outcome(request)
        with teacher.lock:
            teacher.seen.append((pair["pair_id"], request["seed"] - teacher.base_seed))
            # the decision and the slot taken in one step: requests in flight at once cannot
            # all see the count below the limit
            hold = teacher.hold_after is not None and teacher.admitted >= teacher.hold_after
            if hold:
                teacher.held += 1
            elif teacher.hold_after is not None and outcome != "outage":
                teacher.admitted += 1
        if hold:
            teacher.release.wait(30)
            self.close_connection = True      # the client is gone: answer nothing
            return
        if outcome == "outage":
            self.send_error_json(500, "scripted outage", "server_error")
            return
        text = teacher.text(outcome, label)
        body = {"id": "chatcmpl-scripted", "object": "chat.completion", "model": request["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "length" if outcome == "truncated" else "stop"}],
                "usage": {"prompt_tokens": 1000 + len(request["messages"][-1]["content"]) // 4,
                          "completion_tokens": len(text) // 4, "total_tokens": 0}}
        with teacher.lock:
            teacher.answered.append(request_hash(request))
        self.send_json(200, body)


def start(teacher: ScriptedTeacher):
    """Serve ``teacher`` on 127.0.0.1 (``shutdown()`` the returned server when done)."""
    server = serve_in_thread(lambda body: body, "scripted-teacher", handler=_Handler)
    server.teacher = teacher
    return server


def llm_config(server, cache_dir: Path, **kw):
    from llm import LLMConfig

    base = dict(base_url=server.base_url, model="scripted-teacher", cache_dir=str(cache_dir), max_retries=0,
                timeout_s=10, api_key_env="SURFPRM_TEST_KEY_UNSET", price_in=1.0, price_out=4.0)
    return LLMConfig(**{**base, **kw})

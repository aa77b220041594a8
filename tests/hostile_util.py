"""Small generated fixtures for the hostile-input tests (nothing large is committed)."""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, write_step_pickle

AXTREE = ("RootWebArea 'Shop', focused, url='https://shop.example.com/'\n"
          "\t[12] link 'Home', url='https://shop.example.com/'\n\t[13] button 'Buy'")
FLAT = "Tab 0 (current): Shop\n\n[1] RootWebArea 'Shop'\n[12] link 'Home'\n[13] button 'Buy'"
EXP = "2025-01-01_00-00-00_Agent_on_shop.buy_3"
# A 13-byte pickle: PROTO 4, then a FRAME whose length is past any machine's memory.
HUGE_FRAME = b"\x80\x04\x95" + struct.pack("<Q", 2**63 + 5) + b"N."
BIG_HEX = "0x" + "f" * 4000


def state(action="Clicking buy.\n```click('13')```", axtree=AXTREE, error="") -> dict:
    return {"step": 0, "action": action, "agent_info": {},
            "obs": {"chat_messages": [{"role": "user", "message": "Buy the thing"}],
                    "goal_object": None, "last_action": "", "last_action_error": error,
                    "open_pages_urls": ("https://shop.example.com/",), "active_page_index": [0],
                    "axtree_txt": axtree, "pruned_html": "<html bid='1'></html>"}}


def experiment(root: Path, name: str = EXP, n: int = 3) -> Path:
    """An AgentLab experiment directory of ``n`` good steps (the last one without action)."""
    d = root / name
    d.mkdir(parents=True)
    (d / "summary_info.json").write_text(json.dumps({"cum_reward": 1, "n_steps": n}))
    for i in range(n):
        write_step_pickle(d / f"step_{i}.pkl.gz", state(action=None if i == n - 1 else "```click('13')```"))
    return d


def gz(path: Path, payload: bytes) -> Path:
    with gzip.open(path, "wb") as f:
        f.write(payload)
    return path


def zero_bomb(path: Path, mb: int) -> Path:
    """A gzip file of ``mb`` MB of zero bytes (a few KB on disk)."""
    chunk = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(mb):
            f.write(chunk)
    return path


def webprm_row(step_id=0, task_id="t1", **change) -> dict:
    row = {"task_id": task_id, "step_id": step_id, "intent": "Buy the thing", "website_name": "shop",
           "start_url": "https://shop.example.com/", "current_url": "https://shop.example.com/",
           "text_observation": FLAT, "chosen": {"thought": "Buy it.", "action": "click('13')"},
           "rejected": {"thought": "Go home.", "action": "click('12')"}}
    row.update(change)
    return row


def stats(run: Path, stage: str = "ingest") -> dict:
    return json.loads((run / "stats.json").read_text())[stage]


def rejects(run: Path, stage: str | None = None) -> list[dict]:
    path = run / "rejects.jsonl"
    rows = [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []
    return [r for r in rows if stage is None or r["stage"] == stage]


def balanced(run: Path, stage: str = "ingest") -> dict:
    """The stage's stats after checking ``in = out + rejected`` and that every rejected record
    has its line in rejects.jsonl."""
    s = stats(run, stage)
    assert s["in"] == s["out"] + sum(s["rejected"].values()), s
    assert len(rejects(run, stage)) == sum(s["rejected"].values())
    return s


def cli(module: str, *args: str, cwd: Path = ROOT, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python -m module args`` in a subprocess (where a traceback would show)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr[-3000:]

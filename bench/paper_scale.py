"""The paper's job end to end on a pool of the paper's size (issue 29 item 1).

    .venv/bin/python bench/paper_scale.py [--scale 1] [--latency 0.2] [--out DIR] [--keep]
                                          [--sample-size 10000] [--concurrency 64] [--sites 50]

The pool: the 34 successful trajectories of the 53 shared AgentLab runs (ingested once, as
``bench/graphs.py`` does), copied with distinct task ids, trajectory ids and ``source_path``s onto
``--sites`` sites (``servicenow-s00``, ...), every bid of a copy renamed (its number shifted by
the copy, its letter frame prefix kept; in the observation and the action), so no two copies are
byte-identical. Copies are drawn in proportion to length**a, with ``a`` set so that 854 x scale
trajectories hold ~9,497 x scale observations (the paper: 854 trajectories, 9,497 observations,
50 sites). The HTML column is left empty: no stage after ingest reads it, and the shared runs
carry ~220 KB of it per step (2 GB at 1x).

The job, each stage the real CLI in its own process (``python -m ...``) on one run directory:
``data.ingest --source canonical`` on the pool, ``graph.build``, ``proposals.mine --sample-size
10000 --seed 42`` (fill values from the scripted server, then the same command again with every fill
served from the LLM cache: timed separately, the mining goal's figure), ``teacher.verify --k 5
--concurrency 64``, ``dataset.export --format trl --format webprmbench`` and
``datasets.load_dataset`` on every config the run's card lists. ``--scale 10`` runs the same
job on 10x the trajectories and observations over the same ``--sites`` sites; the sample stays
``--sample-size`` (10,000), so the teacher's work does not grow.

The teacher: ``llm.serve.ChatServer`` in a process of its own, answering after ``--latency``
seconds (from the request's arrival) with full judgments in the benchmark format
(``tests/scripted_teacher.judgment``). Before the teacher's stage the bench renders every
sampled pair's prompt as ``teacher.verify`` will (``judgment.pairs.load_pairs``) and hands the server
each prompt's hash with the positive's position; a pair's script comes from its id: 95% agree on the
first attempt, 1.8% on the second, 1% on the third, 0.5% on the fourth and on the fifth, 1.2%
never (expected 1.121 calls per pair: the paper's 11,210 calls for 10,000 pairs at K=5). Fill
requests (any prompt that is not a pairwise judgment) get ``{"value": "Zoom"}``.

``--dask-local --dask-workers N [--dask-memory-limit 2GB]`` runs graph building, mining and the
teacher through their flows (``flows.build_graphs``, ``flows.propose_negatives``, ``flows.synthesize
--verify-only``) on a local Dask cluster of N worker processes; ``--compare OUT`` compares the run
directory's files byte for byte with another run's (``OUT/run``, kept with ``--keep``).

Per stage: wall time, CPU time (user + sys of the stage process and the workers it waited for),
RSS sampled every 20 ms over each process of the stage's tree: the largest one process reached
(``peak_rss_mb``, goal < 2 GB) and the tree's sum (``summed_rss_mb``: the job's at that moment, as
the stages run one at a time; goal < 4 GB; RSS, so pages forked workers share with their parent
count more than once), and beside it ``job_rss_mb``, that sum plus the bench's own process and the
scripted server (the harness, not the pipeline), in/out/rejected from
``stats.json`` and throughput. For the
LLM stages, the endpoint-bound floor (calls x latency / concurrency) and its ratio to the
stage's wall time, and to the span from the first request's arrival to the last answer (as the
server saw it). The job's total is given with and without that floor. Writes
``OUT/summary.json`` and the stage logs (``OUT/logs``); the run directory, the pool and the
caches are removed unless ``--keep``.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.config import make_parser  # noqa: E402
from data.actions import parse_action  # noqa: E402
from data.ingest import ingest  # noqa: E402
from data.schema import TRAJECTORY_SCHEMA  # noqa: E402

PAPER = {"trajectories": 854, "observations": 9497, "sites": 50, "candidates": 31648, "pairs": 10000,
         "teacher_calls": 11210}
MODEL = "scripted-teacher"
FILL_ANSWER = '{"value": "Zoom"}'
# (attempt at which a pair's first agreement comes, or None: never; share of pairs), first attempt excluded
LATER = ((2, 0.018), (3, 0.010), (4, 0.005), (5, 0.005), (None, 0.012))
FIRST_AGREE = 1 - sum(share for _, share in LATER)
GOALS = {"graph.build": 2500, "proposals.mine (cached fills)": 5000}     # throughput for the whole command
PROCESS_RSS_GOAL_MB = 2048     # issue 42: every process of every stage
JOB_RSS_GOAL_MB = 4096         # issue 42: the job's processes summed, at any moment
JOB_GOAL_S = 600
_BID = re.compile(r"^(\t*)\[([A-Za-z]*)(\d+)\]", re.M)

# A stage as a child of the sampler's process: wall and CPU of the command (and what it waited
# for); every 20 ms the RSS of each process of its tree (the wrapper itself left out): the largest
# one process reached (``peak_rss_mb``, which process in ``peak_process``), the tree's sum
# (``summed_rss_mb``) and the job's sum at that moment (``job_rss_mb``: the tree plus the bench's own
# process and the scripted server, the pids in argv[2]).
_STAGE = """
import json, os, subprocess, sys, threading, time
import psutil
others = [psutil.Process(int(pid)) for pid in sys.argv[2].split(",") if pid]
per_pid, names, peak = {}, {}, {"summed": 0, "job": 0}
def sample():
    me = psutil.Process()
    while True:
        try:
            tree = me.children(recursive=True)
        except psutil.Error:
            tree = []
        summed = job = 0
        for i, p in enumerate(tree + others):
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            job += rss
            if i < len(tree):
                summed += rss
                if rss > per_pid.get(p.pid, 0):
                    per_pid[p.pid] = rss
                    try:       # read again at each new peak: a child seen before its exec bore our name
                        names[p.pid] = " ".join(p.cmdline()[1:4])[:80]
                    except psutil.Error:
                        names.setdefault(p.pid, "?")
        peak["summed"], peak["job"] = max(peak["summed"], summed), max(peak["job"], job)
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
with open(sys.argv[1], "w") as log:
    t0, t = os.times(), time.perf_counter()
    rc = subprocess.run(sys.argv[3:], stdout=log, stderr=subprocess.STDOUT).returncode
    wall, t1 = time.perf_counter() - t, os.times()
time.sleep(0.05)
top = max(per_pid, key=per_pid.get, default=None)
print(json.dumps({"seconds": wall, "rc": rc, "peak_rss_mb": per_pid.get(top, 0) / 2**20,
                  "peak_process": names.get(top, ""), "processes": len(per_pid),
                  "summed_rss_mb": peak["summed"] / 2**20, "job_rss_mb": peak["job"] / 2**20,
                  "cpu": t1.children_user - t0.children_user + t1.children_system - t0.children_system}))
"""

# datasets.load_dataset on every config the run's card lists; prints {config: {split: rows}}.
_LOAD = """
import json, sys, datasets, yaml
run, cache = sys.argv[1], sys.argv[2]
head = yaml.safe_load(open(f"{run}/README.md", encoding="utf-8").read().split("---\\n")[1])
rows = {}
for c in head["configs"]:
    ds = datasets.load_dataset(run, c["config_name"], cache_dir=cache)
    rows[c["config_name"]] = {split: len(ds[split]) for split in ds}
print(json.dumps(rows))
"""


# -- the pool -----------------------------------------------------------------------------------
def copy_counts(lengths: list[int], n_traj: int, n_obs: int) -> list[int]:
    """How many copies of each trajectory: in proportion to length**a (stride scheduling, so the
    counts are deterministic and as even as the weights allow), ``a`` bisected so that the
    ``n_traj`` copies hold about ``n_obs`` observations."""
    def counts(a: float) -> list[int]:
        w = [n ** a for n in lengths]
        c = [0] * len(lengths)
        for _ in range(n_traj):
            i = min(range(len(w)), key=lambda j: ((c[j] + 1) / w[j], j))
            c[i] += 1
        return c

    lo, hi = -2.0, 4.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if sum(c * n for c, n in zip(counts(mid), lengths)) < n_obs:
            lo = mid
        else:
            hi = mid
    return counts((lo + hi) / 2)


def _shift_bid(bid: str, shift: int) -> str:
    m = re.fullmatch(r"([A-Za-z]*)(\d+)", bid)
    return f"{m.group(1)}{int(m.group(2)) + shift}" if m else bid


def copy_row(row: dict, copy: int, slot: int, site: str) -> dict:
    """One step of the ``copy``-th copy of its trajectory, the ``slot``-th copy of the pool: ids
    suffixed with ``copy`` (two runs of one task stay one task), bids shifted by (slot + 1) * 100000
    (no two copies share a bid), HTML dropped."""
    shift = (slot + 1) * 100_000
    out = {**row, "site": site, "task_id": f"{row['task_id']}-c{copy}", "traj_id": f"{row['traj_id']}-c{copy}",
           "source_path": f"{row['source_path']}~c{copy}", "html": None,
           "observation": _BID.sub(lambda m: f"{m.group(1)}[{m.group(2)}{int(m.group(3)) + shift}]",
                                   row["observation"])}
    if row["action"]:
        action = parse_action(row["action"])
        args = tuple((name, _shift_bid(v, shift) if name.endswith("bid") else v) for name, v in action.args)
        out["action"] = type(action)(action.op, args).to_string()
    return out


def build_pool(base: Path, dst: Path, n_traj: int, n_obs: int, n_sites: int) -> dict:
    """Write the pool (``dst``, canonical Parquet) from the successful trajectories of ``base``."""
    keep = [name for name in TRAJECTORY_SCHEMA.names if name != "html"]      # dropped by copy_row anyway
    rows = [r for r in pq.read_table(base, columns=keep).to_pylist() if r["success"]]
    trajs: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["traj_id"], r["step_idx"])):
        trajs.setdefault(r["traj_id"], []).append(r)
    names = sorted(trajs)
    counts = copy_counts([len(trajs[t]) for t in names], n_traj, n_obs)
    # Copies in rounds (every trajectory's c-th copy, then the (c+1)-th), dealt over the sites.
    order = [(c, t) for c in range(max(counts)) for t, k in zip(names, counts) if c < k]
    n_sites = min(n_sites, len(order))
    written = 0
    with pq.ParquetWriter(dst, TRAJECTORY_SCHEMA) as writer:
        for start in range(0, len(order), 200):
            chunk = [copy_row(r, copy, slot, f"servicenow-s{slot % n_sites:02d}")
                     for slot, (copy, t) in enumerate(order[start:start + 200], start) for r in trajs[t]]
            writer.write_table(pa.Table.from_pylist(chunk, schema=TRAJECTORY_SCHEMA))
            written += len(chunk)
    return {"trajectories": len(order), "observations": written, "sites": n_sites,
            "source_trajectories": len(names), "max_copies": max(counts), "min_copies": min(counts)}


# -- the scripted teacher -----------------------------------------------------------------------
def script_for(pair_id: str) -> int | None:
    """The attempt at which a pair's verdict first agrees with its label (None: never), from a
    hash of its id: ``FIRST_AGREE`` of the pairs at the first, then ``LATER``."""
    u = int(hashlib.sha256(pair_id.encode()).hexdigest()[:12], 16) / 16 ** 12
    edge = FIRST_AGREE
    if u < edge:
        return 1
    for attempt, share in LATER:
        edge += share
        if u < edge:
            return attempt
    return None


def prompt_key(messages: list[dict]) -> str:
    """The hash of a prompt as the client sends it (``llm.client.build_request`` keeps role and
    content)."""
    canon = json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def write_labels(run: Path, dst: Path) -> dict:
    """What the scripted teacher needs to know of each sampled pair: its prompt as ``teacher.verify``
    renders it (``judgment.pairs.load_pairs`` with the teacher's default seed and format), the
    positive's position and the attempt of its first agreement. Exact, where the actions alone
    (``ScriptedTeacher.by_actions``) collide between steps that swap the same two actions."""
    from data.rundir import RunDir
    from judgment.pairs import load_pairs
    from teacher.verify import VerifyConfig

    cfg = VerifyConfig()
    labels = {prompt_key(p.messages): [p.label, script_for(p.row["pair_id"])]
              for p in load_pairs(RunDir(run), cfg.seed, cfg.format)}
    dst.write_text(json.dumps(labels))
    return labels


def _serve(latency: float, labels_path: str, port, ready, counts, times) -> None:
    """The bench's endpoint (a spawned process): fills and scripted judgments after ``latency``.
    A judgment's attempt is its seed (``teacher.verify``'s default base seed is 0)."""
    import threading

    sys.path.insert(0, str(ROOT / "tests"))
    from judgment.parse import parse_prompt
    from llm.serve import ChatServer, fixed_answer
    from scripted_teacher import judgment

    fill = fixed_answer(FILL_ANSWER)
    labels, lock = {}, threading.Lock()

    def label_of(messages: list[dict]) -> list | None:
        with lock:       # written before the teacher's stage starts; read at its first request
            if not labels and Path(labels_path).exists():
                labels.update(json.loads(Path(labels_path).read_text()))
        return labels.get(prompt_key(messages))

    def complete(request: dict) -> dict:
        arrived = time.time()
        found = label_of(request["messages"])
        if found is None:
            if parse_prompt(request["messages"]) is not None:   # a judgment of no sampled pair: 500, counted
                with counts.get_lock():
                    counts[2] += 1
                raise RuntimeError("no sampled pair has this prompt")
            kind, body = 0, fill(request)
        else:
            label, agrees_at = found
            text = judgment(label if request["seed"] + 1 == agrees_at else 3 - label)
            kind, body = 1, {"id": "scripted", "object": "chat.completion", "model": request["model"],
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": len(request["messages"][-1]["content"]) // 4,
                                       "completion_tokens": len(text) // 4}}
        time.sleep(max(0.0, arrived + latency - time.time()))
        with counts.get_lock():
            counts[kind] += 1
            if kind:
                times[0] = min(times[0], arrived) if times[0] else arrived
                times[1] = max(times[1], time.time())
        return body

    server = ChatServer(("127.0.0.1", 0), complete, MODEL, max_connections=None)
    port.value = server.server_address[1]
    ready.set()
    server.serve_forever(poll_interval=0.05)


class Endpoint:
    """The scripted server in its own process; ``calls()`` = (fill, judgment) requests answered,
    ``unknown()`` = judgment requests of no sampled pair (answered 500)."""

    def __init__(self, latency: float, labels: Path):
        ctx = multiprocessing.get_context("spawn")
        self.port, self.ready = ctx.Value("i", 0), ctx.Event()
        self.counts, self.times = ctx.Array("l", 3), ctx.Array("d", 2)
        self.proc = ctx.Process(target=_serve, args=(latency, str(labels), self.port, self.ready, self.counts,
                                                     self.times), daemon=True)

    def __enter__(self) -> "Endpoint":
        self.proc.start()
        if not self.ready.wait(60):
            raise RuntimeError("the scripted teacher server did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port.value}/v1"

    def calls(self) -> tuple[int, int]:
        return self.counts[0], self.counts[1]

    def unknown(self) -> int:
        return self.counts[2]

    def judgment_span(self) -> float:
        return self.times[1] - self.times[0]


# -- stages -------------------------------------------------------------------------------------
def run_stage(name: str, cmd: list[str], logs: Path, others: tuple[int, ...] = ()) -> dict:
    """``cmd`` in its own process under the sampler (``others``: pids counted in the job's summed
    RSS beside the stage's tree); its figures, plus the load average."""
    log = logs / (re.sub(r"[^\w.]+", "_", name) + ".log")
    proc = subprocess.run([sys.executable, "-c", _STAGE, str(log), ",".join(map(str, others)), *cmd], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    shown = ["python"] + ["<code>" if "\n" in a else a for a in cmd[1:]]
    r.update(name=name, command=" ".join(shown), log=str(log),
             load=round(os.getloadavg()[0], 2))
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    print(f"  {name}: {r['seconds']:.1f} s, CPU {r['cpu']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB "
          f"({r['processes']} processes, summed {r['summed_rss_mb']:.0f} MB, job {r['job_rss_mb']:.0f} MB), load "
          f"{r['load']}, rc {r['rc']}" + (f"  | {tail[-1][:150]}" if tail else ""), flush=True)
    if r["rc"] not in (0, 3):        # teacher.verify: 3 = pairs pending (reported below)
        raise RuntimeError(f"{name} failed (exit {r['rc']}); see {log}:\n" + "\n".join(tail))
    return r


def stage_counts(run: Path, prefixes: tuple[str, ...]) -> dict:
    """in/out/rejected of the ``stats.json`` entries named ``prefix`` or ``prefix.*`` (the export
    records one per format), summed, and whether each entry balances (in = out + rejected)."""
    stats = json.loads((run / "stats.json").read_text())
    entries = {k: v for k, v in stats.items() if any(k == p or k.startswith(p + ".") for p in prefixes)}
    if not entries:
        raise RuntimeError(f"no stats.json entry for {prefixes} in {run}")
    rejected = {k: sum(v.get("rejected", {}).values()) for k, v in entries.items()}
    return {"in": sum(v["in"] for v in entries.values()), "out": sum(v["out"] for v in entries.values()),
            "rejected": sum(rejected.values()),
            "balanced": all(v["in"] == v["out"] + rejected[k] for k, v in entries.items()), "entries": entries}


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head.strip() + (" (+ uncommitted changes)" if dirty else "")


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.platform()}, "
            f"Python {platform.python_version()}")


def run_job(args, out: Path) -> dict:
    py = sys.executable
    run, cache, logs = out / "run", out / "llm-cache", out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    n_traj = max(1, round(PAPER["trajectories"] * args.scale))
    n_obs = max(n_traj, round(PAPER["observations"] * args.scale))
    summary = {"commit": commit(), "machine": machine(), "scale": args.scale, "latency_s": args.latency,
               "concurrency": args.concurrency, "sample_size": args.sample_size, "k": args.k,
               "dask": {"workers": args.dask_workers, "memory_limit": args.dask_memory_limit} if args.dask_local
               else None,
               "load_start": [round(x, 2) for x in os.getloadavg()], "paper": PAPER}

    t = time.perf_counter()
    ingest("agentlab", [args.shared / "agentlab_workarena"], out / "base", quiet=True)
    pool = build_pool(out / "base" / "trajectories.parquet", out / "pool.parquet", n_traj, n_obs, args.sites)
    pool["seconds"] = round(time.perf_counter() - t, 1)
    summary["pool"] = pool
    print(f"pool: {pool['trajectories']} trajectories, {pool['observations']} observations, {pool['sites']} sites "
          f"({pool['min_copies']}-{pool['max_copies']} copies of each of {pool['source_trajectories']}; "
          f"built in {pool['seconds']} s, not timed as a stage)", flush=True)

    stages = []
    with Endpoint(args.latency, out / "labels.json") as ep:
        llm = ["--concurrency", str(args.concurrency), "--cache-dir", str(cache)]
        mine = [py, "-m", "proposals.mine", "--run", str(run), "--sample-size", str(args.sample_size),
                "--seed", "42", "--quiet", "--fill-base-url", ep.url, "--fill-model", MODEL,
                *[f"--fill-{a[2:]}" if a.startswith("--") else a for a in llm]]
        workers = ["--workers", str(args.workers)] if args.workers else []
        build = [py, "-m", "graph.build", "--run", str(run), *workers]
        verify = [py, "-m", "teacher.verify", "--run", str(run), "--k", str(args.k), "--quiet",
                  "--base-url", ep.url, "--model", MODEL, *llm]
        if args.dask_local:     # the same stages through their flows, tasks on a local Dask cluster
            dask = ["--dask-local", "--dask-workers", str(args.dask_workers),
                    *(["--dask-memory-limit", args.dask_memory_limit] if args.dask_memory_limit else [])]
            build = [py, "-m", "flows.build_graphs", "--run", str(run), *dask]
            mine = [py, "-m", "flows.propose_negatives", *mine[3:], *dask]
            verify = [py, "-m", "flows.synthesize", "--verify-only", "--run", str(run), "--k", str(args.k),
                      "--base-url", ep.url, "--model", MODEL, *llm, *dask]
            workers = []
        plan = [
            ("ingest", [py, "-m", "data.ingest", "--source", "canonical", "--input", str(out / "pool.parquet"),
                        "--out", str(run)], ("ingest",), "observations"),
            ("graph.build", build, ("graph.build",), "observations"),
            ("proposals.mine (fills)", mine + workers, ("proposals.mine",), "candidates"),
            *([("proposals.mine (cached fills)", mine + workers, ("proposals.mine",), "candidates")]
              if args.rerun else []),
            ("teacher.verify", verify, ("teacher.verify",), "pairs"),
            ("dataset.export", [py, "-m", "dataset.export", "--run", str(run), "--format", "trl", "--format",
                                "webprmbench"], ("dataset.export", "data.export"), "rows"),
            ("datasets.load_dataset", [py, "-c", _LOAD, str(run), str(out / "hf-cache")], None, "rows"),
        ]
        for name, cmd, stage, unit in plan:
            if name == "teacher.verify":
                t = time.perf_counter()
                n = len(write_labels(run, out / "labels.json"))
                summary["labels_s"] = round(time.perf_counter() - t, 1)
                print(f"  (the scripted teacher's labels of {n:,} pairs: {summary['labels_s']} s, "
                      "not timed as a stage)")
            before = ep.calls()
            r = run_stage(name, cmd, logs, (os.getpid(), ep.proc.pid))
            fills, judgments = (a - b for a, b in zip(ep.calls(), before))
            if stage:
                r.update(stage_counts(run, stage))
            if name == "datasets.load_dataset":
                loaded = json.loads(Path(r["log"]).read_text().strip().splitlines()[-1])
                r["loaded"] = loaded
                r["out"] = sum(sum(s.values()) for s in loaded.values())
            r["unit"] = unit
            r["per_s"] = (r["in"] if unit in ("observations", "pairs") else r["out"]) / r["seconds"]
            if fills or judgments:
                calls = fills + judgments
                r["endpoint"] = {"fill_calls": fills, "judgment_calls": judgments,
                                 "floor_s": calls * args.latency / args.concurrency}
                r["endpoint"]["ratio"] = r["endpoint"]["floor_s"] / r["seconds"]
                if judgments:
                    span = ep.judgment_span()
                    r["endpoint"].update(span_s=span, span_ratio=r["endpoint"]["floor_s"] / span)
            stages.append(r)
            summary["stages"] = stages       # so far: a run stopped midway keeps its finished stages
            (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
        summary["unknown_judgments"] = ep.unknown()
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


# What differs between two runs of one job by design: the stages' timings and input paths
# (stats.json: its counts are compared instead) and the report's "Stage timings" section (the rest of
# the report is compared).
UNCOMPARED = ("stats.json",)
TIMINGS = ("report/README.md", re.compile(r"^## Stage timings\n.*?(?=^## |\Z)", re.M | re.S))


def compare_runs(a: Path, b: Path) -> dict:
    """Every file of run directory ``a`` against ``b``'s, byte for byte (hidden files and
    ``UNCOMPARED`` left out, the report's timings section cut out); ``stats.json``'s
    in/out/rejected per stage compared instead."""
    def files(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(root).parts)} - set(UNCOMPARED)

    def content(path: Path, rel: str) -> bytes:
        data = path.read_bytes()
        if rel == TIMINGS[0]:
            data = TIMINGS[1].sub("", data.decode("utf-8")).encode("utf-8")
        return data

    fa, fb = files(a), files(b)
    same = sorted(rel for rel in fa & fb if content(a / rel, rel) == content(b / rel, rel))
    counts = [{k: {f: v.get(f) for f in ("in", "out", "rejected")} for k, v in json.loads(
        (root / "stats.json").read_text()).items()} for root in (a, b)]
    return {"against": str(b), "identical": len(same), "different": sorted(fa & fb - set(same)),
            "only_here": sorted(fa - fb), "only_there": sorted(fb - fa), "stats_counts_equal": counts[0] == counts[1]}


def _fmt_int(x) -> str:
    return f"{x:,}" if isinstance(x, int) else "-"


def report(summary: dict) -> None:
    stages = summary["stages"]
    print(f"\npaper_scale x{summary['scale']}: commit {summary['commit']}; {summary['machine']}")
    print(f"load average at start {summary['load_start']}, at end {summary['load_end']}; endpoint latency "
          f"{summary['latency_s'] * 1000:.0f} ms, concurrency {summary['concurrency']}")
    print(f"{'stage':<30} {'wall s':>7} {'CPU s':>7} {'RSS MB':>7} {'summed':>7} {'job':>7} {'in':>8} {'out':>8} "
          f"{'rejected':>8} {'throughput':>20} {'load':>5}")
    for r in stages:
        print(f"{r['name']:<30} {r['seconds']:>7.1f} {r['cpu']:>7.1f} {r['peak_rss_mb']:>7.0f} "
              f"{r['summed_rss_mb']:>7.0f} {r['job_rss_mb']:>7.0f} "
              f"{_fmt_int(r.get('in')):>8} {_fmt_int(r.get('out')):>8} {_fmt_int(r.get('rejected')):>8} "
              f"{r['per_s']:>11.0f} {r['unit'] + '/s':<8} {r['load']:>5.1f}")
    for r in stages:
        e = r.get("endpoint")
        if e:
            span = f"; over the server's span {e['span_s']:.1f} s: {e['span_ratio']:.1%}" if "span_s" in e else ""
            print(f"{r['name']}: {e['fill_calls']:,} fill + {e['judgment_calls']:,} judgment calls; "
                  f"endpoint-bound floor {e['floor_s']:.1f} s (calls x latency / concurrency) = "
                  f"{e['ratio']:.1%} of the stage's wall time{span}")
    by = {r["name"]: r for r in stages}
    job = [r for r in stages if r["name"] != "proposals.mine (cached fills)"]
    wall = sum(r["seconds"] for r in job)
    floor = sum(r.get("endpoint", {}).get("floor_s", 0.0) for r in job)
    cpu = sum(r["cpu"] for r in job)
    summary["job"] = {"wall_s": wall, "cpu_s": cpu, "endpoint_floor_s": floor, "wall_less_floor_s": wall - floor}
    print(f"whole job (every stage once, mining with its fills): {wall:.0f} s wall, {cpu:.0f} s CPU; less the "
          f"endpoint-bound floors ({floor:.0f} s): {wall - floor:.0f} s (goal < {JOB_GOAL_S} s)")
    teacher = by.get("teacher.verify", {})
    ex = teacher.get("entries", {}).get("teacher.verify", {})
    if ex:
        print(f"teacher: {ex.get('sampled', 0):,} pairs sampled, {teacher['out']:,} kept, {teacher['rejected']:,} "
              f"discarded, {ex.get('pending', 0)} pending; kept at attempt {ex.get('kept_at_attempt')}; "
              f"calls decided {ex.get('calls_decided', 0):,} (paper: {PAPER['teacher_calls']:,} for "
              f"{PAPER['pairs']:,} pairs)")
    goals = {}
    for name, goal in GOALS.items():
        if name in by:
            goals[f"{name} >= {goal} {by[name]['unit']}/s"] = by[name]["per_s"] >= goal
    if teacher.get("endpoint"):
        goals["teacher.verify >= 95% of the endpoint bound (stage wall)"] = teacher["endpoint"]["ratio"] >= 0.95
    goals[f"peak RSS < {PROCESS_RSS_GOAL_MB} MB every process"] = all(r["peak_rss_mb"] < PROCESS_RSS_GOAL_MB
                                                                        for r in stages)
    goals[f"summed RSS of the job < {JOB_RSS_GOAL_MB} MB at any moment"] = all(
        r["summed_rss_mb"] < JOB_RSS_GOAL_MB for r in stages)
    goals[f"job less endpoint floor < {JOB_GOAL_S} s"] = wall - floor < JOB_GOAL_S
    goals["in = out + rejected every stage"] = all(r.get("balanced", True) for r in stages)
    if "compare" in summary:
        c = summary["compare"]
        print(f"against {c['against']}: {c['identical']} files identical, different {c['different']}, only here "
              f"{c['only_here']}, only there {c['only_there']}; stats.json counts equal: {c['stats_counts_equal']}")
        goals["outputs byte-identical to the compared run"] = not (c["different"] or c["only_here"]
                                                                   or c["only_there"]) and c["stats_counts_equal"]
    summary["goals"] = goals
    for goal, ok in goals.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {goal}")


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(prog="bench/paper_scale.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--scale", type=float, default=1.0, help="x the paper's 854 trajectories / 9,497 observations")
    ap.add_argument("--sites", type=int, default=PAPER["sites"], help="sites the copies are dealt over")
    ap.add_argument("--sample-size", type=int, default=PAPER["pairs"], help="pairs sampled for the teacher")
    ap.add_argument("--k", type=int, default=5, help="teacher attempts per pair at most")
    ap.add_argument("--latency", type=float, default=0.2, help="the endpoint's seconds per answer")
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight (teacher and fills)")
    ap.add_argument("--workers", type=int, default=0, help="graph.build / proposals.mine processes (0: theirs)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the run, logs and summary.json "
                                                           "(default: runs/paper-scale/xSCALE)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory, the pool and the caches")
    ap.add_argument("--no-rerun", dest="rerun", action="store_false",
                    help="mine once (with its fills), without the timed rerun from the cache")
    ap.add_argument("--dask-local", action="store_true",
                    help="graph.build, mining and the teacher through their flows (flows.build_graphs, "
                         "flows.propose_negatives, flows.synthesize --verify-only) on a local Dask cluster")
    ap.add_argument("--dask-workers", type=int, default=2, help="--dask-local: worker processes")
    ap.add_argument("--dask-memory-limit", default=None, metavar="BYTES",
                    help="--dask-local: memory limit of each worker (2GB)")
    ap.add_argument("--compare", type=Path, default=None, metavar="OUT",
                    help="compare the run directory's files byte for byte with OUT/run (another run of this "
                         "bench at the same scale, kept with --keep; e.g. the one-process run of a Dask run)")
    args = ap.parse_args(argv)
    if args.compare and not (args.compare / "run").is_dir():
        ap.error(f"--compare: {args.compare / 'run'} is not a folder (run the other job with --keep)")
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    out = (args.out or ROOT / "runs" / "paper-scale" / f"x{args.scale:g}").resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TQDM_DISABLE="1",
                      TOKENIZERS_PARALLELISM="false", PREFECT_HOME=str(out / "prefect"),
                      PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
                      PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300")
    try:
        summary = run_job(args, out)
        if args.compare:
            summary["compare"] = compare_runs(out / "run", args.compare.resolve() / "run")
        report(summary)
    finally:
        if not args.keep:
            for bulky in ("run", "base", "pool.parquet", "llm-cache", "hf-cache", "prefect"):
                path = out / bulky
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"summary: {out / 'summary.json'}")
    return 0 if all(summary["goals"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

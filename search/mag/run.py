"""PRM-guided knockout search on MAG: WebArena tasks from screenshots, with a guide per step.

    python -m search.mag --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --task-ids 27 44 --gold-guides gold.jsonl --out runs/mag/prm
    python -m search.mag --prm none --policy gpt-4o --policy-base-url ... \\
        --gold-guides gold.jsonl --out runs/mag/base                  # the unguided baseline
    python -m search.mag ... --out runs/mag/prm --baseline runs/mag/base     # both rows in table.md

Models as in ``search.webarena``: a local transformers folder, ``embedded``, or a name served at
``--prm-base-url`` / ``--policy-base-url`` (the other ``--prm-*`` / ``--policy-*`` flags are
``llm.client.LLMConfig``'s); ``--prm none`` runs one greedy policy output per step, no judge.
The policy gets MAG's 1,024 output tokens (§3.1) unless ``--policy-max-tokens`` says otherwise,
so a full JSON step fits. The PRM's prompt holds at most ``--prm-axtree-chars`` characters of
the menu (default 12,000); a local PRM loads with ``--prm-device``/``--prm-dtype`` (auto:
bfloat16 on a GPU). ``run.json`` records the token limits, the budget and the placement used.
``--grounding som`` (default) asks for a menu id, ``coord`` for a pixel pair: the observation (marked
screenshot and menu) and the prompt are the same but for the grounding key and its sentences
(MAG §3.1), so coordinate grounding needs a policy that sees the screenshot. ``--screenshot auto``
attaches the marked screenshot when the policy is an endpoint (a vision model) and not for a local
model (text only); ``on``/``off`` force it. The policy prompt carries the MAG paper's App. C
prompt in this project's words (``search.mag.agent``); ``--policy-prompt-template FILE`` renders a
user's exact text (YAML ``system`` and ``user``, ``search.mag.agent.PolicyTemplate``). The PRM is
Action-Only: it sees each candidate's verb, target and content, never its think or guide, with
the menu in the AXTree section of the comparative-judgment format.

``--diagnostics`` adds MAG App. D's teacher-forced step diagnostics (``search.mag.diagnostics``):
after the search, the policy writes one greedy output at each gold step of each task with gold
actions, on the gold path, scored by App. D's deterministic rules (SAA, GACS, Faith, Suff) into
``summary.json``'s ``diagnostics`` and ``diagnostics/<task_id>.jsonl``.

``--demo`` runs one built-in task instead, on a small shop served on 127.0.0.1
(``search.demo_site``, gold guides included): the whole harness without WebArena, e.g. to check
that a policy endpoint writes the contract (``make mag-demo`` runs it with the embedded model).

Tasks: WebArena task ids (``--task-ids``; the configs come from BrowserGym's WebArena package,
``webarena/test.raw.json``, 812 tasks); without ``--task-ids`` the ids of the gold-guide file. The
gold-guide format is in ``search.mag.metrics`` (JSONL, ``{"task_id": 27, "steps": [{"guide": ...}]}``);
without gold guides the run reports success and OFCR only. Before any model loads or browser
starts, the ``WA_*`` variables and the tasks' sites are checked (exit 2 naming what is missing).
The run itself is ``search.runner``'s (the loop, run folder, resume and summary every benchmark
shares); this module plugs in WebArena's tasks for MAG, the MAG agent (``search.mag.agent``:
Set-of-Mark observation, JSON steps with guides, the executor) and MAG's Table-1 scores.

Output in ``--out``: ``tasks/<task_id>.jsonl`` (one line per step: the N outputs, the bracket,
the executed action and guide, the compliance reason, the browser's error, timings; then one
``result`` line with the task's metrics), ``summary.json`` (MAG Table 1 columns with the paper's
denominators, labelled in ``denominators``: SR and OFCR over every task run, BLEU-1, BLEU-2,
ROUGE-1, ROUGE-L, G, GGS and tax over the tasks with gold guides, ``GGS_corpus`` over every task
(App. D); OFCR over all sampled outputs as ``OFCR_outputs``; terminations; an episode that ended
in an environment failure counts as not solved, scored on the steps it made, and the failures
are listed beside as ``env_failures`` and ``env_failed_tasks``; ``sites`` and ``macro.success_rate`` give
success per site and its macro-average; ``totals`` the outputs screened out before the bracket
and the PRM's unparsed and truncated judgments),
``table.md`` (the same as a Markdown row, with ``--baseline``'s row above it, and the
denominators, corpus GGS and environment failures under it), ``versions.json``,
``run.json`` (the settings), and with ``--save-screenshots`` ``shots/<task_id>/<step>.png``.
``--resume`` skips the tasks the agent finished (environment failures run again), refuses a
folder whose ``run.json`` has other settings, and rescores every task from its stored guides with
the current ``--gold-guides`` (a gold file added later fills the guide columns). Exit codes: 2 for
a setup error (nothing ran), 1 when no task could run (every task ended in an environment
failure), else 0.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from search.mag.agent import MAG as MAG_AGENT
from search.mag.agent import MAX_STEPS, PolicyTemplate
from search.mag.metrics import load_gold_guides, score_task, summarize
from search.runner import RESUME_SETTINGS, Benchmark, SearchConfig, SetupError, base_row, run_summary, site_key
from search.runner import build_parser as search_parser
from search.runner import main as run_cli
from search.webarena import preflight, site_urls, webarena_harness

TABLE_COLUMNS = ("SR", "OFCR", "bleu1", "bleu2", "rouge1", "rougeL", "G", "GGS", "tax")
TABLE_NAMES = ("SR", "OFCR", "BLEU-1", "BLEU-2", "ROUGE-1", "ROUGE-L", "G", "GGS", "Tax")


def webarena_tasks_path() -> Path:
    """WebArena's task file inside the ``webarena`` package BrowserGym installs (found without
    importing it)."""
    spec = importlib.util.find_spec("webarena")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("webarena (libwebarena) is not installed "
                         "(pip install --no-deps -r requirements/browsergym.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / "test.raw.json"


def load_task_configs(task_ids) -> list[dict]:
    """WebArena task configs for ``task_ids`` (URL placeholders left as they are), in the order asked."""
    if not task_ids:
        raise SetupError("no tasks: give --task-ids, or --gold-guides whose task ids are run")
    by_id = {c["task_id"]: c for c in json.loads(webarena_tasks_path().read_text())}
    wanted = [int(t) for t in task_ids]
    unknown = sorted(set(wanted) - set(by_id))
    if unknown:
        raise SetupError(f"no WebArena task with id {unknown} (ids are 0-811)")
    return [by_id[t] for t in dict.fromkeys(wanted)]


def summarize_run(rows: list[dict], gold: dict | None) -> dict:
    """MAG Table 1 over every task run (each scored from its stored guides and compliance reasons
    against ``gold``; an environment failure as not solved), env failures listed beside."""
    scores = [score_task(r["task_id"], (r["reward"] or 0.0) if r["evaluated"] else 0.0, r.get("reasons") or [],
                         r.get("guides") or [], gold.get(str(r["task_id"])) if gold is not None else None)
              for r in rows]
    out = summarize(scores, gold_given=gold is not None)
    outputs = sum(r.get("n_outputs", 0) for r in rows)
    out["OFCR_outputs"] = sum(r.get("n_outputs_compliant", 0) for r in rows) / outputs if outputs else None
    out.update(run_summary(rows))
    out["gold_file"] = gold is not None
    return out


def episode_row(task_id, site: str, intent: str, episode, gold: dict | None) -> dict:
    """The result line of one episode: termination, success, answer and its MAG scores."""
    reasons = [r for s in episode.steps for r in s.output_reasons]
    row = {**base_row({"task_id": task_id, "sites": [site], "intent": intent}, episode),
           "guides": episode.guides, "reasons": episode.reasons, "n_outputs": len(reasons),
           "n_outputs_compliant": sum(r is None for r in reasons)}
    if episode.evaluated:
        gold_guides = gold.get(str(task_id)) if gold is not None else None
        row["score"] = asdict(score_task(task_id, episode.reward or 0.0, episode.reasons, episode.guides,
                                         gold_guides))
    return row


def table(rows: list[tuple[str, dict]]) -> str:
    """Markdown table in the MAG paper's Table 1 layout (percent, one decimal; '-' when absent),
    then per run its denominators, corpus GGS and environment failures."""
    import pandas as pd

    cells = [[name, *(f"{100 * s[k]:.1f}" if s.get(k) is not None else "-" for k in TABLE_COLUMNS)]
             for name, s in rows]
    frame = pd.DataFrame(cells, columns=["run", *TABLE_NAMES])
    lines = frame.to_markdown(index=False, disable_numparse=True, stralign="left").splitlines()
    lines.append("")
    for name, s in rows:
        notes = [f"{k}: {v}" for k, v in (s.get("denominators") or {}).items()]
        if s.get("GGS_corpus") is not None:
            notes.append(f"corpus GGS {100 * s['GGS_corpus']:.1f}")
        failed = [str(f.get("task_id")) for f in s.get("env_failed_tasks") or []]
        notes.append(f"environment failures: {len(failed)}" + (f" (tasks {', '.join(failed)})" if failed else ""))
        lines.append(f"- {name}: " + "; ".join(notes))
    return "\n".join(lines) + "\n"


def gold_task_ids(gold: dict) -> list[int]:
    """The gold file's task ids as WebArena ids (integers), in numeric order."""
    bad = [t for t in gold if not str(t).isdigit()]
    if bad:
        raise SetupError(f"gold-guide task ids must be WebArena task ids (integers), got {bad[:3]}")
    return sorted(int(t) for t in gold)


@dataclass
class MagSearch(SearchConfig):
    """A ``python -m search.mag`` run."""

    out: str = field(default="runs/mag", metadata={"help": "output folder"})
    n: int = field(default=5, metadata={"min": 1, "help": "outputs per step (paper: 5)"})
    task_ids: list[int] | None = field(default=None, metadata={
        "nargs": "*", "help": "WebArena task ids (default: those of --gold-guides)"})
    max_steps: int = field(default=MAX_STEPS, metadata={"min": 1, "help": "steps per episode at most"})
    baseline: str | None = field(default=None, metadata={
        "help": "a baseline run's folder: table.md shows its row too"})
    demo: bool = field(default=False, metadata={
        "help": "run the built-in demo task (a small shop on 127.0.0.1, gold guides included) instead of "
                "WebArena: no sites needed"})
    grounding: str = field(default="som", metadata={
        "choices": ("som", "coord"), "help": "som: the policy names a menu id; coord: a pixel pair"})
    gold_guides: str | None = field(default=None, metadata={"help": "gold-guide JSONL (see search.mag.metrics)"})
    screenshot: str = field(default="auto", metadata={
        "choices": ("auto", "on", "off"),
        "help": "attach the screenshot to the policy prompt (auto: only for an endpoint policy)"})
    save_screenshots: bool = field(default=False, metadata={"help": "keep every marked screenshot"})
    policy_prompt_template: str | None = field(default=None, metadata={
        "metavar": "FILE",
        "help": "render the policy prompt from a YAML file (system, user; search.mag.agent.PolicyTemplate)"})
    diagnostics: bool = field(default=False, metadata={
        "help": "also score the policy teacher-forced on the gold steps (MAG App. D: SAA, GACS, Faith, Suff; "
                "search.mag.diagnostics): summary.json's diagnostics"})

    def check(self) -> None:
        super().check()
        if self.diagnostics and not (self.demo or self.gold_guides):
            raise ValueError("--diagnostics needs gold steps with actions: --gold-guides FILE (or --demo)")
        if self.policy_prompt_template:
            PolicyTemplate.load(self.policy_prompt_template)       # ValueError on a bad template


def gold_guides(config: MagSearch) -> dict | None:
    """The run's gold guides: ``--gold-guides``'s, over the demo's own with ``--demo``."""
    gold = load_gold_guides(config.gold_guides)
    if config.demo:
        from search.demo_site import GOLD_GUIDES

        return {**GOLD_GUIDES, **(gold or {})}          # a given file may add or replace the demo's
    return gold


def tasks(config: MagSearch) -> list[dict]:
    """The WebArena tasks (``--task-ids``, else those of the gold file), after the preflight (or
    the demo task)."""
    gold = gold_guides(config)
    if config.demo:
        from search.demo_site import demo_config

        if config.task_ids:
            raise SetupError("--demo runs the demo task only; drop --task-ids")
        return [demo_config()]
    configs = load_task_configs(config.task_ids or (gold_task_ids(gold) if gold else None))
    preflight(configs)
    return configs


def site_harnesses(config: MagSearch):
    return webarena_harness("browsergym.webarena.task.GenericWebArenaTask", "task_id", site_urls(),
                            **MAG_AGENT.harness_options)


def row(config: MagSearch, task: dict, episode, first_obs=None) -> dict:
    return episode_row(task["task_id"], site_key(task), task["intent"], episode, gold_guides(config))


def save_screenshot(config: MagSearch, task: dict, step, obs) -> None:
    """``--save-screenshots``: ``shots/<task_id>/<step>.png``, the marked page the step was decided on."""
    if config.save_screenshots:
        shots = Path(config.out) / "shots" / str(task["task_id"])
        shots.mkdir(parents=True, exist_ok=True)
        (shots / f"{step.step:02d}.png").write_bytes(obs.screenshot_png)


def summarize_mag(config: MagSearch, rows: list[dict], baseline: dict | None) -> dict:
    out = {**summarize_run(rows, gold_guides(config)), "grounding": config.grounding}
    if config.diagnostics:
        out["diagnostics"] = run_diagnostics(config)
    return out


def run_diagnostics(config: MagSearch) -> dict:
    """MAG App. D's teacher-forced diagnostics of the run's policy on every task with gold
    actions (``search.mag.diagnostics``): one greedy output per gold step (unless a temperature is
    given), the per-step scores in ``diagnostics/<task_id>.jsonl``, their means returned."""
    import contextlib

    from search.episodes import configure_harness, model_config
    from search.mag.diagnostics import gold_steps, load_gold_steps, summarize_steps, teacher_forced

    gold = load_gold_steps(config.gold_guides)
    if config.demo:
        from search.demo_site import GOLD_STEPS

        gold = {**{k: gold_steps({"steps": v}) for k, v in GOLD_STEPS.items()}, **gold}
    llm = model_config(config.policy, config.policy_llm, 0.0, MAG_AGENT.policy_llm)
    propose = MAG_AGENT.policy(config, llm)
    folder = Path(config.out) / "diagnostics"
    folder.mkdir(parents=True, exist_ok=True)
    scores, skipped, stopped, failed, ran = [], [], {}, {}, 0
    with contextlib.ExitStack() as stack:
        if config.demo:
            from search.demo_site import Shop, demo_harness

            make = demo_harness(stack.enter_context(Shop()), **MAG_AGENT.harness_options)
        else:
            make = site_harnesses(config)
        for task in tasks(config):
            tid = str(task["task_id"])
            if not gold.get(tid):
                skipped.append(tid)
                continue
            try:
                with make(task) as harness:
                    configure_harness(harness, config)
                    forced = teacher_forced(harness, propose, tid, gold[tid], config.grounding, config.seed)
            except Exception as e:          # an environment failure: the task is listed, not scored
                failed[tid] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                continue
            ran += 1
            scores += forced.steps
            if forced.stopped:
                stopped[tid] = forced.stopped
            (folder / f"{tid}.jsonl").write_text("".join(json.dumps(s, default=str) + "\n" for s in forced.steps))
    return {**summarize_steps(scores, ran, skipped), "stopped": stopped, "env_failures": failed}


def report(config: MagSearch, summary: dict, baseline: dict | None) -> None:
    """``table.md``: the run's Table-1 row, below the baseline's."""
    rows = [(run_name(summary), summary)]
    if baseline:
        rows.insert(0, (run_name(baseline), baseline))
    (Path(config.out) / "table.md").write_text(table(rows))
    print(table(rows), file=sys.stderr)
    if d := summary.get("diagnostics"):
        values = ", ".join(f"{k} {d[k]:.3f}" if d[k] is not None else f"{k} -"
                           for k in ("SAA", "GACS", "Faith", "Suff"))
        print(f"teacher-forced diagnostics (MAG App. D) over {d['n_steps']} gold steps of {d['n_tasks']} task(s): "
              f"{values}", file=sys.stderr)


MAG = Benchmark("search.mag", MagSearch, tasks, site_harnesses, agent=MAG_AGENT,
                resume_settings=RESUME_SETTINGS + ("grounding", "screenshot", "policy_prompt_template"), row=row,
                on_step=save_screenshot, summarize=summarize_mag, report=report)


def run_name(summary: dict) -> str:
    """A run's row name in table.md: 'policy + prm' ('no PRM' for the baseline)."""
    prm = summary.get("prm")
    return f"{summary.get('policy')} + {'no PRM' if str(prm).lower() == 'none' else prm}"


def build_parser():
    return search_parser(MAG, doc=__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_cli(MAG, argv, doc=__doc__)

"""The human false-negative audit of surfPRM §4.3: a seeded sample of pairs shown blind, one
answer each, and the figures the paper reports.

The sample is ``sample`` pairs drawn with ``random.Random(seed)`` from the dataset's pairs sorted
by id (a run's kept pairs, every row of a WebPRMBench file); each pair's two actions are shown in
an order set by a coin seeded by ``seed`` and the pair id, with no rule, label or verdict. The
annotator answers "Response 1 is better", "Response 2 is better", "both are valid" (the negative
is an equally good alternative) or "cannot tell".

Answers are kept in ``human-<NAME>.parquet`` (``HUMAN_SCHEMA``) under the run's ``audit/``
folder: one row per pair, rewritten whole on every answer (written to a temporary file, then
renamed over the old one, so a crash leaves the old file or the new one, never half of one).
One viewer writes a file: it holds an exclusive ``flock`` on ``.human-<NAME>.parquet.lock`` beside
it while it runs, and a second viewer on the same audit refuses to start (``AuditBusy``), since
each keeps its rows in memory and would rewrite the file without the other's answers. The kernel
drops the lock when the holder exits, however it ends.
An answer to a pair already answered replaces the earlier one, so a reload or a resubmitted
form changes nothing; a restarted audit continues with the first unanswered pair.

A *false negative* (the paper: "valid alternative actions mislabeled as inferior") is a pair
whose negative the annotator judged equally good ("both are valid") or better than the
demonstrated positive; its rate is over the pairs with an answer other than "cannot tell".
Beside it, ``false_negatives_of_sample`` is x of the whole sample, as §4.3 reports it ("30 of
100", "12 of 100"): every sampled pair is in the denominator, "cannot tell" and unanswered ones
counted as not false negatives.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import math
import os
import random
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.rundir import atomic_write_parquet
from dataset.stats import wilson as wilson_interval

# answer as given (display positions) -> its meaning is derived with the order shown
ANSWERS = {"1": "Response 1 is better", "2": "Response 2 is better",
           "both": "Both are valid (the negative is an equally good alternative)", "cannot_tell": "Cannot tell"}
CHOICES = ("pos", "neg", "both", "cannot_tell")     # the answer in the pair's own terms

HUMAN_SCHEMA = pa.schema([
    pa.field("annotator", pa.string(), nullable=False),
    pa.field("pair_id", pa.string(), nullable=False),
    pa.field("position", pa.int32(), nullable=False),       # index of the pair in the sample
    pa.field("sample_seed", pa.int64(), nullable=False),
    pa.field("sample_size", pa.int32(), nullable=False),
    pa.field("pos_shown", pa.int8(), nullable=False),       # 1 or 2: where the positive was shown
    pa.field("answer", pa.string(), nullable=False),        # a key of ANSWERS
    pa.field("choice", pa.string(), nullable=False),        # one of CHOICES
    pa.field("teacher_choice", pa.string()),                # 'pos' | 'neg' | null (no teacher verdict)
    pa.field("rule", pa.string(), nullable=False),
    pa.field("axis", pa.string(), nullable=False),
    pa.field("note", pa.string(), nullable=False),
    pa.field("answered_at", pa.timestamp("ms", tz="UTC"), nullable=False),   # Parquet has no seconds unit
])

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")     # fullmatch: `$` would also take a trailing newline


def answers_path(audit_dir: Path, name: str) -> Path:
    """``audit_dir/human-<name>.parquet``; a name that is not a plain file-name word is refused
    (it becomes part of a path)."""
    if not NAME.fullmatch(name):
        raise ValueError(f"annotator name {name!r}: letters, digits, '.', '_' or '-' (at most 64), "
                         "starting with a letter or digit")
    return audit_dir / f"human-{name}.parquet"


def draw_sample(pairs: list[dict], size: int, seed: int) -> list[dict]:
    """``size`` pairs (all when fewer) drawn with ``random.Random(seed)`` from ``pairs`` sorted by
    id, each with ``pos_shown``: the display position of its positive (seeded by the pair)."""
    pool = sorted((p for p in pairs if p["kept"]), key=lambda p: p["pair_id"])
    chosen = random.Random(seed).sample(pool, min(size, len(pool)))
    return [{**p, "pos_shown": 1 if random.Random(f"{seed}:{p['pair_id']}").random() < 0.5 else 2}
            for p in chosen]


def choice_of(answer: str, pos_shown: int) -> str:
    """An answer given by display position, in the pair's own terms."""
    if answer not in ANSWERS:
        raise ValueError(f"answer {answer!r}: one of {', '.join(ANSWERS)}")
    if answer in ("1", "2"):
        return "pos" if int(answer) == pos_shown else "neg"
    return answer


class AuditBusy(ValueError):
    """Another viewer holds the audit file (one line, exit 2 in the CLI)."""


def hold(path: Path):
    """An exclusive lock on ``path``'s audit, as an open lock file (closing it releases the lock);
    ``AuditBusy`` at once when another viewer holds it."""
    lock_path = path.with_name(f".{path.name}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:        # O_NOFOLLOW: a symlink planted in a shared run would have the viewer truncate its target
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise ValueError(f"cannot open the audit's lock file {lock_path}: {e.strerror}"
                         + (" (a symlink: remove it)" if lock_path.is_symlink() else "")) from None
    f = os.fdopen(fd, "r+", encoding="utf-8")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise AuditBusy(f"{path} is being answered in another viewer (pid {holder}): one viewer per --audit name; "
                        "stop that one, or answer as another name") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


@dataclass
class AuditLog:
    """One annotator's answers on one sample, kept in its Parquet file."""

    path: Path
    annotator: str
    sample: list[dict]
    seed: int

    def __post_init__(self):
        self._lock = threading.Lock()
        self._held = hold(self.path)        # before reading: no other viewer writes the file from here on
        self.rows: dict[str, dict] = {}
        try:
            self._read()
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        if self.path.exists():
            rows = pq.read_table(self.path, schema=HUMAN_SCHEMA).to_pylist()
            sample_ids = {p["pair_id"] for p in self.sample}
            for r in rows:
                if (r["sample_seed"] != self.seed or r["sample_size"] != len(self.sample)
                        or r["pair_id"] not in sample_ids):
                    raise ValueError(f"{self.path} holds answers to another sample (seed {r['sample_seed']}, "
                                     f"{r['sample_size']} pairs): use that --seed and --sample, "
                                     "or another --audit name")
                self.rows[r["pair_id"]] = r

    def close(self) -> None:
        """Release the audit file to another viewer (exiting does too)."""
        self._held.close()

    def next_position(self) -> int | None:
        """The first pair of the sample without an answer (None: all answered)."""
        return next((i for i, p in enumerate(self.sample) if p["pair_id"] not in self.rows), None)

    def answer(self, position: int, answer: str, note: str = "") -> dict:
        """Record (or replace) the answer to the pair at ``position`` and rewrite the file."""
        pair = self.sample[position]
        row = {"annotator": self.annotator, "pair_id": pair["pair_id"], "position": position, "sample_seed": self.seed,
               "sample_size": len(self.sample), "pos_shown": pair["pos_shown"], "answer": answer,
               "choice": choice_of(answer, pair["pos_shown"]), "teacher_choice": pair.get("teacher_choice"),
               "rule": pair.get("rule") or "", "axis": pair.get("axis") or "", "note": note.strip()[:2000],
               "answered_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0)}
        with self._lock:
            self.rows[pair["pair_id"]] = row
            ordered = sorted(self.rows.values(), key=lambda r: r["position"])
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_parquet(self.path, pa.Table.from_pylist(ordered, schema=HUMAN_SCHEMA))
        return row


# -- the figures --------------------------------------------------------------------------------

def wilson(k: int, n: int) -> dict:
    """k of n as a rate with its 95% Wilson interval (``dataset.stats.wilson``); None when n is 0."""
    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "low": None, "high": None}
    low, high = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": k / n, "low": low, "high": high}


def false_negatives(rows: list[dict]) -> dict:
    """The false-negative rate of answered pairs ("cannot tell" left out), with its interval."""
    judged = [r for r in rows if r["choice"] != "cannot_tell"]
    return wilson(sum(r["choice"] in ("both", "neg") for r in judged), len(judged))


def false_negatives_of_sample(rows: list[dict]) -> dict:
    """False negatives as x of the whole sample (§4.3's "12 of 100"): the denominator is the
    sample's size, answered or not, "cannot tell" included; ``cannot_tell`` and ``unanswered``
    say how far it lies from the rate of answered pairs."""
    size = max([len(rows)] + [r.get("sample_size") or 0 for r in rows])
    k = sum(r["choice"] in ("both", "neg") for r in rows)
    return {**wilson(k, size), "cannot_tell": sum(r["choice"] == "cannot_tell" for r in rows),
            "unanswered": size - len(rows)}


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's kappa of two annotators' labels of the same items: (p_o - p_e) / (1 - p_e), p_o the
    observed agreement, p_e the agreement expected from each one's label frequencies (Cohen 1960).
    None when it is undefined (no items, or both gave one and the same label throughout)."""
    n = len(a)
    if n == 0 or n != len(b):
        return None
    p_o = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[c] * cb[c] for c in ca) / (n * n)
    return None if math.isclose(p_e, 1.0) else (p_o - p_e) / (1 - p_e)


def annotator_summary(rows: list[dict], replay: dict[str, str | None] | None = None) -> dict:
    """One annotator's figures: answers, false negatives overall and by rule and axis, agreement
    with the demonstration label (the positive preferred) and with the teacher (where it gave a
    verdict), over the answers that prefer one action; with ``replay`` (pair id -> the run's
    ``replay_outcome``), also ``replay``: the agreement with the replay truth (``replay_agreement``)."""
    decisive = [r for r in rows if r["choice"] in ("pos", "neg")]
    with_teacher = [r for r in decisive if r["teacher_choice"] in ("pos", "neg")]
    out = {"answered": len(rows), "choices": {c: sum(r["choice"] == c for r in rows) for c in CHOICES},
           "false_negatives": false_negatives(rows), "false_negatives_of_sample": false_negatives_of_sample(rows),
           "agree_label": wilson(sum(r["choice"] == "pos" for r in decisive), len(decisive)),
           "agree_teacher": wilson(sum(r["choice"] == r["teacher_choice"] for r in with_teacher), len(with_teacher))}
    for key in ("rule", "axis"):
        groups: dict[str, list[dict]] = {}
        for r in rows:
            groups.setdefault(r[key] or "(none)", []).append(r)
        out[f"by_{key}"] = {k: false_negatives(v) for k, v in sorted(groups.items())}
    if replay:
        out["replay"] = replay_agreement(rows, replay)
    return out


# the replay outcomes that are a truth about the pair (``replay_mismatch`` is none: the replay did
# not reach O_t); ``equivalent`` says the negative is as good, the others that the positive is better
REPLAY_TRUTH = ("equivalent", "harmful", "detour", "not_executable")


def replay_agreement(rows: list[dict], replay: dict[str, str | None]) -> dict | None:
    """The annotator against the replay truth (``teacher.verify --verifier replay``) of the pairs
    that have one, "cannot tell" left out: agreement (an ``equivalent`` pair answered "both are
    valid", any other outcome answered "the positive is better"), the share of "both are valid"
    answers among ``equivalent`` pairs and among the others, and the false-negative rate per
    outcome. None when no answered pair has a replay truth. The sample is of kept pairs, and
    replay discards ``equivalent`` ones, so on a replay-verified run that group is usually empty."""
    judged = [{**r, "replay": replay[r["pair_id"]]} for r in rows
              if replay.get(r["pair_id"]) in REPLAY_TRUTH and r["choice"] != "cannot_tell"]
    if not judged:
        return None
    equivalent = [r for r in judged if r["replay"] == "equivalent"]
    others = [r for r in judged if r["replay"] != "equivalent"]
    return {"agree": wilson(sum(r["choice"] == ("both" if r["replay"] == "equivalent" else "pos") for r in judged),
                            len(judged)),
            "both_if_equivalent": wilson(sum(r["choice"] == "both" for r in equivalent), len(equivalent)),
            "both_if_not": wilson(sum(r["choice"] == "both" for r in others), len(others)),
            "by_outcome": {o: false_negatives([r for r in judged if r["replay"] == o])
                           for o in REPLAY_TRUTH if any(r["replay"] == o for r in judged)}}


def read_answers(audit_dir: Path) -> dict[str, list[dict]]:
    """annotator -> answers, from every ``human-*.parquet`` in ``audit_dir``."""
    out = {}
    for path in sorted(audit_dir.glob("human-*.parquet")):
        rows = pq.read_table(path, schema=HUMAN_SCHEMA).to_pylist()
        if rows:
            out[rows[0]["annotator"]] = rows
    return out


def summarize(audit_dir: Path, replay: dict[str, str | None] | None = None) -> dict:
    """Every annotator's figures, and Cohen's kappa (on the four choices) of each two annotators
    over the pairs both answered. ``replay`` maps pair ids to the run's replay outcomes; it is
    read from the run at summary time rather than stored with the answers, so an audit made
    before the run was replay-verified is compared too."""
    answers = read_answers(audit_dir)
    names = sorted(answers)
    kappas = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ca = {r["pair_id"]: r["choice"] for r in answers[a]}
            cb = {r["pair_id"]: r["choice"] for r in answers[b]}
            common = sorted(set(ca) & set(cb))
            kappas.append({"annotators": [a, b], "pairs": len(common),
                           "kappa": cohen_kappa([ca[p] for p in common], [cb[p] for p in common])})
    return {"annotators": {n: annotator_summary(answers[n], replay) for n in names}, "kappa": kappas}


def _rate(w: dict) -> str:
    if w["rate"] is None:
        return "n/a (0 pairs)"
    return f"{100 * w['rate']:.1f}% ({w['k']}/{w['n']}; 95% Wilson {100 * w['low']:.1f}-{100 * w['high']:.1f}%)"


def _of_sample(w: dict) -> str:
    return (f"  false negatives of the whole sample (§4.3's x of 100): {w['k']} of {w['n']} "
            f"({w['cannot_tell']} cannot tell, {w['unanswered']} unanswered)")


def format_summary(summary: dict) -> str:
    """The summary as plain text lines."""
    if not summary["annotators"]:
        return "no answers yet (start one with --audit NAME)"
    lines = []
    for name, s in summary["annotators"].items():
        lines += [f"annotator {name}: {s['answered']} answers "
                  f"({', '.join(f'{c} {n}' for c, n in s['choices'].items())})",
                  f"  false negatives: {_rate(s['false_negatives'])} of the answered pairs ('cannot tell' left out)",
                  _of_sample(s["false_negatives_of_sample"])]
        for key in ("rule", "axis"):
            for k, w in s[f"by_{key}"].items():
                lines.append(f"    {key} {k}: {_rate(w)}")
        lines += [f"  agreement with the demonstration label: {_rate(s['agree_label'])}",
                  f"  agreement with the teacher: {_rate(s['agree_teacher'])}"]
        if r := s.get("replay"):
            lines += [f"  agreement with the replay truth: {_rate(r['agree'])}",
                      f"    'both are valid' among replay-equivalent pairs: {_rate(r['both_if_equivalent'])}",
                      f"    'both are valid' among the other replayed pairs: {_rate(r['both_if_not'])}"]
            lines += [f"    false negatives, replay {o}: {_rate(w)}" for o, w in r["by_outcome"].items()]
    for k in summary["kappa"]:
        value = "undefined" if k["kappa"] is None else f"{k['kappa']:.3f}"
        lines.append(f"Cohen's kappa {k['annotators'][0]} vs {k['annotators'][1]}: {value} over {k['pairs']} pairs")
    return "\n".join(lines)

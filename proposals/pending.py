"""The records grounding hands on: :class:`Pending`, a grounded negative that still waits for its
value or its last checks, and :class:`Tally`, what grounding counted (``proposals.grounding``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from data.rundir import Reject
from proposals.config import STAGE
from proposals.rules import Proposal


@dataclass(slots=True)
class Pending:
    """A grounded negative that still needs its value (fill) or its final checks."""

    row: dict                 # trajectory row of the step
    ctx_pos: str              # canonical positive action
    pos_op: str
    pos_kind: str
    pos_bid: str | None
    pos_node: str
    rule: str
    proposal: Proposal
    op: str
    value: object = None
    value_source: str | None = None
    prompt: list | None = None       # fill prompt when the value comes from the LLM
    numeric: bool = False            # the field takes a number (a spinbutton)
    current: list = field(default_factory=list)    # what the field holds (the value must differ)
    positive_value: str | None = None
    also_fired: list = field(default_factory=list)
    infra: str | None = None         # the LLM layer's infrastructure error, when no answer came
    fill_error: str | None = None    # why the last answer was refused (``valid_fill``)
    spare: Tally | None = None       # a replacement for a failed fill: the counts of drawing it, added if used


@dataclass
class Tally:
    """What grounding counted; a replacement for a failed fill carries its own until it is used."""

    drops: Counter = field(default_factory=Counter)
    rejects: list[Reject] = field(default_factory=list)
    proposed: int = 0
    rule_in: Counter = field(default_factory=Counter)      # candidates each rule put forward (grounded or not)
    rule_drops: Counter = field(default_factory=Counter)   # (rule, reason) -> candidates removed
    op_sources: Counter = field(default_factory=Counter)   # where grounded negatives' ops came from
    fired: list[tuple[Pending, str]] | None = None         # deferred: (kept negative, rule that drew it again)

    def look(self, rule: str) -> None:
        self.proposed += 1
        self.rule_in[rule] += 1

    def drop(self, reason: str, row: dict, detail: str, rule: str | None = None) -> None:
        self.drops[reason] += 1
        key = {"traj_id": row["traj_id"], "step_idx": row["step_idx"]}
        if rule:
            key["rule"] = rule
            self.rule_drops[(rule, reason)] += 1
        self.rejects.append(Reject(STAGE, reason, row.get("source_path") or row["traj_id"], detail, key))

    def also_fired(self, kept: Pending, rule: str) -> None:
        """``rule`` drew a negative already kept: recorded on it now, or when this tally is added."""
        if self.fired is None:
            kept.also_fired.append(rule)
        else:
            self.fired.append((kept, rule))

    def add(self, other: Tally) -> None:
        self.drops.update(other.drops)
        self.rejects += other.rejects
        self.proposed += other.proposed
        self.rule_in.update(other.rule_in)
        self.rule_drops.update(other.rule_drops)
        self.op_sources.update(other.op_sources)
        for kept, rule in other.fired or ():
            self.also_fired(kept, rule)

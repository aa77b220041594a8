"""The judged state ``s_t``: the record a pairwise judgment is asked about (``RunDir.states`` reads
it from ``trajectories.parquet``; ``judgment.format.render_pair`` renders it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class State:
    """What the judge sees of ``s_t = (I, O_t, H_t, u_t)``: the intent, the AXTree text, the
    actions taken before this step (oldest first), the current URL and the task's start URL."""

    intent: str
    axtree: str
    url: str
    start_url: str = ""
    history: list[str] = field(default_factory=list)


"""No silent zeros: one line saying where a stage's records went when its output is empty or much
smaller than its input, the loss broken down by reason (most first). Every stage that can lose
records prints it after its summary (ingest, graph.build, proposals.mine, teacher.verify,
dataset.export, the search CLIs).

    >>> loss_line("graph.build", 7, 0, {"unsuccessful_trajectory": 7}, "steps")
    'graph.build: 0 of 7 steps kept; lost 7: 7 unsuccessful_trajectory'
    >>> loss_line("proposals.mine", 7, 0, {"virtual_positive": 7}, "steps", "candidates",
    ...           why={"virtual_positive": "a go_back()"})
    'proposals.mine: 0 candidates from 7 steps; lost 7: 7 virtual_positive (a go_back())'
"""

from __future__ import annotations

from collections.abc import Mapping

SMALL = 0.5          # an output under half its input is "much smaller" than it


def loss_line(stage: str, n_in: int, n_out: int, reasons: Mapping[str, int], unit: str = "records",
              out_unit: str | None = None, why: Mapping[str, str] | None = None, small: float = SMALL) -> str | None:
    """The line (None when the output is at least ``small`` of a non-empty input). ``unit``: what
    came in; ``out_unit``: what came out when it is another kind of record (``4 candidates from 7
    steps``: then the reasons count the inputs that gave nothing); ``why``: a few words after a
    reason's name."""
    if n_in and n_out >= small * n_in:
        return None
    if not n_in:
        return f"{stage}: 0 {out_unit or unit}: its input holds no {unit}"
    counted = sorted(((n, reason) for reason, n in reasons.items() if n), key=lambda t: (-t[0], t[1]))
    parts = [f"{n} {reason}" + (f" ({why[reason]})" if why and reason in why else "") for n, reason in counted]
    if out_unit is not None:
        lost, kept = sum(n for n, _ in counted), f"{n_out} {out_unit} from {n_in} {unit}"
    else:
        lost, kept = n_in - n_out, f"{n_out} of {n_in} {unit} kept"
        if (rest := lost - sum(n for n, _ in counted)) > 0:
            parts.append(f"{rest} without a recorded reason")
    return f"{stage}: {kept}; lost {lost}: {', '.join(parts) or 'no reason recorded'}"


def stage_loss_line(stats, unit: str = "records", why: Mapping[str, str] | None = None) -> str | None:
    """``loss_line`` of a ``data.rundir.StageStats`` (its stage, in, out and rejected counts)."""
    return loss_line(stats.stage, stats.n_in, stats.n_out, stats.rejected, unit, why=why)

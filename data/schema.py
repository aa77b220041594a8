"""The canonical step record and the pinned schema of ``trajectories.parquet``.

One row per observation. A trajectory is the rows of one ``traj_id`` ordered by ``step_idx``;
``action`` is what the demonstrator did on that observation (null on a run's final observation).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, fields
from itertools import accumulate

import pyarrow as pa


@dataclass(slots=True)
class StepRecord:
    source: str            # 'agentlab' | 'webprm'
    site: str              # per observation: a trajectory may cross sites
    task_id: str
    traj_id: str
    step_idx: int
    intent: str
    url: str
    observation: str       # AXTree text
    obs_format: str        # 'indented' (BrowserGym flatten_axtree_to_str) | 'flat' (WebPRM)
    html: str | None       # DOM with bid attributes where the source has it
    action: str | None     # canonical BrowserGym action, null on the final observation
    action_error: str | None
    thought: str | None
    success: bool | None   # trajectory-level outcome
    source_path: str       # where the record came from (file, or file#row)
    meta: str              # JSON object of source-specific fields kept for provenance


TRAJECTORY_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("site", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("traj_id", pa.string(), nullable=False),
        pa.field("step_idx", pa.int32(), nullable=False),
        pa.field("intent", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("observation", pa.large_string(), nullable=False),
        pa.field("obs_format", pa.string(), nullable=False),
        pa.field("html", pa.large_string()),
        pa.field("action", pa.string()),
        pa.field("action_error", pa.string()),
        pa.field("thought", pa.string()),
        pa.field("success", pa.bool_()),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("meta", pa.string(), nullable=False),
    ]
)

assert [f.name for f in fields(StepRecord)] == TRAJECTORY_SCHEMA.names


# Rows are stored clustered by site in small row groups, so a per-site stage (graph building,
# mining) reads only its own row groups through a ``site`` filter instead of the whole file.
STORAGE_ORDER = [("site", "ascending"), ("traj_id", "ascending"), ("step_idx", "ascending")]
ROW_GROUP_SIZE = 256
# The columns whose min and max each row group records: those the readers filter by. A long text
# column's (a URL, an action error, meta) are of no use to a filter and made the file's metadata
# 8 KB a row group (3 MB, 7 MB in memory, at 10x the paper's pool: each reader holds it).
STATISTICS_COLUMNS = ["source", "site", "task_id", "traj_id", "step_idx", "obs_format", "success"]


_INT32_MAX = 2**31 - 1
_REQUIRED_STR = ("source", "site", "task_id", "traj_id", "intent", "url", "observation", "obs_format",
                 "source_path", "meta")
_OPTIONAL_STR = ("html", "action", "action_error", "thought")


def check_record(rec: StepRecord) -> tuple[str, str] | None:
    """(reason, detail) if a record cannot be stored as it is, else None.

    Readers build records from untrusted files; this is the last gate before the pinned schema,
    so a wrong type or an out-of-range index becomes a counted reject, never a failed write."""
    for name in _REQUIRED_STR:
        if not isinstance(getattr(rec, name), str):
            return "bad_field_type", f"{name} is {type(getattr(rec, name)).__name__}, not str"
    for name in _OPTIONAL_STR:
        value = getattr(rec, name)
        if value is not None and not isinstance(value, str):
            return "bad_field_type", f"{name} is {type(value).__name__}, not str"
    for name in _REQUIRED_STR + _OPTIONAL_STR:
        value = getattr(rec, name)
        if value is not None and not _utf8(value):
            return "bad_encoding", f"{name} holds a lone surrogate (not encodable as UTF-8)"
    if rec.success is not None and not isinstance(rec.success, bool):
        return "bad_field_type", f"success is {type(rec.success).__name__}, not bool"
    if not isinstance(rec.step_idx, int) or isinstance(rec.step_idx, bool) or not 0 <= rec.step_idx <= _INT32_MAX:
        return "bad_step_index", f"step index {rec.step_idx!r} is not an int in [0, 2**31)"
    if not rec.intent.strip():
        return "missing_goal", "empty intent"
    if not rec.observation.strip():
        return "empty_observation", "empty observation"
    if rec.obs_format not in ("indented", "flat"):
        return "bad_field_type", f"obs_format {rec.obs_format!r}"
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def steps_to_table(records: list[StepRecord]) -> pa.Table:
    """Records -> table with the pinned schema (never inferred from the rows)."""
    cols = {name: [getattr(r, name) for r in records] for name in TRAJECTORY_SCHEMA.names}
    return pa.Table.from_pydict(cols, schema=TRAJECTORY_SCHEMA)


def for_storage(table: pa.Table) -> pa.Table:
    """The table in storage order (see ``STORAGE_ORDER``)."""
    return table.sort_by(STORAGE_ORDER)


# -- candidates.parquet (proposals.mine), shared by every later stage --------------------------
RULES = ("structurally_near", "textually_near_graph_distant", "repeat_past", "act_too_early",
         "away_from_goal", "create_a_cycle")
AXIS_OF = {"structurally_near": "spatial", "textually_near_graph_distant": "spatial",
           "repeat_past": "temporal", "act_too_early": "temporal",
           "away_from_goal": "spatiotemporal", "create_a_cycle": "spatiotemporal"}
AXES = ("spatial", "temporal", "spatiotemporal")

CANDIDATE_SCHEMA = pa.schema([
    pa.field("pair_id", pa.string(), nullable=False),
    pa.field("site", pa.string(), nullable=False),
    pa.field("traj_id", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("step_idx", pa.int32(), nullable=False),
    pa.field("rule", pa.string(), nullable=False),
    pa.field("axis", pa.string(), nullable=False),
    pa.field("action_pos", pa.string(), nullable=False),
    pa.field("action_neg", pa.string(), nullable=False),
    pa.field("gmcp", pa.bool_(), nullable=False),          # both targets real elements of O_t, same op
    pa.field("sampled", pa.bool_(), nullable=False),       # in the seeded sample the teacher verifies
    pa.field("pos_kind", pa.string(), nullable=False),     # 'element' | 'virtual'
    pa.field("pos_bid", pa.string()),
    pa.field("pos_node", pa.string(), nullable=False),
    pa.field("neg_bid", pa.string(), nullable=False),
    pa.field("neg_node", pa.string(), nullable=False),
    pa.field("op_pos", pa.string(), nullable=False),
    pa.field("op_neg", pa.string(), nullable=False),
    pa.field("value_source", pa.string()),                 # demonstrated | trajectory | option | llm | action
    pa.field("evidence", pa.string(), nullable=False),     # JSON: why the rule fired (parameters, graph facts)
    pa.field("mode", pa.string(), nullable=False),         # 'graph' | 'no_graph'
    # Every rule that drew this negative at its step, ``rule`` (the one that kept it) first; null in
    # pools written before the column existed.
    pa.field("rules", pa.list_(pa.string())),
])


def int32_array(values) -> pa.Array:
    """int32 values as an Arrow array, through a buffer: ``pa.array`` (and ``Table.take`` or
    ``pc.is_in`` given a Python list, which call it) imports pandas, ~0.35 s and ~30 MB a process."""
    buf = array("i", values)
    return pa.Array.from_buffers(pa.int32(), len(buf), [None, pa.py_buffer(buf)])


def str_array(values: list[str]) -> pa.Array:
    """Python strings as an Arrow string array, through buffers (not ``pa.array``: see :func:`int32_array`)."""
    data = [v.encode() for v in values]
    offsets = array("i", [0])
    offsets.extend(accumulate(map(len, data)))
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])

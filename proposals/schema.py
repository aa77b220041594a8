"""Pinned schema of ``candidates.parquet``: the full pool of grounded negatives."""

from __future__ import annotations

import pyarrow as pa

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
])

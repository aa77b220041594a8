"""Pinned schemas of ``preferences.parquet`` (verified pairs with gold judgments) and
``discarded.parquet`` (pairs no attempt agreed on, with every verdict)."""

from __future__ import annotations

import pyarrow as pa

from data.schema import CANDIDATE_SCHEMA

MESSAGE = pa.struct([pa.field("role", pa.string(), nullable=False),
                     pa.field("content", pa.large_string(), nullable=False)])
# One teacher attempt: its seed, the response it preferred (null: no valid answer) and the outcome
# ('agree', 'disagree', 'truncated' (cut off at max_tokens before a valid answer) or 'unparsed')
# and what produced the verdict ('generate': a written judgment's answer tag; 'score': the likelier
# of the two answer tags under a local teacher, llm.scoring; 'score-both': the same, both orders;
# 'replay': the pair replayed in MiniWoB++, teacher.replay: verdict = the label for a kept pair,
# null with outcome 'equivalent' or 'replay_mismatch' for a discarded one).
VERDICT = pa.struct([pa.field("attempt", pa.int8(), nullable=False),
                     pa.field("seed", pa.int64(), nullable=False),
                     pa.field("verdict", pa.int8()),
                     pa.field("outcome", pa.string(), nullable=False),
                     pa.field("mode", pa.string(), nullable=False)])

# The candidate's own columns keep candidates.parquet's types (data.schema), in this order.
_PAIR_FIELDS = [
    *(CANDIDATE_SCHEMA.field(name) for name in ("pair_id", "site", "traj_id", "task_id", "step_idx", "rule",
                                                 "axis", "gmcp")),
    pa.field("label", pa.int8(), nullable=False),            # position of the positive: 1 or 2
    CANDIDATE_SCHEMA.field("action_pos"),
    CANDIDATE_SCHEMA.field("action_neg"),
    pa.field("response_1", pa.string(), nullable=False),
    pa.field("response_2", pa.string(), nullable=False),
    pa.field("attempts", pa.int8(), nullable=False),         # teacher calls spent on the pair
    pa.field("verdicts", pa.list_(VERDICT), nullable=False),
    pa.field("teacher_model", pa.string(), nullable=False),
    pa.field("intent", pa.string(), nullable=False),
    pa.field("url", pa.string(), nullable=False),
    pa.field("axtree_chars", pa.int32(), nullable=False),    # AXTree size before the budget
    pa.field("axtree_chars_cut", pa.int32(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),   # over every attempt of the pair
    pa.field("completion_tokens", pa.int64(), nullable=False),
    pa.field("cost_usd", pa.float64(), nullable=False),
    # --verifier replay (teacher.replay), null under the LLM teacher: 'equivalent', 'harmful',
    # 'detour', 'not_executable' or 'replay_mismatch', and its evidence as JSON (the two resulting
    # state hashes, rewards and done flags, the solver's steps after each action)
    pa.field("replay_outcome", pa.string()),
    pa.field("replay_evidence", pa.large_string()),
]

PREFERENCE_SCHEMA = pa.schema(_PAIR_FIELDS + [
    # the agreeing attempt's text (gold); under 'score' the bare answer tag (a label-only row)
    pa.field("judgment", pa.large_string(), nullable=False),
    pa.field("messages", pa.list_(MESSAGE), nullable=False),  # system, user, assistant (= judgment)
])

DISCARD_SCHEMA = pa.schema(_PAIR_FIELDS + [
    pa.field("reason", pa.string(), nullable=False),
    pa.field("texts", pa.list_(pa.large_string()), nullable=False),   # every attempt's answer
])

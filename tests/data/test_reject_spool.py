"""data.rundir.RejectSpool: a stage's rejects wait on disk in parts and come back as added."""

from __future__ import annotations

from data.rundir import Reject, RejectSpool


def test_parts_come_back_in_any_order_as_added():
    a = [Reject("graph.build", "action_failed", "run/a.pkl", "Element \u00e9 not found",
                {"traj_id": "t1", "step_idx": 3}),
         Reject("graph.build", "too_large", "run/a.pkl", "", {"traj_id": "t1", "step_idx": 4})]
    b = [Reject("graph.build", "action_failed", "run/b.pkl", "line\nbreak", {"traj_id": "t2", "step_idx": 0})]
    with RejectSpool() as spool:
        spool.add("site-b", b)
        spool.add("site-a", a)
        spool.add("site-c", [])
        assert list(spool.read("site-a")) == a
        assert list(spool.read("site-b")) == b
        assert list(spool.read("site-c")) == [] and list(spool.read("never")) == []
        assert [r for part in ("site-a", "site-b") for r in spool.read(part)] == a + b


def test_text_rejects_jsonl_can_hold_comes_back_and_a_part_is_added_once():
    """A lone surrogate (decoded from an escape) and a value JSON cannot hold come back as
    ``rejects.jsonl`` writes them (the text, ``str`` of the value); a part added twice is refused."""
    import pytest

    odd = Reject("graph.build", "too_large", "x", "name \ud800 cut", {"traj_id": "t", "step_idx": 3, "n": 2.5j})
    with RejectSpool() as spool:
        spool.add("s", [odd])
        (back,) = spool.read("s")
        assert back.detail == odd.detail and back.key == {"traj_id": "t", "step_idx": 3, "n": "2.5j"}
        with pytest.raises(ValueError, match="added twice"):
            spool.add("s", [])

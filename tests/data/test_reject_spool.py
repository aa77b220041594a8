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

"""data.memory: work in fresh processes (issue 42)."""

import os

import pytest

from data.memory import fresh_processes, fresh_python


def _pid_of(x):
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x, os.getpid()


def test_each_task_in_fresh_processes_runs_in_its_own_process():
    with fresh_processes(["data.memory"]) as imap:
        got = list(imap(_pid_of, range(6), 2))
    assert [x for x, _ in got] == list(range(6))          # in the tasks' order
    pids = [p for _, p in got]
    assert len(set(pids)) == 6 and os.getpid() not in pids


def test_a_failing_task_raises_in_the_caller():
    with fresh_processes(["data.memory"]) as imap, pytest.raises(ValueError, match="negative: -1"):
        list(imap(_pid_of, [1, -1, 2], 2))


def test_processes_that_run_any_number_of_tasks_are_still_not_the_caller():
    with fresh_processes(["data.memory"], tasks_per_process=None) as imap:
        pids = {p for _, p in imap(_pid_of, range(8), 2)}
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids


def test_fresh_python_returns_the_output_and_reports_a_failure():
    assert fresh_python("import sys, data.memory; print(sys.argv[1])", "hello", what="echo").strip() == "hello"
    with pytest.raises(RuntimeError, match=r"boom failed \(exit 1\): ZeroDivisionError"):
        fresh_python("1 / 0", what="boom")


def test_held_heap_freezes_and_restores_the_collector():
    """``held_heap``: what is alive on entry is frozen and the youngest generation is collected
    less often inside; both are as they were after it, even when the block raises."""
    import gc

    from data.memory import held_heap

    before = gc.get_threshold()
    keep = [object() for _ in range(100)]
    try:
        with held_heap(5_000):
            assert gc.get_freeze_count() >= len(keep)
            assert gc.get_threshold() == (5_000, *before[1:])
            raise KeyError("inside")
    except KeyError:
        pass
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_held_heap_inside_held_heap_leaves_the_outer_frozen():
    import gc

    from data.memory import held_heap

    before = gc.get_threshold()
    with held_heap(6_000):
        with held_heap(6_000):
            pass
        # still frozen (the count drops only as frozen objects die), and the outer threshold holds
        assert gc.get_freeze_count() > 1_000 and gc.get_threshold() == (6_000, *before[1:])
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before

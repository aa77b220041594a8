"""data.locks: the flock calls behind a run directory's stage locks."""

from data.locks import EXCLUSIVE, SHARED, held, holder, try_lock, unlock


def test_a_writer_excludes_everyone_and_says_who_it_is(tmp_path):
    path = tmp_path / ".locks" / "candidates.parquet.lock"
    writer = try_lock(path, EXCLUSIVE, "proposals.mine")
    assert writer is not None and holder(path).startswith("proposals.mine (pid ")
    assert try_lock(path, SHARED, "teacher.verify") is None          # does not wait
    assert try_lock(path, EXCLUSIVE, "proposals.mine") is None
    unlock(writer, EXCLUSIVE)
    assert holder(path) == "a stage reading it"                        # the name is erased on release


def test_readers_share_and_keep_a_writer_out(tmp_path):
    path = tmp_path / "x.lock"
    readers = [try_lock(path, SHARED, f"r{i}") for i in range(2)]
    assert all(readers) and try_lock(path, EXCLUSIVE, "w") is None
    for r in readers:
        unlock(r, SHARED)
    writer = try_lock(path, EXCLUSIVE, "w")
    assert writer is not None
    unlock(writer, EXCLUSIVE)


def test_held_waits_for_nobody_when_free_and_excludes_a_try(tmp_path):
    path = tmp_path / ".stats.lock"
    with held(path):
        assert try_lock(path, SHARED, "r") is None
    r = try_lock(path, SHARED, "r")
    assert r is not None
    unlock(r, SHARED)

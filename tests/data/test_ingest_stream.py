"""data.ingest streams (issue 42): records are sorted and spilled in bounded buffers and merged row
group by row group, and the result is the same bytes as sorting the whole pool at once."""

import json

import pyarrow.parquet as pq

import data.ingest as di
from conftest import BUNDLED
from data.schema import ROW_GROUP_SIZE, STATISTICS_COLUMNS, STORAGE_ORDER, TRAJECTORY_SCHEMA

SAMPLE = BUNDLED / "agentlab_workarena.parquet"


def test_spilled_merge_writes_the_bytes_of_one_sort(tmp_path, monkeypatch):
    whole = di.ingest("canonical", [SAMPLE], tmp_path / "whole", quiet=True)
    spills = []
    real = di.temp_beside

    def counted(path):
        spills.append(real(path))
        return spills[-1]

    monkeypatch.setattr(di, "temp_beside", counted)
    monkeypatch.setattr(di, "SPOOL_BYTES", 40_000)        # a few observations per spill
    monkeypatch.setattr(di, "MERGE_BATCH", 3)
    # The sample twice: the second copy of every step is a counted duplicate_step reject.
    split = di.ingest("canonical", [SAMPLE, SAMPLE], tmp_path / "split", quiet=True)
    assert len(spills) > 5                                 # the merge path, not one in-memory sort
    assert not any(p.exists() for p in spills)             # the spills are removed
    assert not list((tmp_path / "split").glob(".*.tmp"))
    a = (tmp_path / "whole" / "trajectories.parquet").read_bytes()
    b = (tmp_path / "split" / "trajectories.parquet").read_bytes()
    assert a == b
    assert split.n_out == whole.n_out == 84
    assert split.n_in == 168 and split.rejected == {"duplicate_step": 84}
    stats = json.loads((tmp_path / "split" / "stats.json").read_text())["ingest"]
    assert stats["in"] == stats["out"] + sum(stats["rejected"].values())
    table = pq.read_table(tmp_path / "split" / "trajectories.parquet")
    keys = list(zip(*(table[c].to_pylist() for c, _ in STORAGE_ORDER)))
    assert keys == sorted(keys) and len(set(keys)) == 84
    meta = pq.ParquetFile(tmp_path / "split" / "trajectories.parquet").metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)][:-1] == \
        [ROW_GROUP_SIZE] * (meta.num_row_groups - 1)
    # min and max only of the columns that readers filter by (the metadata stays small)
    group = meta.row_group(0)
    with_stats = {group.column(j).path_in_schema for j in range(meta.num_columns) if group.column(j).is_stats_set}
    assert with_stats == set(STATISTICS_COLUMNS)


def test_nothing_ingested_writes_an_empty_table(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    stats = di.ingest("canonical", [bad], tmp_path / "run", quiet=True)
    assert stats.n_out == 0 and stats.rejected == {"corrupt_file": 1}
    pq.write_table(TRAJECTORY_SCHEMA.empty_table(), tmp_path / "one_write.parquet", compression="zstd",
                   row_group_size=ROW_GROUP_SIZE)           # what one write of the sorted table gives
    assert (tmp_path / "run" / "trajectories.parquet").read_bytes() == (tmp_path / "one_write.parquet").read_bytes()

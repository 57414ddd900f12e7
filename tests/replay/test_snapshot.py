"""Shard snapshots on disk: a rewrite is swapped in whole, and a crash between its two renames still leaves a
readable snapshot; a folder without a manifest is refused."""

import numpy as np
import pytest

from replay_rl.replay.snapshot import read_snapshot, write_snapshot

SETTINGS = {"replay": {"type": "fifo"}, "shard_capacity": 8}


def test_rewrite_replaces_the_snapshot_whole(tmp_path):
    path = tmp_path / "shard_0"
    write_snapshot(path, {"x": np.arange(3)}, {"n": 3}, SETTINGS)
    write_snapshot(path, {"x": np.arange(5)}, {"n": 5}, SETTINGS)
    arrays, counters = read_snapshot(path, SETTINGS)
    assert arrays["x"].tolist() == list(range(5)) and counters == {"n": 5}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard_0"]  # no .partial or .old left behind


def test_a_crash_between_the_renames_reads_the_previous_snapshot(tmp_path):
    path = tmp_path / "shard_0"
    write_snapshot(path, {"x": np.arange(3)}, {"n": 3}, SETTINGS)
    path.rename(tmp_path / "shard_0.old")  # the state write_snapshot leaves if it dies after its first rename
    arrays, counters = read_snapshot(path, SETTINGS)
    assert counters == {"n": 3} and arrays["x"].tolist() == [0, 1, 2]


def test_a_folder_without_a_manifest_is_not_a_snapshot(tmp_path):
    (tmp_path / "shard_0").mkdir()
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        read_snapshot(tmp_path / "shard_0", SETTINGS)
    write_snapshot(tmp_path / "s", {"x": np.arange(2)}, {}, SETTINGS)
    with pytest.raises(ValueError, match="restore with the config it was taken with"):
        read_snapshot(tmp_path / "s", {"replay": {"type": "lifo_once"}, "shard_capacity": 8})

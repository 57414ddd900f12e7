"""A consume-once queue's audit: the keys each shard served, by consumer version, appended for the run's whole life
(across in-place restores and resumes). The last line of a version is the batch its step trained (a step sampled
again after a death serves a new batch); a key in two trained versions is a rollout trained twice. Plain files; no
Ray."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


class ServedLog:
    """RUN/replay_served/shard_i.keys: one line "version key key ..." per sample served; nothing where `path` is
    None (a buffer that replays keeps no audit: its keys repeat by design)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def append(self, consumer_version: int, keys: np.ndarray) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (" ".join(map(str, [consumer_version, *np.asarray(keys).tolist()])) + "\n").encode()
        # one write(2) on an O_APPEND file: a kill leaves the whole line or none (no fsync: the page cache outlives
        # a killed process)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def trained_batches(path: Path) -> dict[int, list[int]]:
    """{version: keys} of one shard's log, the last line of each version. A line cut off inside a number does not
    parse and is skipped; one cut between numbers reads as a short batch, which a count of the keys shows."""
    out: dict[int, list[int]] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            version, *keys = map(int, line.split())
        except ValueError:
            continue
        out[version] = keys
    return out


def trained_twice(paths: list[Path], versions: range) -> tuple[int, list[int]]:
    """(keys trained in `versions`, the keys among them trained at two versions) over the shards' logs (shards
    draw keys from disjoint strides, so their keys never collide)."""
    keys = [k for p in paths for v, ks in trained_batches(p).items() if v in versions for k in ks]
    values, counts = np.unique(np.array(keys, np.int64), return_counts=True)
    return len(keys), values[counts > 1].tolist()

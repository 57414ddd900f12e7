"""A shard's live state on disk, for restoring it in place: its newest snapshot, how often it was restored, and (a
consume-once queue) the keys it served since that snapshot. Plain files; no Ray."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from replay_rl.replay.snapshot import previous, readable_snapshot, write_snapshot
from replay_rl.rollout import RolloutBatch


class LiveSnapshots:
    """RUN/replay_live/shard_i, replaced every k learner steps, when the shard starts from a checkpoint (a restart
    before the next multiple of k would otherwise find none, or the old run's) and, before its first sample, at
    inserts that double its fill or first give it a rank's batch (due_on_insert); shard_i.restarts counts
    its restores; shard_i.consumed lists the keys a consume-once queue served since the snapshot, which a restore
    drops (else it brings back batches already trained on)."""

    def __init__(self, every: int | None, path: Path, consumes_once: bool = False, batch: int = 1) -> None:
        """batch: the items its rank samples a step (a restored shard holding that many can serve it)."""
        self.every, self.path, self.batch = every, Path(path), batch
        self._early = 0  # items held at the last snapshot due_on_insert asked for
        self._restarts_file = self.path.with_name(self.path.name + ".restarts")
        self._consumed_file = self.path.with_name(self.path.name + ".consumed")
        self.journal = bool(every) and consumes_once
        self._last: int | None = None

    def due(self, consumer_version: int) -> bool:
        """Every k-th learner version, and the first this shard serves (a restart in place writes one at once)."""
        first_or_kth = self._last is None or consumer_version % self.every == 0 if self.every else False
        return first_or_kth and consumer_version != self._last

    def due_on_insert(self, size: int) -> bool:
        """Until this shard's first snapshot at a sample (or a restore), an insert that leaves it holding `size`
        items is snapshotted when that doubles the size at the last such snapshot, or first reaches a rank's batch:
        a restart then finds at least half of what it held, and a whole batch once it held one (rollouts it loses
        are made once; a batch short of them waits, which the stall watchdog sends to run.max_restarts). A write
        at every insert rewrote the whole shard each time, under its lock: bytes quadratic in the fill."""
        grown = size >= 2 * self._early or self._early < self.batch <= size
        if not self.every or self._last is not None or not grown:
            return False
        self._early = size
        return True

    def write(self, consumer_version: int | None, arrays, counters, settings) -> None:
        if not self.every:
            return
        write_snapshot(self.path, arrays, counters, settings)
        # after the swap: a kill between the two leaves keys the new snapshot no longer holds, dropped as no-ops
        self._consumed_file.unlink(missing_ok=True)
        self._last = consumer_version

    def served(self, keys: np.ndarray) -> None:
        """Record a consume-once sample's keys before the batch leaves: a restore then never serves them again (a
        kill after this line and before the reply loses that batch; it is never trained twice)."""
        if self.journal:
            with self._consumed_file.open("a") as f:  # appended, no fsync: a killed process's writes survive it
                f.write(" ".join(map(str, np.asarray(keys).tolist())) + "\n")

    def consumed(self) -> np.ndarray:
        if not self._consumed_file.is_file():
            return np.zeros(0, np.int64)
        return np.array(self._consumed_file.read_text().split(), np.int64)

    def exists(self) -> bool:
        return readable_snapshot(self.path) is not None

    def count_restart(self) -> int:
        n = int(self._restarts_file.read_text()) + 1 if self._restarts_file.is_file() else 1
        self._restarts_file.parent.mkdir(parents=True, exist_ok=True)
        self._restarts_file.write_text(str(n))
        return n

    def clear(self) -> None:
        for p in (self.path, previous(self.path), self._restarts_file, self._consumed_file):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def drop_keys(arrays: dict[str, np.ndarray], counters: dict, keys: np.ndarray) -> tuple[dict, dict]:
    """A snapshot's (arrays, counters) (Table.state) without the items whose key is in `keys`, counted as
    consumed: what the queue held once those were served."""
    keep = ~np.isin(arrays["meta.keys"], keys)
    if keep.all():
        return arrays, counters
    rows = np.flatnonzero(keep)
    batch = RolloutBatch(**{k.removeprefix("batch."): v for k, v in arrays.items() if k.startswith("batch.")})
    out = {f"batch.{k}": v for k, v in batch.take(rows).arrays().items()}
    out |= {k: v[rows] for k, v in arrays.items() if k.startswith("meta.")}
    stats = {**counters["stats"], "evictions": {**counters["stats"]["evictions"]}}
    stats["evictions"]["consumed"] = stats["evictions"].get("consumed", 0) + int((~keep).sum())
    fresh_from = int(keep[:counters.get("fresh_from", 0)].sum())  # the same boundary among the items kept
    return out, {**counters, "stats": stats, "fresh_from": fresh_from}

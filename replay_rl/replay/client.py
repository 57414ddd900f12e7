"""ReplayClient: what generators use to insert and learners use to sample. Routes each rollout to exactly one
shard, as the caller deals it or round-robin; inserts are non-blocking with a bounded in-flight window. ShardDraws:
a learner rank's batches from its own shard, the next one asked for ahead of its step."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import ray

from replay_rl.replay.shard import ReplayShard, shard_dir
from replay_rl.replay.shard_spec import ShardSpec
from replay_rl.replay.table_stats import SampleInfo, TableStats
from replay_rl.rollout import RolloutBatch


def create_shards(spec: ShardSpec, scheduling_strategy=None) -> list:
    """One shard per learner rank. With live snapshots, Ray restarts a shard that dies (it restores itself) and
    replays the calls that were in flight to it, so generators and learners keep their handles and go on.
    scheduling_strategy: where Ray places them (launch.build: the driver's node)."""
    restarts = spec.restarts
    return [ReplayShard.options(max_restarts=restarts, max_task_retries=-1 if restarts else 0,
                                scheduling_strategy=scheduling_strategy).remote(spec, i, None)
            for i in range(spec.shards)]


class ReplayClient:
    def __init__(self, shards: list, max_in_flight: int = 8) -> None:
        self.shards = shards
        self.max_in_flight = max_in_flight
        self._pending: list = []
        self._next = 0  # shard that receives the next rollout
        # the driver's view of each shard, to count what a restart lost: inserts last seen, restarts seen
        self._seen = [(0, 0)] * len(shards)
        self._lost = 0
        self._kills = [0] * len(shards)  # the driver's own restarts of each shard (kill)
        self._restored: list[tuple[int, int, int]] = []  # (shard, its restarts, rollouts lost): deaths Ray recovered

    def insert(self, batch: RolloutBatch, owner: np.ndarray | None = None, call: int | None = None) -> None:
        """Queue `batch` for insertion; blocks only when max_in_flight inserts are outstanding (backpressure).
        owner: each row's shard (a generator's call passes limits.route, the deal the pace owes shards by);
        None: this client's own round-robin. call: the generator's call_number, which a restored shard counts by."""
        n, t = len(batch), len(self.shards)
        if owner is None:
            owner = (self._next + np.arange(n)) % t
            self._next = int((self._next + n) % t)
        elif len(owner) != n:  # a backend that returned more or fewer completions than a call makes
            raise ValueError(f"insert: {len(owner)} shards dealt for a batch of {n} rollouts")
        for s in range(t):
            rows = np.flatnonzero(owner == s)
            if len(rows):
                self._pending.append(self.shards[s].insert.remote(batch.take(rows), call))
        if len(self._pending) > self.max_in_flight:
            done, self._pending = ray.wait(self._pending, num_returns=len(self._pending) - self.max_in_flight)
            ray.get(done)  # re-raise a failed insert here instead of losing rollouts silently

    def flush(self) -> None:
        ray.get(self._pending)
        self._pending = []

    def sample(self, rank: int, n: int, consumer_version: int) -> tuple[RolloutBatch, SampleInfo]:
        return ray.get(self.shards[rank].sample.remote(n, consumer_version))

    def shard_stats(self) -> list[TableStats]:
        return ray.get([s.stats.remote() for s in self.shards])

    def stats(self, parts: list[TableStats] | None = None) -> TableStats:
        """The sum over shards (of `parts`, the shards' answers, if given). A shard restored in place since the last
        call lost the inserts made after its snapshot: counted from the inserts last seen here (a lower bound:
        inserts after that read are missed)."""
        parts = self.shard_stats() if parts is None else parts
        for i, p in enumerate(parts):
            inserts, restarts = self._seen[i]
            if p.shard_restarts > restarts:
                lost = max(0, inserts - p.restored_inserts)
                self._lost += lost
                if p.shard_restarts > self._kills[i]:  # a death Ray recovered, not the driver's own kill
                    self._restored.append((i, p.shard_restarts, lost))
            self._seen[i] = (p.inserts, p.shard_restarts)
        merged = TableStats.merge(parts)
        merged.rollouts_lost = self._lost
        return merged

    def take_restored(self) -> list[tuple[int, int, int]]:
        """The shards Ray restored in place after a death since the last call, as stats() saw them: (shard, its
        restarts so far, the rollouts it lost, a lower bound). The driver's own kills are not among them."""
        out, self._restored = self._restored, []
        return out

    def restarts_seen(self, shard_id: int) -> int:
        """Restarts of the shard so far: those its stats reported, or the driver's own kills where more (a shard
        dead for good answers no stats, and its recovery must still run out of run.max_shard_restarts)."""
        return max(self._seen[shard_id][1], self._kills[shard_id])

    def kill(self, shard_id: int) -> None:
        """Kill a hung or dead shard for Ray to restart in place (it restores its live snapshot)."""
        ray.kill(self.shards[shard_id], no_restart=False)
        self._kills[shard_id] += 1

    def snapshot(self, root: str | Path) -> list[str]:
        return ray.get([s.snapshot.remote(str(shard_dir(root, i))) for i, s in enumerate(self.shards)])

    def restore(self, root: str | Path) -> list[int]:
        """Each shard's snapshot under root; returns the rollouts each had received (its inserts)."""
        return ray.get([s.restore.remote(str(shard_dir(root, i))) for i, s in enumerate(self.shards)])

    @property
    def lost(self) -> int:
        """Rollouts generated that no shard holds: lost to shard restarts (as counted so far by stats), and after a
        resume those of the stream before its resume point that the checkpoint's snapshot missed."""
        return self._lost

    def resume_stream(self, rollouts: int, lost: int) -> None:
        """After restoring a checkpoint: generators go on from rollout `rollouts` of the stream, and the rollouts
        before it that the shards do not hold (`lost`: lost earlier, or made after the snapshot) stay counted
        in K_inf without being made again."""
        self._lost = lost
        ray.get([s.resume_stream.remote(rollouts) for s in self.shards])


class ShardDraws:
    """A learner rank's batches from its own shard. `take` waits for the step's batch; `ahead` asks for the next
    step's batch at once, so that the shard serves it while the weights publish, off the step's critical path."""

    def __init__(self, shard, batch_size: int) -> None:
        self.shard, self.n = shard, batch_size
        self.pending: tuple[int, object] | None = None  # (consumer version, its sample call in flight)
        self.feedback: dict[str, float] = {}  # the rank's last step, sent with each sample call (reuse controller)

    def take(self, consumer_version: int) -> tuple[RolloutBatch, SampleInfo, float]:
        """The batch for `consumer_version` (the one asked ahead, or asked now), its sample info and the seconds
        this call waited for it."""
        t0 = time.perf_counter()
        pending, self.pending = self.pending, None
        if pending and pending[0] != consumer_version:  # its draw would be lost (consume-once) or a use counted
            raise RuntimeError(f"asked ahead for consumer version {pending[0]}, taken for {consumer_version}")
        batch, info = ray.get(pending[1] if pending else self.shard.sample.remote(self.n, consumer_version,
                                                                                   self.feedback))
        return batch, info, time.perf_counter() - t0

    def ahead(self, consumer_version: int) -> None:
        self.pending = (consumer_version, self.shard.sample.remote(self.n, consumer_version, self.feedback))

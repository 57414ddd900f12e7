"""ReplayShard: a Ray actor serving one Table (one per learner rank). Waits are bounded and say why they wait."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import ray

from replay_rl.config import RunConfig
from replay_rl.replay.snapshot import read_snapshot, write_snapshot
from replay_rl.replay.limits import Pace
from replay_rl.replay.table import SampleInfo, TableStats, table_from_config
from replay_rl.rollout import RolloutBatch


class ReplayTimeout(TimeoutError):
    """A sample or insert waited longer than replay.sample_timeout_s; the message says what it waited for."""


class ReplayShardImpl:
    """The shard's logic, as a plain class (the Ray actor below is this class under @ray.remote)."""

    def __init__(self, cfg: RunConfig, shard_id: int) -> None:
        self.shard_id, self.timeout_s = shard_id, cfg.replay.sample_timeout_s
        self._settings = {"replay": cfg.replay.model_dump(mode="json"), "shard_capacity": cfg.shard_capacity,
                          "shard_id": shard_id, "shards": cfg.cluster.learners}
        tolerance = cfg.rate_limit_tolerance  # derived once: exploring the limiter's states is not free
        self._make_table = lambda: table_from_config(
            cfg.replay, cfg.shard_capacity, seed=cfg.run.seed * 1000 + shard_id, key_offset=shard_id,
            key_stride=cfg.cluster.learners, pace=pace_for(cfg), tolerance=tolerance)
        self.table = self._make_table()
        self._cond: asyncio.Condition | None = None
        self.wait_s = {"insert": 0.0, "sample": 0.0}

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily, inside the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    async def _wait(self, what: str, ready, why) -> None:
        cond, t0 = self._condition(), time.perf_counter()
        try:
            await asyncio.wait_for(cond.wait_for(ready), self.timeout_s)
        except asyncio.TimeoutError:
            raise ReplayTimeout(f"replay shard {self.shard_id}: {what} waited {self.timeout_s:g}s: {why()}") from None
        finally:
            self.wait_s[what] += time.perf_counter() - t0

    async def insert(self, batch: RolloutBatch) -> int:
        cond = self._condition()
        async with cond:
            if not self.table.can_insert(len(batch)):
                await self._wait("insert", lambda: self.table.can_insert(len(batch)), self.table.limiter.why_blocked)
            self.table.insert(batch)
            cond.notify_all()
        return len(batch)

    async def sample(self, n: int, consumer_version: int) -> tuple[RolloutBatch, SampleInfo]:
        cond = self._condition()
        async with cond:
            if not self.table.can_sample(n, consumer_version):
                await self._wait("sample", lambda: self.table.can_sample(n, consumer_version),
                                 lambda: self.table.why_blocked(n, consumer_version))
            out = self.table.sample(n, consumer_version)
            cond.notify_all()  # a rate-limited insert may proceed now
        return out

    def stats(self) -> TableStats:
        return self.table.stats()

    def blocked_reason(self, n: int, consumer_version: int) -> str:
        """Why a sample of n for consumer_version would wait now ("ready" if not): the stall watchdog's probe."""
        if self.table.can_sample(n, consumer_version):
            return "ready"
        return self.table.why_blocked(n, consumer_version)

    def wait_seconds(self) -> dict[str, float]:
        return dict(self.wait_s)

    async def snapshot(self, path: str) -> str:
        async with self._condition():
            arrays, counters = self.table.state()
        return str(write_snapshot(Path(path), arrays, counters, self._settings))

    async def restore(self, path: str) -> int:
        arrays, counters = read_snapshot(path, self._settings)
        async with self._condition():
            self.table = self._make_table()
            self.table.load_state(arrays, counters)
            self._condition().notify_all()
        return len(self.table)


ReplayShard = ray.remote(num_cpus=0, max_restarts=0)(ReplayShardImpl)


def pace_for(cfg: RunConfig) -> Pace | None:
    """The emulated cluster's schedule, or None when generators run free (no cluster.emulate)."""
    e, ratio = cfg.cluster.emulate, cfg.target_replay_ratio
    if e is None or ratio is None:
        return None
    return Pace(cfg.learner.batch_size, ratio, e.lead_steps, cfg.consumes_once, cfg.replay.capacity)


def shard_dir(root: str | Path, shard_id: int) -> Path:
    return Path(root) / f"shard_{shard_id}"

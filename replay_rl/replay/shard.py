"""ReplayShard: a Ray actor serving one Table (one per learner rank). Waits are bounded and say why they wait."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import ray

from replay_rl.replay.live import LiveSnapshots, drop_keys
from replay_rl.replay.snapshot import read_snapshot, write_snapshot
from replay_rl.replay.reuse_window import ReuseWindow, with_window
from replay_rl.replay.served_log import ServedLog
from replay_rl.replay.shard_spec import ShardSpec
from replay_rl.replay.table import table_from_spec
from replay_rl.replay.table_stats import SampleInfo, TableStats
from replay_rl.rollout import RolloutBatch


SERVED, NOT_ASKED = "batch served", "batch not asked for"  # blocked_reason's answers once a rank sampled, or before


class ReplayTimeout(TimeoutError):
    """A sample or insert waited longer than replay.sample_timeout_s; the message says what it waited for."""


class ReplayShardImpl:
    """The shard's logic, as a plain class (the Ray actor below is this class under @ray.remote)."""

    def __init__(self, spec: ShardSpec, shard_id: int, reconstructed: bool | None = False) -> None:
        """reconstructed: Ray is restarting this shard after it died; it restores its newest live snapshot.
        None: ask Ray (the actor, which Ray restarts in place with the arguments it was created with)."""
        if reconstructed is None:
            reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
        self.shard_id, self.timeout_s = shard_id, spec.sample_timeout_s
        self._settings = {"replay": spec.replay_settings, "shard_capacity": spec.table.capacity,
                          "shard_id": shard_id, "shards": spec.shards}
        self.window = ReuseWindow(spec.window) if spec.window else None  # None: the adaptive reuse rules are off
        self._make_table = lambda: with_window(table_from_spec(
            spec.table, seed=spec.seed * 1000 + shard_id, key_offset=shard_id, key_stride=spec.shards), self.window)
        self.table = self._make_table()
        self._cond: asyncio.Condition | None = None
        self.wait_s = {"insert": 0.0, "sample": 0.0}
        self.live = LiveSnapshots(spec.snapshot_every_steps, shard_dir(spec.live_root, shard_id), spec.consumes_once,
                                  spec.rank_batch_size)
        self.served_log = ServedLog(spec.served_root and shard_dir(spec.served_root, shard_id).with_suffix(".keys"))
        self.restarts, self.restored_inserts, self._recovering = 0, 0, False
        # a consume-once queue restored in place lost inserts that are made once, and so did a buffer restored with
        # less than its rank's batch (a snapshot before its first sample: due_on_insert): until it serves a batch
        # again, a stall it holds is a death (health.hung_roles); otherwise a keep-all buffer's credit covers its loss
        self.consumes_once, self.batch, self.restored_waiting = spec.consumes_once, spec.rank_batch_size, False
        self.asked, self.served = -1, -1  # the consumer versions of the last sample asked for and served
        if reconstructed:
            self._recover()
        else:
            self.live.clear()  # a fresh run in an old folder must never restore that run's buffer

    def _recover(self) -> None:
        self.restarts = self.live.count_restart()
        if self.live.exists():
            arrays, counters = read_snapshot(self.live.path, self._settings)
            consumed = self.live.consumed()
            self.table.load_state(*drop_keys(arrays, counters, consumed))
            if len(consumed):  # the snapshot's key counter predates them: a new rollout must not take their keys
                self.table.skip_keys_past(int(consumed.max()))
        self.restored_inserts = self.table.stats().inserts
        self.table.limiter.restored()
        self._recovering = True  # the limiter learns the learner's version at the next sample
        self.restored_waiting = self.consumes_once or len(self.table) < self.batch

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

    async def insert(self, batch: RolloutBatch, call: int | None = None) -> int:
        """call: the backend call's number (limits.call_number), which a shard restored in place counts by."""
        cond = self._condition()
        async with cond:
            if not self.table.can_insert(len(batch)):
                await self._wait("insert", lambda: self.table.can_insert(len(batch)), self.table.limiter.why_blocked)
            self.table.insert(batch)
            self.table.limiter.inserted(call, len(batch))
            if self.live.due_on_insert(len(self.table)):
                self.live.write(None, *self.table.state(), self._settings)
            cond.notify_all()
        return len(batch)

    async def sample(self, n: int, consumer_version: int, feedback: dict[str, float] | None = None
                     ) -> tuple[RolloutBatch, SampleInfo]:
        """feedback: the learner rank's previous step (grad_norm, entropy), which the reuse controller reads; the
        returned SampleInfo.rules carries the rules' signals and actions for the rank to log."""
        cond, self.asked = self._condition(), consumer_version
        rules = self.window.observe(consumer_version, feedback or {}) if self.window else {}
        async with cond:
            if self._recovering:
                self.table.limiter.recover(consumer_version)
                self._recovering = False
            if not self.table.can_sample(n, consumer_version):
                await self._wait("sample", lambda: self.table.can_sample(n, consumer_version),
                                 lambda: self.table.why_blocked(n, consumer_version))
            if self.live.due(consumer_version):  # taken while n items are eligible: a restore can serve a batch
                self.live.write(consumer_version, *self.table.state(), self._settings)
            batch, info = self.table.sample(n, consumer_version)
            out = batch, replace(info, rules=rules)
            self.live.served(info.keys)
            self.served_log.append(consumer_version, info.keys)
            self.served, self.restored_waiting = consumer_version, False
            cond.notify_all()  # a rate-limited insert may proceed now
        return out

    def stats(self) -> TableStats:
        st = self.table.stats()
        st.shard_restarts, st.restored_inserts = self.restarts, self.restored_inserts
        st.restored_waiting = self.restored_waiting
        return st

    def blocked_reason(self, n: int, consumer_version: int) -> str:
        """Why a sample of n for consumer_version would wait now ("ready" if not), or whether this shard's rank
        already took that batch or has not asked for it yet: the stall watchdog's probe."""
        if self.served >= consumer_version:  # its rank took this batch (and, drawing ahead, perhaps the next)
            return SERVED
        if self.asked != consumer_version:
            return NOT_ASKED
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
            self.live.write(-1, arrays, counters, self._settings)  # a restart before the next multiple restores it
            self._condition().notify_all()
        return self.table.stats().inserts

    async def restored_calls(self, calls: list[int]) -> None:
        """The calls each generator had started once this shard was killed to restart in place (Supervisor.recover_shard):
        its credit for the rollouts the restart lost, in place of the pace's allowance (PacedLimiter.recover)."""
        async with self._condition():
            self.table.limiter.recover(None, calls)
            self._condition().notify_all()

    async def resume_stream(self, rollouts: int) -> None:
        """Generators go on from rollout `rollouts` of the stream (ReplayClient.resume_stream)."""
        async with self._condition():
            self.table.limiter.resume_stream(rollouts)
            self._condition().notify_all()


# restarts are set per run by create_shards (they need live snapshots to restore from); it passes
# reconstructed=None, so a restarted shard asks Ray and restores its live snapshot
ReplayShard = ray.remote(num_cpus=0)(ReplayShardImpl)


def shard_dir(root: str | Path, shard_id: int) -> Path:
    return Path(root) / f"shard_{shard_id}"

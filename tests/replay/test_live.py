"""Tier 0: a shard restored in place (ReplayShardImpl, no Ray) comes back with what it held, whenever it dies: a
consume-once queue never serves a consumed batch again, and a restart before the first sample or right after a
resume is not empty. test_pace_check proves the restored shard's pace credit."""

import asyncio

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.replay.shard import ReplayShardImpl
from tests.replay.helpers import make_batch


def spec_for(tmp_path, *overrides):
    return shard_spec(RunConfig.load(None, ["cluster.learners=1", "learner.batch_size=4", "replay.capacity=16",
                                            "cluster.emulate=null", "replay.snapshot_every_steps=25",
                                            f"run.output_dir={tmp_path}", *overrides]))


def test_a_restored_consume_once_queue_never_serves_a_consumed_batch_again(tmp_path):
    spec = spec_for(tmp_path, "replay.type=lifo_once")

    async def scenario():
        shard = ReplayShardImpl(spec, 0)
        await shard.insert(make_batch(12))
        # version 0's sample snapshots 12 items, then serves 4 of them; version 1 serves 4 more (no snapshot)
        served = [(await shard.sample(4, v))[1].keys for v in (0, 1)]
        restored = ReplayShardImpl(spec, 0, reconstructed=True)   # Ray restarts it: it reads its live snapshot
        held = restored.table.state()[0]["meta.keys"]
        assert len(held) == 4 and not np.isin(held, served).any()  # the snapshot's 12, less the 8 served since
        served.append((await restored.sample(4, 2))[1].keys)
        again = ReplayShardImpl(spec, 0, reconstructed=True)     # a second restart: all 12 served, none back
        return np.concatenate(served), len(again.table), again.table.stats().evictions["consumed"]

    keys, left, consumed = asyncio.run(scenario())
    assert len(set(keys.tolist())) == 12 and left == 0 and consumed == 12


def test_a_shard_restarted_before_its_first_sample_or_after_a_resume_is_not_empty(tmp_path):
    spec = spec_for(tmp_path)

    async def scenario():
        shard = ReplayShardImpl(spec, 0)
        await shard.insert(make_batch(6))
        early = len(ReplayShardImpl(spec, 0, reconstructed=True).table)  # no sample yet: its inserts were kept
        checkpoint = await shard.snapshot(str(tmp_path / "ckpt"))
        resumed = ReplayShardImpl(spec, 0)               # a resumed run's fresh shard clears the old live state...
        await resumed.restore(checkpoint)               # ...and the restore writes it again, before any sample
        return early, len(ReplayShardImpl(spec, 0, reconstructed=True).table)

    assert asyncio.run(scenario()) == (6, 6)


def test_a_paced_shard_restored_in_place_counts_its_deal_of_the_calls_started(tmp_path):
    spec = shard_spec(RunConfig.load(None, [f"run.output_dir={tmp_path}"]))  # tiny_cpu: W = T = 2, 32 rollouts a call, paced

    async def scenario():
        shard = ReplayShardImpl(spec, 0)
        for call in range(4):  # calls 0..3 deal shard 0 16 rollouts each: its 64 owed by version 0
            await shard.insert(make_batch(16), call)
        await shard.sample(64, 0)  # the live snapshot: 64 inserts
        for call in (4, 5):  # lost with the shard
            await shard.insert(make_batch(16), call)
        back = ReplayShardImpl(spec, 0, reconstructed=True)
        await back.restored_calls([3, 3])  # the driver: generator 0 made calls 0, 2, 4; generator 1 1, 3, 5
        counted = [back.table.limiter.inserts]
        await back.insert(make_batch(16), 5)  # call 5's piece, resent to the restart: in the credit already
        await back.insert(make_batch(16), 6)
        return counted + [back.table.limiter.inserts]

    assert asyncio.run(scenario()) == [96, 112]


def test_before_the_first_sample_a_shard_snapshots_when_its_fill_doubles_or_first_makes_a_batch(tmp_path):
    from replay_rl.replay.live import LiveSnapshots

    live = LiveSnapshots(25, tmp_path / "shard_0", batch=48)
    # 8 writes of 1..96 items, where every insert wrote the whole shard (100 writes, 5050 items)
    assert [size for size in range(1, 101) if live.due_on_insert(size)] == [1, 2, 4, 8, 16, 32, 48, 96]
    spec = spec_for(tmp_path)  # a rank's batch of 4

    async def scenario(inserts):
        shard = ReplayShardImpl(spec, 0)
        for _ in range(inserts):
            await shard.insert(make_batch(1))
        back = ReplayShardImpl(spec, 0, reconstructed=True)
        return len(back.table), back.stats().restored_waiting

    # 7 held: the snapshot at 4 (a batch) is kept; 3 held: the one at 2, short of a batch, so a stall it holds
    # before it serves one is a death (health.hung_roles), not the pace's rule
    assert asyncio.run(scenario(7)) == (4, False)
    assert asyncio.run(scenario(3)) == (2, True)

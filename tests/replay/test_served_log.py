"""Tier 0: a consume-once queue's audit of the keys it served (ReplayShardImpl, no Ray) counts exactly: across an
in-place restore every key is trained once, a version sampled again counts its last batch, and a key trained at two
versions is named (the fault soak's consume-once check reads these logs)."""

import asyncio

from replay_rl.replay.served_log import trained_batches, trained_twice
from replay_rl.replay.shard import ReplayShardImpl
from tests.replay.helpers import make_batch
from tests.replay.test_live import spec_for


def test_the_audit_counts_each_key_once_across_a_restore_and_a_version_sampled_again(tmp_path):
    spec = spec_for(tmp_path, "replay.type=lifo_once")

    async def scenario():
        shard = ReplayShardImpl(spec, 0)
        await shard.insert(make_batch(16))
        for v in (0, 1):
            await shard.sample(4, v)
        restored = ReplayShardImpl(spec, 0, reconstructed=True)  # Ray restarts it in place: the audit goes on
        await restored.sample(4, 1)  # version 1 again (its batch was lost with the rank): the log's last line counts
        await restored.sample(4, 2)

    asyncio.run(scenario())
    log = tmp_path / "replay_served" / "shard_0.keys"
    assert sorted(trained_batches(log)) == [0, 1, 2] and len(log.read_text().splitlines()) == 4
    assert trained_twice([log], range(3)) == (12, [])


def test_a_key_trained_at_two_versions_is_named(tmp_path):
    log = tmp_path / "shard_0.keys"
    log.write_text("0 1 2\n1 3 4\n1 5 2\n2 6 7\n2 8\n3 9 1x")  # version 1's last batch serves key 2 again
    assert trained_batches(log)[2] == [8] and 3 not in trained_batches(log)  # a short line counts; a cut one not
    assert trained_twice([log], range(3)) == (5, [2])
    assert trained_twice([log], range(2)) == (4, [2])


def test_a_buffer_that_replays_keeps_no_audit(tmp_path):
    async def scenario():
        shard = ReplayShardImpl(spec_for(tmp_path, "replay.type=fifo"), 0)
        await shard.insert(make_batch(8))
        await shard.sample(4, 0)

    asyncio.run(scenario())
    assert not (tmp_path / "replay_served").exists()


def test_rollouts_inserted_after_a_restore_never_take_the_keys_served_before_it(tmp_path):
    """The review's case: the restored snapshot's key counter predates the keys served since; a new rollout given
    one of them would read as a rollout trained twice (and a second restore would drop it as consumed)."""
    spec = spec_for(tmp_path, "replay.type=lifo_once")

    async def scenario():
        shard = ReplayShardImpl(spec, 0)
        await shard.insert(make_batch(4))
        await shard.sample(4, 0)  # snapshots before serving: it holds the first 4
        await shard.insert(make_batch(4))
        await shard.sample(4, 1)  # keys inserted after the snapshot, served: in the journal
        restored = ReplayShardImpl(spec, 0, reconstructed=True)
        await restored.insert(make_batch(4))
        await restored.sample(4, 2)

    asyncio.run(scenario())
    assert trained_twice([tmp_path / "replay_served" / "shard_0.keys"], range(3)) == (12, [])

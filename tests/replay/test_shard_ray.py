"""Tier 1: real Ray shard actors and the client, under concurrent producers and consumers."""

import time

import numpy as np
import pytest
import ray as ray_mod

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.replay.client import ReplayClient, ShardDraws, create_shards
from replay_rl.replay.shard import ReplayTimeout
from tests.replay.helpers import make_batch

pytestmark = pytest.mark.ray


def spec_with(*overrides):
    return shard_spec(RunConfig.load(None, ["cluster.learners=3", "learner.batch_size=12", "replay.capacity=48",
                                            "replay.sample_timeout_s=20", "cluster.emulate=null", *overrides]))


@ray_mod.remote(num_cpus=0, max_concurrency=2)
class Producer:
    def __init__(self, shards, pid):
        self.client, self.pid, self.stopped = ReplayClient(shards, max_in_flight=4), pid, False

    def run(self, rounds, seed, max_version=0, size=None):
        """Insert batches of 1–8 stamped with random versions in [0, max_version], for `rounds` or until stop()."""
        rng = np.random.default_rng(seed)
        r = 0
        while r < rounds and not self.stopped:
            # reward encodes a globally unique id: pid·10⁶ + running index
            version = int(rng.integers(0, max_version + 1))
            self.client.insert(make_batch(size or int(rng.integers(1, 9)), start=self.pid * 10**6 + r * 10, version=version))
            r += 1
        self.client.flush()
        return r

    def stop(self):
        self.stopped = True


@ray_mod.remote(num_cpus=0)
class Consumer:
    def __init__(self, shards, rank):
        self.client, self.rank = ReplayClient(shards), rank

    def run(self, steps, n, steps_per_version=1):
        seen = []
        for step in range(steps):
            batch, info = self.client.sample(self.rank, n, consumer_version=step // steps_per_version)
            assert len(set(info.keys.tolist())) == n  # no duplicate within a batch
            seen.append((step, info.ages.tolist(), info.reuse.tolist(), info.keys.tolist()))
        return seen


def test_fifo_routes_balanced_and_sampling_keeps_items(ray_cluster):
    shards = create_shards(spec_with())
    client = ReplayClient(shards)
    client.insert(make_batch(30))
    client.flush()
    sizes = [s.size for s in client.shard_stats()]
    assert sizes == [10, 10, 10]
    for _ in range(5):
        batch, _ = client.sample(1, 4, consumer_version=0)
    assert [s.size for s in client.shard_stats()] == [10, 10, 10]
    assert client.stats().samples == 20


def test_lifo_once_always_removes(ray_cluster):
    shards = create_shards(spec_with("replay.type=lifo_once", "replay.capacity=300"))
    client = ReplayClient(shards)
    client.insert(make_batch(30))
    client.flush()
    keys = [k for _ in range(2) for k in client.sample(0, 4, 0)[1].keys.tolist()]
    assert len(set(keys)) == 8 and client.shard_stats()[0].size == 2


def test_a_batch_asked_ahead_is_drawn_then_and_taken_by_its_step(ray_cluster):
    # a consume-once queue serves the newest rollouts, so when a batch was drawn shows in which rollouts it holds
    shards = create_shards(spec_with("replay.type=lifo_once", "replay.capacity=300"))
    client, draws = ReplayClient(shards), ShardDraws(shards[0], 4)
    client.insert(make_batch(30, start=0))
    client.flush()
    draws.ahead(1)
    deadline = time.monotonic() + 20
    while client.shard_stats()[0].size != 6 and time.monotonic() < deadline:  # served while "the weights publish"
        time.sleep(0.05)
    client.insert(make_batch(30, start=1000))  # newer rollouts arrive before the step takes its batch
    client.flush()
    ahead, info, _ = draws.take(1)
    assert (ahead.reward < 1000).all() and client.shard_stats()[0].size == 16  # the early draw, and no other
    fresh, _, _ = draws.take(2)  # nothing asked ahead: drawn now, from the newest
    assert (fresh.reward >= 1000).all() and client.shard_stats()[0].size == 12


def test_staleness_and_reuse_caps_hold_under_concurrency(ray_cluster):
    spec = spec_with("replay.max_staleness=3", "replay.max_reuse=2", "replay.capacity=60")
    shards = create_shards(spec)
    producers = [Producer.remote(shards, p) for p in range(3)]
    consumers = [Consumer.remote(shards, r) for r in range(3)]
    # producers stamp random versions 0..16 while consumers advance one version per 2 steps (0..14): items that
    # are more than 3 versions behind must never come back, whatever the interleaving
    prod = [p.run.remote(10**9, p_i, 16) for p_i, p in enumerate(producers)]
    seen = ray_mod.get([c.run.remote(30, 3, 2) for c in consumers])
    ray_mod.get([p.stop.remote() for p in producers])
    assert min(ray_mod.get(prod)) > 0
    for rank_seen in seen:
        for step, ages, reuse, keys in rank_seen:
            assert max(ages) <= 3 and max(reuse) <= 2
    all_keys = [k for rank_seen in seen for _, _, _, ks in rank_seen for k in ks]
    # every key is returned at most max_reuse times across all ranks; keys of one rank live in one shard
    assert max(np.unique(all_keys, return_counts=True)[1]) <= 2
    for r, rank_seen in enumerate(seen):
        assert all(k % 3 == r for _, _, _, ks in rank_seen for k in ks)
    total = ReplayClient(shards).stats()
    assert total.inserts == sum(s.inserts for s in ReplayClient(shards).shard_stats()) > 0
    assert total.size + sum(total.evictions.values()) == total.inserts  # nothing lost, nothing duplicated


def test_sample_timeout_says_why(ray_cluster):
    shards = create_shards(spec_with("replay.sample_timeout_s=0.5"))
    with pytest.raises(ReplayTimeout, match="0 eligible items < 4 requested"):
        ReplayClient(shards).sample(0, 4, consumer_version=0)


def test_rate_limiter_keeps_ratio_in_band(ray_cluster):
    spec = spec_with("replay.rate_limit={samples_per_insert: 2.0, tolerance: 24, min_size_to_sample: 4}",
                   "cluster.learners=1", "learner.batch_size=4", "replay.capacity=64",
                   "generation.prompts_per_call=1", "generation.group_size=4")
    shards = create_shards(spec)
    # 50 inserts of 4 allow exactly 400 samples = 100 batches of 4; neither side may run ahead by more than the band
    prod = Producer.remote(shards, 0).run.remote(50, 0, 0, 4)
    ray_mod.get(Consumer.remote(shards, 0).run.remote(100, 4))
    assert ray_mod.get(prod) == 50
    st = ReplayClient(shards).stats()
    assert st.inserts == 200 and st.samples == 400
    waits = ray_mod.get(shards[0].wait_seconds.remote())
    assert waits["insert"] > 0  # the producer is faster and was held back


def test_snapshot_kill_restore_loses_nothing(ray_cluster, tmp_path):
    spec = spec_with("replay.type=positive_bias", "replay.delta=0.5")
    shards = create_shards(spec)
    client = ReplayClient(shards)
    client.insert(make_batch(90, correct=lambda i: i % 4 == 0))
    client.flush()
    client.sample(2, 8, consumer_version=1)
    before = [s.__dict__ for s in client.shard_stats()]
    client.snapshot(tmp_path)
    for s in shards:
        ray_mod.kill(s)
    fresh = create_shards(spec)
    restored = ReplayClient(fresh)
    assert restored.restore(tmp_path) == [st["inserts"] for st in before]
    assert [s.__dict__ for s in restored.shard_stats()] == before
    n0 = before[0]["size"]
    items = sorted(int(r) for r in ray_mod.get(fresh[0].sample.remote(n0, 1))[0].reward)
    assert len(items) == n0 and all(i % 3 == 0 for i in items)  # shard 0 got rollouts 0, 3, 6, ...
    with pytest.raises(Exception, match="snapshot taken with replay settings"):
        ReplayClient(create_shards(spec_with())).restore(tmp_path)


def test_a_shard_that_dies_restores_its_live_snapshot_and_the_loss_is_counted(ray_cluster, tmp_path):
    spec = spec_with("cluster.learners=1", "replay.snapshot_every_steps=2", "run.max_shard_restarts=1",
                   f"run.output_dir={tmp_path}")
    client = ReplayClient(create_shards(spec))
    shard = client.shards[0]
    ray_mod.get(shard.insert.remote(make_batch(20)))
    ray_mod.get(shard.sample.remote(12, 2))       # version 2: snapshot of 20 items, taken before serving
    ray_mod.get(shard.insert.remote(make_batch(8, start=100)))
    assert client.stats().inserts == 28           # the driver has seen 28 inserts
    ray_mod.kill(shard, no_restart=False)         # a crash: Ray restarts the actor, which restores itself
    # ray.kill returns before the actor is gone: a call sent now may still reach the old one, so wait for the new
    for _ in range(120):
        if ray_mod.get(shard.stats.remote()).shard_restarts == 1:
            break
        time.sleep(0.5)
    batch, _ = ray_mod.get(shard.sample.remote(12, 3))  # served from the snapshot
    assert len(batch) == 12 and set(batch.reward.tolist()) <= set(range(20))
    stats = client.stats()
    assert (stats.shard_restarts, stats.inserts, stats.rollouts_lost) == (1, 20, 8)
    assert client.stats().rollouts_lost == 8      # counted once, not at every read

"""Tier 0: the Table and its policies, no Ray."""

import numpy as np
import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.config.replay_specs import table_spec
from replay_rl.replay.limits import RateLimiter
from replay_rl.replay.table import Table, TableSpec, table_from_spec
from replay_rl.replay.table_stats import TableStats
from tests.replay.helpers import make_batch


def ids(batch):
    return sorted(int(r) for r in batch.reward)


def live_ids(table):
    return sorted(int(r) for r in table._gather(np.flatnonzero(table.meta.alive)).reward)


def test_fifo_evicts_oldest_and_keeps_capacity():
    t = Table.fifo(8)
    for start in range(0, 30, 5):
        t.insert(make_batch(5, start=start))
        assert len(t) == min(8, start + 5)
    assert live_ids(t) == list(range(22, 30))
    assert t.stats().evictions["capacity"] == 22


def test_fifo_sampling_never_removes_and_is_without_replacement_within_a_batch():
    t = Table.fifo(16)
    t.insert(make_batch(16))
    for step in range(20):
        batch, info = t.sample(16, consumer_version=step)
        assert ids(batch) == list(range(16)) and len(set(info.keys.tolist())) == 16
    assert len(t) == 16 and t.stats().samples == 320 and t.stats().replay_ratio == 20


def test_lifo_once_consumes_freshest_first_exactly_once():
    t = Table.lifo_once(100)
    t.insert(make_batch(10))
    t.insert(make_batch(5, start=10))
    first, _ = t.sample(4, 0)
    assert ids(first) == [11, 12, 13, 14]
    rest = [ids(t.sample(1, 0)[0])[0] for _ in range(11)]
    assert rest == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0] and len(t) == 0
    assert t.stats().evictions["consumed"] == 15
    assert not t.can_sample(1, 0)


def test_positive_bias_matches_the_hand_worked_example():
    # N=8, δ=0.5: items 0..11 inserted, odd ones correct. Keep the 4 freshest (8..11) plus the 4 freshest
    # correct items that aged out of them (1, 3, 5, 7).
    t = Table.positive_bias(8, 0.5)
    t.insert(make_batch(12, correct=lambda i: i % 2 == 1))
    assert live_ids(t) == [1, 3, 5, 7, 8, 9, 10, 11]
    # δ=0.25: 6 freshest (6..11) + 2 freshest aged-out correct (3, 5)
    t = Table.positive_bias(8, 0.25)
    t.insert(make_batch(12, correct=lambda i: i % 2 == 1))
    assert live_ids(t) == [3, 5, 6, 7, 8, 9, 10, 11]


def test_positive_bias_with_zero_delta_is_fifo():
    a, b = Table.positive_bias(8, 0.0), Table.fifo(8)
    for start in range(0, 40, 7):
        a.insert(make_batch(7, start=start))
        b.insert(make_batch(7, start=start))
        assert live_ids(a) == live_ids(b)


def test_max_staleness_evicts_and_never_returns_old_items():
    t = Table.fifo(32, max_staleness=2)
    t.insert(make_batch(8, version=0))
    t.insert(make_batch(8, version=3, start=8))
    batch, info = t.sample(8, consumer_version=4)   # version-0 items have age 4 > 2
    assert info.ages.max() <= 2 and min(ids(batch)) >= 8
    assert t.stats().evictions["stale"] == 8
    assert not t.can_sample(9, consumer_version=4)
    assert "8 eligible items < 9 requested" in t.why_blocked(9, 4)


def test_max_reuse_evicts_after_n_samples():
    t = Table.fifo(4, max_reuse=2)
    t.insert(make_batch(4))
    t.sample(4, 0)
    t.sample(4, 0)
    assert len(t) == 0 and t.stats().evictions["reuse"] == 4 and t.stats().reuse_hist[2] == 4


def test_uniform_no_repeat_uses_every_item_before_any_repeat():
    t = Table.fifo(12, sampler="uniform_no_repeat", seed=3)
    t.insert(make_batch(12))
    seen = ids(t.sample(5, 0)[0]) + ids(t.sample(5, 0)[0])
    assert len(set(seen)) == 10
    third = ids(t.sample(5, 0)[0])
    assert set(range(12)) - set(seen) <= set(third)


def test_abs_advantage_prefers_large_advantages():
    t = Table.fifo(100, sampler="abs_advantage", seed=0)
    batch = make_batch(100)
    arrays = batch.arrays()
    arrays["advantage"] = np.where(np.arange(100) < 10, 3.0, 0.0).astype(np.float32)
    from replay_rl.rollout import RolloutBatch
    t.insert(RolloutBatch(**arrays))
    picked = [i for _ in range(50) for i in ids(t.sample(5, 0)[0])]
    assert np.mean(np.array(picked) < 10) > 0.8


def test_effective_sampler_gives_no_slot_to_a_zero_advantage_rollout_while_enough_others_are_held():
    """Effective-group replay (issue 43): a rollout of a group whose rewards were all equal (advantage 0, no GRPO
    gradient) takes a batch slot only when fewer than a batch of the others are held."""
    from replay_rl.rollout import RolloutBatch

    t = Table.fifo(100, sampler="effective", seed=0)
    arrays = make_batch(100).arrays()
    arrays["advantage"] = np.where(np.arange(100) % 10 == 0, -0.5, 0.0).astype(np.float32)  # 10 teach
    t.insert(RolloutBatch(**arrays))
    for _ in range(20):
        assert all(i % 10 == 0 for i in ids(t.sample(8, 0)[0]))
    short = ids(t.sample(15, 0)[0])
    assert sum(i % 10 == 0 for i in short) == 10 and len(set(short)) == 15  # all 10, then 5 of the others


def test_rate_limiter_band():
    r = RateLimiter(2.0, 8, min_size_to_sample=4)
    assert not r.can_sample(4)          # below min size
    r.record(inserts=4)                 # error = 8
    assert r.can_sample(4) and not r.can_insert(1)   # 8 + 2 > 8
    r.record(samples=12)                # error = −4
    assert not r.can_sample(8) and r.can_insert(4)
    assert "samples/insert 3.00 vs target 2" in r.why_blocked()


def test_table_from_spec_picks_the_preset_the_config_names():
    cfg = RunConfig.load(None, ["replay.type=positive_bias", "replay.delta=0.5", "replay.max_reuse=3",
                               "replay.capacity=64", "learner.batch_size=32"])
    t = table_from_spec(table_spec(cfg), seed=0)
    assert t.retention.main_capacity == 16 and t.max_reuse == 3
    with pytest.raises(ConfigError, match="replay.capacity"):
        RunConfig.load(None, ["replay.capacity=30", "learner.batch_size=32"])  # < batch 32


def test_state_round_trip_preserves_items_and_counters():
    t = Table.positive_bias(8, 0.5, seed=1)
    t.insert(make_batch(12, correct=lambda i: i % 3 == 0))
    t.sample(3, 2)
    arrays, counters = t.state()
    u = Table.positive_bias(8, 0.5, seed=99)
    u.load_state(arrays, counters)
    assert live_ids(u) == live_ids(t) and u.stats().__dict__ == t.stats().__dict__
    # same rng state and contents: the next sample is the same, and so is the next eviction
    assert ids(u.sample(4, 3)[0]) == ids(t.sample(4, 3)[0])
    t.insert(make_batch(3, start=50))
    u.insert(make_batch(3, start=50))
    assert live_ids(u) == live_ids(t)


def test_pace_gives_generators_a_lead_the_learner_never_waits_past():
    from replay_rl.replay.limits import Pace, PacedLimiter

    replay = Pace(batch_size=128, replay_ratio=3.2, lead_steps=2, consumes_once=False, capacity=1280)
    assert replay.rollouts_per_step == 40 and replay.fill == 88
    assert replay.budget(0) == 128 + 40          # one batch to start, plus one step of lead
    assert replay.required(0) == 128             # the first step waits for a full batch
    for v in range(50):                          # generators may always be R·(lead − 1) ahead of the learner's need
        assert replay.budget(v) - replay.required(v) == 40
    once = Pace(batch_size=128, replay_ratio=1.0, lead_steps=2, consumes_once=True, capacity=1024)
    assert once.fill == 0 and once.budget(3) == 128 * 5 and once.required(3) == 128 * 4
    tight = Pace(batch_size=128, replay_ratio=3.2, lead_steps=2, consumes_once=False, capacity=128)
    assert tight.budget(5) == tight.required(5)  # N = B: no room for a lead, generation and learning take turns
    shard = PacedLimiter(replay, shard=0, shards=2)  # each of 2 shards is owed its half of the deal
    shard.record(inserts=103)                    # version 2 is owed (88 + 3·40) / 2 = 104
    assert shard.can_sample(64, consumer_version=2) is False and "owed to this shard" in shard.why_blocked(2)
    shard.record(inserts=1)
    assert shard.can_sample(64, consumer_version=2) and shard.can_insert(10**6)
    # an odd count is dealt from shard 0: rollouts 0, 3, 6, ... of the stream go to shard 0 of 3
    third = Pace(batch_size=129, replay_ratio=129 / 40.5, lead_steps=1, consumes_once=False, capacity=129)
    assert [PacedLimiter(third, i, 3).owed(0) for i in range(3)] == [43, 43, 43]    # ⌈129⌉ = 43 each
    assert [PacedLimiter(third, i, 3).owed(1) for i in range(3)] == [57, 57, 56]    # ⌈169.5⌉ = 170
    every2 = Pace(batch_size=128, replay_ratio=3.2, lead_steps=1, consumes_once=False, capacity=128, publish_every=2)
    assert every2.budget(0) == every2.required(1)  # weights come every 2 steps: enough for both of them
    t = table_from_spec(TableSpec("fifo", 8, pace=replay), seed=0)
    assert isinstance(t.limiter, PacedLimiter)


def test_a_resumed_shard_is_not_owed_the_part_of_a_call_its_snapshot_missed():
    from replay_rl.replay.limits import Pace, PacedLimiter, dealt_to

    pace = Pace(batch_size=129, replay_ratio=129 / 40.5, lead_steps=1, consumes_once=False, capacity=129)
    # the checkpoint caught 100 rollouts: calls 0-2 whole (96) and 4 of call 3's 32, all four dealt to shards 0, 1
    held = [34, 34, 32]
    resumed = [PacedLimiter(pace, i, 3) for i in range(3)]
    for shard, n in zip(resumed, held):
        shard.record(inserts=n)
        shard.resume_stream(4 * 32)              # generators go on from call 4: call 3 is not made again
    assert [s.inserts for s in resumed] == [43, 43, 42]
    # calls 4 and 5 pay every shard its deal of rollouts 128..191, and version 1 is owed the first 170
    for i, shard in enumerate(resumed):
        shard.record(inserts=int(dealt_to(i, 192, 3) - dealt_to(i, 128, 3)))
    assert all(s.can_sample(129, consumer_version=1) for s in resumed)
    # without it, shard 2 stays 10 short of its deal of the stream: by version 1, 54 of the 56 owed
    short = PacedLimiter(pace, 2, 3)
    short.record(inserts=32 + int(dealt_to(2, 192, 3) - dealt_to(2, 128, 3)))
    assert short.owed(1) - short.inserts == 2 and not short.can_sample(129, consumer_version=1)


def test_overlap_prev_is_one_when_every_batch_is_the_whole_buffer():
    t = Table.fifo(8)
    t.insert(make_batch(8))
    t.sample(8, 0)
    assert t.stats().overlap_prev == 0.0                     # no previous batch
    for v in range(1, 4):
        t.sample(8, v)
        assert t.stats().overlap_prev == 1.0
    assert t.stats().overlap_prev_mean == 24 / 32 and t.stats().summary()["overlap_prev"] == 1.0


def test_overlap_prev_is_zero_for_least_recent_with_room_for_two_batches():
    t = Table.fifo(8, sampler="least_recent", seed=0)
    t.insert(make_batch(8))
    for v in range(10):
        t.sample(4, v)
        assert t.stats().overlap_prev == 0.0
    assert t.stats().overlap_prev_mean == 0.0 and t.stats().since_last_use_mean == 2.0  # every item every 2 steps


def test_overlap_prev_merges_over_shards_and_survives_a_restore():
    whole, cycling = Table.fifo(4), Table.fifo(8, sampler="least_recent")
    whole.insert(make_batch(4))
    cycling.insert(make_batch(8))
    for v in range(2):
        whole.sample(4, v)
        cycling.sample(4, v)
    merged = TableStats.merge([whole.stats(), cycling.stats()])
    assert merged.overlap_prev == 0.5                        # this step: 1.0 and 0.0, mean over shards
    assert merged.overlap_prev_mean == 4 / 16                # the run: 4 repeats in 16 samples
    u = Table.fifo(4)
    u.load_state(*whole.state())
    assert u.stats().overlap_prev == 1.0 and u.stats().overlap_prev_mean == 0.5

import numpy as np
import pytest

from replay_rl.rollout import FINISH_STOP, Rollout, RolloutBatch, group_advantages


def make_rollouts(n, seed=0, version=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c = int(rng.integers(1, 6))
        out.append(Rollout(rng.integers(0, 50, int(rng.integers(2, 5))).astype(np.int32),
                           rng.integers(0, 50, c).astype(np.int32), -rng.random(c).astype(np.float32),
                           float(i % 2), float(i) / n, 0.5, bool(i % 2), i // 4, version, version, version, 0, FINISH_STOP))
    return out


def test_batch_round_trips_every_field():
    rs = make_rollouts(9)
    batch = RolloutBatch.from_rollouts(rs)
    assert len(batch) == 9 and batch.times_sampled.sum() == 0
    for i, r in enumerate(rs):
        got = batch.rollout(i)
        for f in Rollout.__slots__:
            assert np.allclose(getattr(got, f), getattr(r, f), rtol=1e-6), f


def test_take_keeps_rows_intact():
    rs = make_rollouts(10)
    batch = RolloutBatch.from_rollouts(rs)
    idx = np.array([7, 2, 2, 9])
    sub = batch.take(idx)
    assert [sub.rollout(i).completion_ids.tolist() for i in range(4)] == [rs[j].completion_ids.tolist() for j in idx]
    whole = batch.take(np.arange(10))
    assert all(np.array_equal(a, b) for a, b in zip(whole.arrays().values(), batch.arrays().values()))
    assert len(batch.take(np.array([], np.int64))) == 0


def test_broken_offsets_are_rejected():
    batch = RolloutBatch.from_rollouts(make_rollouts(3))
    arrays = batch.arrays()
    arrays["behavior_logprobs"] = arrays["behavior_logprobs"][:-1]
    with pytest.raises(ValueError, match="offsets invariant"):
        RolloutBatch(**arrays)


def test_group_advantage_is_standardised_and_zero_for_flat_groups():
    a = group_advantages(np.array([1, 0, 0, 1, 1, 0, 0, 0], float))
    assert abs(a.mean()) < 1e-6 and abs(a.std() - 1) < 1e-4
    assert a[0] == pytest.approx((1 - 0.375) / np.sqrt(0.375 * 0.625), rel=1e-4)
    assert np.all(group_advantages(np.ones(16)) == 0)
    # exactly 0 for any equal rewards (the effective sampler and zero_variance_share read it): 3 × 0.1 left ~1e-10
    for value, size in ((0.1, 3), (0.7, 6), (0.2, 7)):
        assert np.all(group_advantages(np.full(size, value)) == 0)


def test_the_sample_std_gives_trls_advantages_sqrt_g_minus_one_over_g_of_the_papers():
    from replay_rl.config import RunConfig
    from replay_rl.tasks.scoring import applicable_advantages

    rewards = np.array([1.0, 0.0, 0.0, 1.0])
    ddof = RunConfig.load(None, ["generation.advantage_std=sample"]).generation.advantage_ddof
    sample, population = applicable_advantages(rewards, ddof)[1], applicable_advantages(rewards)[1]
    assert ddof == 1 and sample == pytest.approx(population * np.sqrt(3 / 4), rel=1e-4)
    assert sample[0] == pytest.approx(0.5 / np.std(rewards, ddof=1), rel=1e-4)  # 0.866, as TRL's GRPOTrainer

"""Losses against hand-computed values on a 2-rollout batch."""

import math

import numpy as np
import pytest
import torch

from replay_rl.config import AsymreLossConfig, GrpoLossConfig
from replay_rl.learner.batching import to_learner_inputs
from replay_rl.learner.losses import LearnerInputs, asymre_loss, grpo_loss
from replay_rl.rollout import Rollout, RolloutBatch


def inputs(old, adv, rewards=(1.0, 0.0), baselines=(0.5, 0.5)):
    # two rollouts, two target positions each, all completion tokens
    return LearnerInputs(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long),
                         torch.ones(2, 2), torch.tensor(old), torch.tensor(adv), torch.tensor(rewards),
                         torch.tensor(baselines))


def test_grpo_matches_hand_values():
    old = [[math.log(0.5), math.log(0.5)], [math.log(0.5), math.log(0.5)]]
    new = torch.tensor([[math.log(0.8), math.log(0.5)], [math.log(0.3), math.log(0.6)]])
    # ratios: [1.6, 1.0], [0.6, 1.2]; A = [+1, −1]
    # row 0: min(1.6, 1.2)=1.2, min(1, 1)=1 ; row 1: min(−0.6, −0.8)=−0.8, min(−1.2, −1.2)=−1.2
    loss, st = grpo_loss(GrpoLossConfig(), new, inputs(old, [1.0, -1.0]))
    assert loss.item() == pytest.approx(-(1.2 + 1.0 - 0.8 - 1.2) / 4, abs=1e-6)
    assert st["clip_fraction"] == pytest.approx(2 / 4)   # 1.6 with A>0 and 0.6 with A<0 are clipped
    assert st["ratio_mean"] == pytest.approx((1.6 + 1.0 + 0.6 + 1.2) / 4, abs=1e-6)


def test_grpo_ratio_is_one_and_nothing_clips_on_fresh_data():
    old = torch.log(torch.tensor([[0.2, 0.7], [0.9, 0.4]]))
    loss, st = grpo_loss(GrpoLossConfig(), old.clone().requires_grad_(), inputs(old.tolist(), [0.5, -2.0]))
    assert st["ratio_mean"] == 1.0 and st["clip_fraction"] == 0.0
    assert loss.item() == pytest.approx(-(0.5 * 2 - 2.0 * 2) / 4)


def test_asymre_matches_hand_values():
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))
    cfg = AsymreLossConfig(baseline_shift=-0.1, aggregation="token_mean")
    loss, st = asymre_loss(cfg, logp, inputs(logp.tolist(), [0.0, 0.0]))
    # weights: r − (V̂ + δV) = 1 − 0.4 = 0.6 and 0 − 0.4 = −0.4
    want = -(0.6 * (math.log(0.5) + math.log(0.25)) - 0.4 * (2 * math.log(0.5))) / 4
    assert loss.item() == pytest.approx(want, abs=1e-6) and st["clip_fraction"] == 0.0


def test_asymre_default_is_the_papers_per_rollout_sum_of_log_probs():
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))
    inp = inputs(logp.tolist(), [0.0, 0.0])
    inp.loss_mask[1, 1] = 0  # a 1-token second rollout: its Σ_t has one term, and no 1/length scaling
    loss, _ = asymre_loss(AsymreLossConfig(baseline_shift=-0.1), logp, inp)
    want = -(0.6 * (math.log(0.5) + math.log(0.25)) - 0.4 * math.log(0.5)) / 2  # mean over the 2 rollouts
    assert AsymreLossConfig().aggregation == "seq_sum" and loss.item() == pytest.approx(want, abs=1e-6)


def test_batching_aligns_targets_with_completion_tokens():
    r = Rollout(np.array([5, 6], np.int32), np.array([7, 8, 1], np.int32), np.array([-0.1, -0.2, -0.3], np.float32),
                1.0, 0.5, 0.25, True, 0, 0, 0, 0, 0, 0)
    short = Rollout(np.array([5], np.int32), np.array([9], np.int32), np.array([-0.4], np.float32),
                    0.0, -0.5, 0.25, False, 0, 0, 0, 0, 0, 0)
    inp = to_learner_inputs(RolloutBatch.from_rollouts([r, short]), pad_id=0)
    assert inp.input_ids.tolist() == [[5, 6, 7, 8, 1], [5, 9, 0, 0, 0]]
    assert inp.loss_mask.tolist() == [[0, 1, 1, 1], [1, 0, 0, 0]]
    assert np.allclose(inp.old_logprobs.numpy(), [[0, -0.1, -0.2, -0.3], [-0.4, 0, 0, 0]])
    assert inp.baselines.tolist() == [0.25, 0.25]


def test_processed_logits_apply_temperature_then_the_nucleus():
    from replay_rl.learner.losses import processed_logits

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.allclose(processed_logits(logits, 0.5), logits / 0.5)
    # probs ≈ .644 .237 .087 .032: ascending cumulative .032 .119 .356 1 → top_p 0.5 keeps the first token only,
    # top_p 0.8 keeps the first two (its cumulative mass .881 is the first ≥ 0.8)
    kept = lambda p: (torch.log_softmax(processed_logits(logits, 1.0, p), -1) > -100).tolist()  # noqa: E731
    assert kept(0.5) == [[True, False, False, False]] and kept(0.8) == [[True, True, False, False]]
    lp = torch.log_softmax(processed_logits(logits, 1.0, 0.8), -1)
    assert lp[0, 0].exp().item() == pytest.approx(0.644 / (0.644 + 0.237), abs=2e-3)


@pytest.mark.parametrize("kind, ratio, weights, changed", [
    ("none", [[3.0, 1.0], [0.3, 1.0]], [[1, 1], [1, 1]], 0.0),
    ("tis", [[3.0, 1.0], [0.3, 1.0]], [[2, 1], [0.3, 1]], 0.25),   # 3 is truncated at C=2, 0.3 is kept as is
    ("icepop", [[3.0, 1.0], [0.3, 1.0]], [[0, 1], [0, 1]], 0.5),   # 3 > C and 0.3 < 1/C are masked
    # geometric means: row 0 √(9·1) = 3 > C, the whole rollout is masked; row 1 √(0.6·1) ≈ 0.77 is kept
    ("mis", [[9.0, 1.0], [0.6, 1.0]], [[0, 0], [1, 1]], 0.5),
])
def test_correction_weights_match_hand_values(kind, ratio, weights, changed):
    from replay_rl.learner.corrections import correction_weights

    w, st = correction_weights(kind, 2.0, torch.log(torch.tensor(ratio)), torch.ones(2, 2))
    want = torch.tensor(weights, dtype=torch.float32)
    assert torch.allclose(w, want) and st["correction/changed_fraction"] == pytest.approx(changed)
    assert st["correction/ess"] == pytest.approx((want.sum() ** 2 / (4 * (want ** 2).sum())).item())



def test_effective_sample_size_of_near_equal_weights_stays_within_its_bound_of_one():
    """Float32 sums put (Σw)²/(n·Σw²) of weights within 1e-4 of each other at 1 + 1e-7 (a CI failure)."""
    from replay_rl.learner.corrections import correction_weights

    gen = torch.Generator().manual_seed(0)
    worst = max(correction_weights("tis", 1.5, torch.randn(16, 40, generator=gen) * 1e-4, torch.ones(16, 40))[1]
                ["correction/ess"] for _ in range(300))
    assert 1 - 1e-6 < worst <= 1.0

def test_a_masked_token_contributes_nothing_to_the_grpo_gradient():
    old = [[math.log(0.5), math.log(0.5)], [math.log(0.5), math.log(0.5)]]
    new = torch.tensor([[math.log(0.5 * 3), math.log(0.5)], [math.log(0.5), math.log(0.5)]], requires_grad=True)
    loss, st = grpo_loss(GrpoLossConfig(correction="icepop", correction_cap=2.0), new, inputs(old, [-1.0, 1.0]))
    loss.backward()
    assert new.grad[0, 0] == 0 and new.grad[0, 1] != 0 and st["correction/changed_fraction"] == 0.25


def test_grpo_aggregations_on_rollouts_of_different_lengths():
    # row 0 has 2 completion tokens with term +1 each, row 1 has 1 token (the other masked) with term −1
    inp = inputs([[0.0, 0.0], [0.0, 0.0]], [1.0, -1.0])
    inp.loss_mask[1, 1] = 0
    logp = torch.zeros(2, 2)
    token = grpo_loss(GrpoLossConfig(), logp, inp)[0].item()
    seq = grpo_loss(GrpoLossConfig(aggregation="seq_mean"), logp, inp)[0].item()
    assert token == pytest.approx(-(1 + 1 - 1) / 3) and seq == pytest.approx(-(1 - 1) / 2)
    # global_token_mean is the token mean with the worker's global count: here another rank holds 5 more tokens
    inp.token_count = (3 + 5) / 2
    assert grpo_loss(GrpoLossConfig(aggregation="global_token_mean"), logp, inp)[0].item() == pytest.approx(-1 / 4)


@pytest.mark.parametrize("loss_fn, cfg_type", [(grpo_loss, GrpoLossConfig), (asymre_loss, AsymreLossConfig)])
def test_stale_negatives_are_vetoed_or_down_weighted_and_positives_never(loss_fn, cfg_type):
    """learner.loss.stale_negatives: the negative rollout older than max_age loses its weight; a positive as old,
    a fresh negative, and a batch without ages are untouched."""
    old = torch.log(torch.tensor([[0.2, 0.7], [0.9, 0.4]]))

    def run(adv, ages, weight=None, rewards=(1.0, 0.0)):
        cfg = cfg_type(stale_negatives=None if weight is None else {"max_age": 2, "weight": weight})
        inp = inputs(old.tolist(), adv, rewards)
        inp.ages = None if ages is None else torch.tensor(ages)
        logp = old.clone().requires_grad_()
        loss, stats = loss_fn(cfg, logp, inp)
        loss.backward()
        return logp.grad, stats

    plain, _ = run([0.5, -2.0], [3, 3])
    vetoed, stats = run([0.5, -2.0], [3, 3], weight=0.0)
    assert torch.equal(vetoed[0], plain[0]) and torch.all(vetoed[1] == 0) and torch.any(plain[1] != 0)
    assert stats["stale/negative_fraction"] == pytest.approx(0.5)
    halved, _ = run([0.5, -2.0], [3, 3], weight=0.5)
    assert torch.allclose(halved[1], plain[1] / 2) and torch.equal(halved[0], plain[0])
    fresh, _ = run([0.5, -2.0], [3, 2], weight=0.0)  # age 2 is not past max_age 2
    assert torch.equal(fresh, plain)
    unknown, stats = run([0.5, -2.0], None, weight=0.0)  # no ages (a caller that does not know them): off
    assert torch.equal(unknown, plain) and "stale/negative_fraction" not in stats
    if cfg_type is AsymreLossConfig:  # negative as AsymRE weighs it: 0.45 − (0.5 − 0.1) > 0 though A < 0
        shifted, _ = run([0.5, -2.0], [3, 3], weight=None, rewards=(1.0, 0.45))
        kept, stats = run([0.5, -2.0], [3, 3], weight=0.0, rewards=(1.0, 0.45))
        assert torch.equal(kept, shifted) and stats["stale/negative_fraction"] == 0

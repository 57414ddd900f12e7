"""The trust region on each rollout's importance ratios (learner.loss.trust_region), against hand values on the
2-rollout batch of test_losses: behaviour probability 0.5 at every token, current ratios [1.6, 1.0] and [0.6, 1.2].

    M2:  rollout 0 (ln 1.6)²/2 = 0.11045;  rollout 1 ((ln 0.6)² + (ln 1.2)²)/2 = 0.14709
    ESS: rollout 0 2.6²/(2·(1.6² + 1)) = 0.94944;  rollout 1 1.8²/(2·(0.6² + 1.2²)) = 0.9
"""

import math

import pytest
import torch

from replay_rl.config import AsymreLossConfig, GrpoLossConfig
from replay_rl.learner.losses import asymre_loss, grpo_loss
from replay_rl.learner.trust_region import trust_region_weights
from tests.learner.test_losses import inputs

OLD = [[math.log(0.5)] * 2] * 2
NEW = [[math.log(0.8), math.log(0.5)], [math.log(0.3), math.log(0.6)]]
M2 = (math.log(1.6) ** 2 / 2, (math.log(0.6) ** 2 + math.log(1.2) ** 2) / 2)


def test_hand_values_of_m2_and_ess_per_rollout():
    log_ratio = torch.tensor(NEW) - torch.tensor(OLD)
    keep, st = trust_region_weights(0.13, None, log_ratio, torch.ones(2, 2))
    assert M2 == pytest.approx((0.11045, 0.14709), abs=1e-5)
    assert keep.flatten().tolist() == [1.0, 0.0]  # rollout 1's M2 passed 0.13
    assert st["trust/m2"] == pytest.approx(sum(M2) / 2, abs=1e-6) and st["trust/m2_max"] == pytest.approx(M2[1])
    assert st["trust/ess"] == pytest.approx((6.76 / 7.12 + 0.9) / 2, abs=1e-6)
    assert st["trust/masked_fraction"] == 0.5
    keep, _ = trust_region_weights(None, 0.92, log_ratio, torch.ones(2, 2))
    assert keep.flatten().tolist() == [1.0, 0.0]  # rollout 1's ESS 0.9 < 0.92; rollout 0's 0.949 is kept
    keep, st = trust_region_weights(0.2, 0.8, log_ratio, torch.ones(2, 2))
    assert keep.flatten().tolist() == [1.0, 1.0] and st["trust/masked_fraction"] == 0.0


def test_a_rollout_past_the_bound_is_masked_from_the_grpo_loss_and_its_gradient():
    cfg = GrpoLossConfig(trust_region={"max_m2": 0.13})
    new = torch.tensor(NEW, requires_grad=True)
    loss, st = grpo_loss(cfg, new, inputs(OLD, [1.0, -1.0]))
    # rollout 0's clipped terms min(1.6, 1.2) = 1.2 and 1.0 stay; rollout 1 is masked; the normaliser stays 4 tokens
    assert loss.item() == pytest.approx(-(1.2 + 1.0) / 4, abs=1e-6)
    assert st["trust/masked_fraction"] == 0.5
    loss.backward()
    assert new.grad[1].abs().sum() == 0 and new.grad[0].abs().sum() > 0
    off, st_off = grpo_loss(GrpoLossConfig(), torch.tensor(NEW), inputs(OLD, [1.0, -1.0]))
    assert off.item() == pytest.approx(-(1.2 + 1.0 - 0.8 - 1.2) / 4, abs=1e-6)  # test_losses' value: rule off
    assert not any(k.startswith("trust/") for k in st_off)  # and no trust/ keys


def test_the_trust_region_masks_asymre_rollouts_too():
    cfg = AsymreLossConfig(baseline_shift=-0.1, aggregation="token_mean", trust_region={"min_ess": 0.92})
    loss, _ = asymre_loss(cfg, torch.tensor(NEW), inputs(OLD, [0.0, 0.0]))
    # weight 1 − 0.4 = 0.6 on rollout 0's log π; rollout 1 (weight −0.4) masked
    assert loss.item() == pytest.approx(-0.6 * (math.log(0.8) + math.log(0.5)) / 4, abs=1e-6)


def test_the_config_wants_a_bound():
    with pytest.raises(ValueError, match="set max_m2, min_ess or both"):
        GrpoLossConfig(trust_region={})

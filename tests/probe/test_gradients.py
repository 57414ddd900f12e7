"""The probe's mechanism columns come from the loss's own surrogates, checked against hand values."""

import math
from types import SimpleNamespace

import pytest
import torch

from replay_rl.config import GrpoLossConfig
from replay_rl.learner.losses import LearnerInputs
from replay_rl.probe.gradients import ProbeLearner


def test_mechanism_sums_match_hand_values():
    # one rollout, four completion tokens, ratios 1.6, 1.0, 0.5, 1.1 at A = +1, ε = 0.2: only 1.6 is clipped
    ratios = [1.6, 1.0, 0.5, 1.1]
    old = torch.full((1, 4), math.log(0.5))
    logp = old + torch.log(torch.tensor([ratios]))
    inp = LearnerInputs(torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 5, dtype=torch.long), torch.ones(1, 4),
                        old, torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([0.5]))
    learner = SimpleNamespace(cfg=SimpleNamespace(learner=SimpleNamespace(loss=GrpoLossConfig())))
    got = ProbeLearner.mechanism(learner, logp, inp)
    assert got["tokens"] == 4 and got["clip_active"] == 1
    assert got["mass"] == pytest.approx(4.2) and got["clip_removed"] == pytest.approx(1.6)  # 38% of the mass
    assert got["ratio"] == pytest.approx(4.2)
    assert got["kl"] == pytest.approx(sum(r - 1 - math.log(r) for r in ratios))

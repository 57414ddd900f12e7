"""The generator/learner agreement check: its statistics on hand values, and the start-up verdict."""

import math

import pytest
import torch

from replay_rl.learner.agreement import Mismatch, agreement_problem


def test_mismatch_counts_only_fresh_tokens_and_matches_hand_values():
    m = Mismatch()
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]])
    old = torch.tensor([[-1.1, -2.0], [-3.0, -3.0]])
    fresh = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # the second row is stale: not compared
    m.add(logp, old, fresh)
    out = m.result()
    assert out["mismatch/tokens"] == 2 and out["mismatch/abs_mean"] == pytest.approx(0.05)
    assert out["mismatch/abs_max"] == pytest.approx(0.1)
    assert out["mismatch/kl"] == pytest.approx((math.exp(0.1) - 1 - 0.1) / 2, rel=1e-5)
    assert math.isnan(Mismatch().result()["mismatch/abs_mean"])


def test_agreement_verdicts():
    ok = {"mismatch/abs_mean": 1e-6, "mismatch/abs_max": 1e-5, "mismatch/kl": 0.0}
    assert agreement_problem(ok, warn=0.02, fail=0.5) is None
    assert agreement_problem({"mismatch/abs_mean": float("nan")}, 0.02, 0.5) is None  # nothing fresh to compare
    level, line = agreement_problem(ok | {"mismatch/abs_mean": 0.05}, 0.02, 0.5)
    assert level == "warn" and line.startswith("warning: generator and learner disagree") and "mismatch_warn=0.02" in line
    level, line = agreement_problem(ok | {"mismatch/abs_mean": 0.9}, 0.02, 0.5)
    assert level == "fail" and line.endswith("above run.mismatch_fail=0.5") and "\n" not in line
    assert agreement_problem(ok | {"mismatch/abs_mean": 0.9}, 0.02, None)[0] == "warn"

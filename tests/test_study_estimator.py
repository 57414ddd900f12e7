"""The compute-saved estimator checked against studies with a known truth (replay_rl/analysis/study_sim.py): at the noise
levels of the committed study's best LRs (baseline 0.024, replay 0.012 around a smooth fit), 3 seeds a side, its
eval grid. Identical true curves must read ~0 with an interval that covers 0, a true 15% saving must read ~15%, and
so must the reverse noise asymmetry and equal noise. This is the test that chose the estimator (benchmarks/
estimator_choice.py compares the candidates on it)."""

import pytest

from replay_rl.analysis.study import compare
from replay_rl.analysis.study_sim import simulate

STUDIES = 500


def estimate(base, cfg):
    out = compare({"lr": base}, {"lr": cfg})
    return out["saved_pct"], out["saved_pct_ci"]


@pytest.mark.parametrize("noise_base, noise_cfg", [(0.024, 0.012), (0.012, 0.024), (0.018, 0.018)])
def test_identical_true_curves_read_zero_and_the_interval_covers_it(noise_base, noise_cfg):
    got = simulate(estimate, STUDIES, noise_base, noise_cfg)
    assert abs(got["median_saved_pct"]) <= 3, got
    assert got["coverage"] >= 0.85, got


@pytest.mark.parametrize("noise_base, noise_cfg", [(0.024, 0.012), (0.012, 0.024), (0.018, 0.018)])
def test_a_true_15_percent_saving_reads_12_to_18(noise_base, noise_cfg):
    got = simulate(estimate, STUDIES, noise_base, noise_cfg, true_saved=0.15)
    assert 12 <= got["median_saved_pct"] <= 18, got

"""The compute-saved estimator checked against studies with a known truth (replay_rl/analysis/study_sim.py), on both
curve shapes the committed studies have (1×: 21 evals, steep; 3×: 61 evals, flattening, with replay's
autocorrelated eval noise, seeds differing more in speed and the held-out choice between two LRs a side), 3 seeds a
side, at the measured noise asymmetry (baseline 0.023, replay 0.012), its reverse, and equal noise.

At each absolute target, identical true curves must read 0 and a true 15% saving 15, within ±3 points, with a 90%
interval covering the truth in ≥ 85% of studies: the chosen estimator (isotonic per seed) met that at every target
in the choice's 500 studies a cell. This test's 300 estimate a coverage within about ±2 points (one standard
error), so it checks ≥ 82%: a coverage of 0.86 must not fail it by chance.
At 98% of the baseline's best it does not, and no candidate did (benchmarks/results/estimator_choice): that goal
sits near the end of the budget, where a share of studies never reach it (censored: no interval, so no coverage),
and the 3× top is flat. There the test holds what the choice measured, so a change that makes it worse fails:
|bias| ≤ 4.5 and coverage ≥ 70% (the estimator before issue 42 read −8.2 points on the 3× shape)."""

import pytest

from replay_rl.analysis.study_sim import ONE_X, THREE_X, estimator, simulate

STUDIES = 300  # 2 shapes × 6 cases in well under a minute; the choice itself ran 500 a cell


@pytest.mark.parametrize("shape", [ONE_X, THREE_X], ids=["1x", "3x"])
@pytest.mark.parametrize("noise_base, noise_cfg", [(0.023, 0.012), (0.012, 0.023), (0.018, 0.018)])
@pytest.mark.parametrize("true_saved", [0.0, 0.15])
def test_the_estimator_reads_the_true_saving_with_an_interval_that_covers_it(shape, noise_base, noise_cfg,
                                                                            true_saved):
    best, *targets = simulate(estimator(), STUDIES, noise_base, noise_cfg, true_saved, shape=shape)
    assert len(targets) == len(shape.targets)
    for got in targets:
        assert abs(got["median_saved_pct"] - 100 * true_saved) <= 3, got
        assert got["coverage"] >= 0.82, got
    assert abs(best["median_saved_pct"] - 100 * true_saved) <= 4.5, best
    assert best["coverage"] >= 0.70, best

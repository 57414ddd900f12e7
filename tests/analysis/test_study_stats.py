"""The compute-saved statistics on tiny hand-built curves, every expected number worked out by hand in a comment:
the per-seed smoothing, the budget grid, first reach, the LR chosen on held-out seeds, saved % against 98% of the
baseline's best and against absolute targets, censoring, the jackknife-t interval and the end slope. The estimator
itself is chosen and checked on simulated studies in test_study_estimator.py."""

import numpy as np
import pytest

from replay_rl.analysis.study import Curve, budget_grid, compare, end_slope, first_reach, jackknife_interval, side_curve, \
    smooth, t_quantile

INF = float("inf")


def c(points):
    compute, acc = zip(*points)
    return Curve(np.array(compute, float), np.array(acc, float))


def test_smooth_averages_two_evals_each_side_keeps_step_zero_apart_then_takes_the_running_max():
    # e=1: mean(0.5, 0.4, 0.6) = 0.5; e=2 and e=3: mean(0.5, 0.4, 0.6, 0.7) = 0.55; e=4: mean(0.4, 0.6, 0.7) = 0.5667,
    # which the running max keeps; the step-0 eval (0.2) is never in a window
    assert smooth(np.array([0.2, 0.5, 0.4, 0.6, 0.7])) == pytest.approx([0.2, 0.5, 0.55, 0.55, 0.5667], abs=1e-4)
    got = c([(0, 0.2), (10, 0.5), (20, 0.4), (30, 0.6), (40, 0.7)]).smoothed(np.array([5, 25, 45], float))
    assert got[:2] == pytest.approx([0.35, 0.55]) and np.isnan(got[2])  # 5: halfway 0.2 → 0.5; 45: past the end


def test_budget_grid_runs_to_the_last_budget_each_side_still_covers():
    base = {"a": [c([(0, 0), (10, 0), (20, 0)])], "b": [c([(0, 0), (10, 0), (20, 0), (30, 0), (40, 0)])]}
    cfg = {"x": [c([(0, 0), (15, 0), (30, 0), (45, 0)])]}
    # the baseline's extended label "b" reaches 40, the config 45: budgets up to 40
    assert budget_grid([base, cfg]).tolist() == [0, 10, 15, 20, 30, 40]


def test_first_reach_interpolates_starts_at_grid_zero_and_is_inf_when_never():
    grid, values = np.array([0, 10, 20], float), np.array([0.1, 0.3, 0.5])
    assert first_reach(grid, values, 0.4) == pytest.approx(15.0)  # 10 + 10·(0.4 − 0.3)/(0.5 − 0.3)
    assert first_reach(grid, values, 0.3) == pytest.approx(10.0)
    assert first_reach(grid, values, 0.05) == 0.0
    assert first_reach(grid, values, 0.6) == INF


def test_the_label_is_chosen_on_the_other_seeds_and_read_on_the_held_out_one():
    # one budget, labels A (seeds 0.5, 0.6, 0.7) and B (0.9, 0.3, 0.3): A is best on all seeds (0.6 vs 0.5).
    # Held out 0: A (0.65) beats B (0.3) → A's 0.5; held out 1: A 0.6 ties B 0.6 → the first, A: 0.6; held out 2:
    # B (0.6) beats A (0.55) → B's 0.3. Mean (0.5 + 0.6 + 0.3)/3 = 0.4667, below the in-sample max 0.6
    a = np.array([[[0.5], [0.6], [0.7]], [[0.9], [0.3], [0.3]]])
    values, labels = side_curve(a, [0, 1, 2])
    assert values == pytest.approx([0.4667], abs=1e-4) and labels.tolist() == [0]
    single, _ = side_curve(a, [2])  # one seed: its own best label, A (0.7 > 0.3)
    assert single == pytest.approx([0.7])


def test_saved_is_one_minus_reach_ratio_at_98_percent_of_the_baseline_best():
    base = {"lr": [c([(0, 0.0), (100, 0.49), (200, 0.5)])]}
    cfg = {"lr": [c([(0, 0.0), (60, 0.49), (200, 0.5)])]}
    out = compare(base, cfg, targets=(0.2,))
    # already monotone, so the isotonic fit keeps them: best 0.5 → threshold 0.49, which the baseline reaches at
    # 100 and cfg at 60 (grid 0, 60, 100, 200)
    assert out["base_best"] == pytest.approx(0.5) and out["threshold"] == pytest.approx(0.49)
    assert out["reach_base"] == pytest.approx(100) and out["reach_cfg"] == pytest.approx(60)
    assert out["saved_pct"] == pytest.approx(40)
    assert out["saved_pct_ci"] == [None, None]  # one seed a side: no variance to estimate
    # the absolute target 0.2: base 100·0.2/0.49 = 40.8, cfg 60·0.2/0.49 = 24.5 → 40% too
    assert out["targets"][0]["saved_pct"] == pytest.approx(40)


def test_a_config_that_never_reaches_is_censored_not_saved():
    out = compare({"lr": [c([(0, 0), (100, 0.5)])]}, {"lr": [c([(0, 0), (100, 0.3)])]})
    assert out["reach_cfg"] == INF and out["saved_pct"] is None
    assert out["saved_pct_ci"] == [None, None] and out["censored_fraction"] == 1.0


def test_identical_sides_read_zero_with_an_interval_around_it():
    seeds = [c(list(zip((0, 25, 50, 75, 100), a))) for a in
             [(0.30, 0.45, 0.49, 0.50, 0.50), (0.30, 0.36, 0.42, 0.47, 0.50), (0.30, 0.40, 0.47, 0.49, 0.505)]]
    out = compare({"lr": seeds}, {"lr": list(seeds)})
    assert out["saved_pct"] == pytest.approx(0) and out["budgets_ahead_fraction"] == 1.0
    lo, hi = out["saved_pct_ci"]
    assert lo is not None and hi is not None and lo < 0 < hi  # a real spread around 0, not [0, 0]


def test_jackknife_interval_by_hand():
    # side 1: replicates 0, 0.1, 0.2 → var (2/3)·(0.01 + 0 + 0.01) = 0.01333; side 2 constant → 0. SE 0.1155,
    # t(0.95, 6 − 2 = 4) = 2.1318 → half-width 0.2462 around 0.1
    lo, hi = jackknife_interval(0.1, [np.array([0.0, 0.1, 0.2]), np.array([0.1, 0.1, 0.1])])
    assert (lo, hi) == pytest.approx((0.1 - 0.2462, 0.1 + 0.2462), abs=1e-3)
    # a replicate where the config never reached opens the lower bound; one where the baseline never did, the upper
    assert jackknife_interval(0.1, [np.array([0.0, -INF, 0.2]), np.array([0.1, 0.1])])[0] is None
    assert jackknife_interval(0.1, [np.array([0.0, INF, 0.2]), np.array([0.1, 0.1])])[1] is None
    assert t_quantile(0.95, 1) == pytest.approx(6.3138, abs=1e-3) and t_quantile(0.05, 2) == pytest.approx(-2.92, abs=1e-3)


def test_end_slope_is_accuracy_per_doubling_over_the_last_doubling():
    # over compute 4..8 (the last doubling): +0.1 per doubling on one seed, +0.2 on the other; the evals before 4
    # rise faster and must not count: mean 0.15, t(0.95, 1)·sd/√2 = 6.314·0.0707/1.414
    seeds = [c([(1, 0.0), (2, 0.4), (4, 0.5), (6, 0.5 + 0.1 * np.log2(1.5)), (8, 0.6)]),
             c([(1, 0.0), (2, 0.1), (4, 0.5), (6, 0.5 + 0.2 * np.log2(1.5)), (8, 0.7)])]
    got = end_slope(seeds)
    assert got["per_doubling"] == pytest.approx(0.15)
    assert got["ci"] == pytest.approx([0.15 - 0.3157, 0.15 + 0.3157], abs=1e-3)

"""The compute-saved statistics on tiny hand-built curves, every expected number worked out by hand in a comment:
interpolated best-so-far, the merged budget grid, first reach, the LR frontier, saved % against 98% of the
baseline's best, censored bootstrap draws, and the ratio-1 check (identical sides must give an interval around 0)."""

import numpy as np
import pytest

from replay_rl.study import Curve, compare, first_reach, fraction_of_budgets_ahead, frontier, \
    merged_grid, percentile_bounds

INF = float("inf")


def c(points):
    compute, acc = zip(*points)
    return Curve(np.array(compute, float), np.array(acc, float))


def test_best_so_far_interpolates_the_running_max_and_is_nan_past_the_last_eval():
    # running max at the evals 0, 10, 20, 30: 0.2, 0.5, 0.5, 0.6 (the dip to 0.4 is not kept)
    curve = c([(0, 0.2), (10, 0.5), (20, 0.4), (30, 0.6)])
    got = curve.best_so_far(np.array([0, 5, 10, 15, 25, 30, 35], float))
    # 5: halfway 0.2 → 0.5 = 0.35; 15: flat 0.5; 25: halfway 0.5 → 0.6 = 0.55; 35: past the last eval
    assert got[:6] == pytest.approx([0.2, 0.35, 0.5, 0.5, 0.55, 0.6])
    assert np.isnan(got[6])


def test_merged_grid_is_both_sides_evals_up_to_the_shortest_last_eval_inclusive():
    a, b = c([(0, 0), (10, 0), (20, 0), (30, 0)]), c([(0, 0), (15, 0), (30, 0), (45, 0)])
    # union after 0 is 10, 15, 20, 30, 45; a ends at 30, so 45 goes and the last common budget 30 stays
    assert merged_grid([a, b]).tolist() == [10, 15, 20, 30]


def test_first_reach_interpolates_starts_at_grid_zero_and_is_inf_when_never():
    grid, values = np.array([0, 10, 20], float), np.array([0.1, 0.3, 0.5])
    assert first_reach(grid, values, 0.4) == pytest.approx(15.0)  # 10 + 10·(0.4 − 0.3)/(0.5 − 0.3)
    assert first_reach(grid, values, 0.3) == pytest.approx(10.0)  # exactly at an eval
    assert first_reach(grid, values, 0.05) == 0.0  # already there at the start
    assert first_reach(grid, values, 0.6) == INF


def test_budgets_ahead_compares_on_the_merged_grid_with_interpolated_curves():
    base = [c([(0, 0.0), (100, 0.5), (200, 0.6)])]
    cfg = [c([(0, 0.0), (50, 0.4), (150, 0.58), (200, 0.6)])]
    # grid 50, 100, 150, 200. base: 0.25, 0.5, 0.55, 0.6; cfg: 0.4, 0.4 + 0.18·50/100 = 0.49, 0.58, 0.6
    # ahead at 50, 150, 200 (a tie counts), behind at 100 → 3/4. On the baseline's evals with a step function
    # (the old rule) cfg at 100 would be judged on its eval at 50 and the result would be 1/2.
    assert fraction_of_budgets_ahead(base, cfg) == pytest.approx(0.75)
    out = compare({"lr": base}, {"lr": cfg}, draws=50)
    assert out["grid"] == [0, 50, 100, 150, 200]
    assert out["budgets_ahead_fraction"] == pytest.approx(0.75)
    assert out["max_lead"] == pytest.approx(0.15)  # at 50: 0.4 − 0.25


def test_frontier_takes_the_best_label_at_each_budget():
    side = {"1e-6": [c([(0, 0), (100, 0.6)]), c([(0, 0), (100, 0.4)])], "1e-5": [c([(0, 0), (50, 0.4), (100, 0.45)])]}
    # 1e-6: median of the two seeds at 50 is (0.3 + 0.2)/2 = 0.25, at 100 (0.6 + 0.4)/2 = 0.5; 1e-5: 0.4, 0.45
    values, labels = frontier(side, np.array([50, 100], float))
    assert values == pytest.approx([0.4, 0.5])
    assert labels == ["1e-5", "1e-6"]


def test_saved_is_one_minus_reach_ratio_at_98_percent_of_the_baseline_best():
    base = {"lr": [c([(0, 0.0), (100, 0.49), (200, 0.5)])]}
    cfg = {"lr": [c([(0, 0.0), (60, 0.49), (200, 0.5)])]}
    out = compare(base, cfg, draws=200)
    # best 0.5 → threshold 0.49, reached by the baseline at 100 and by cfg at 60 → 1 − 60/100 = 40%
    assert out["base_best"] == pytest.approx(0.5) and out["threshold"] == pytest.approx(0.49)
    assert out["reach_base"] == pytest.approx(100) and out["reach_cfg"] == pytest.approx(60)
    assert out["saved_pct"] == pytest.approx(40)
    assert out["saved_pct_ci"] == pytest.approx([40, 40])  # one seed a side: every draw is the same
    assert out["censored_fraction"] == 0.0


def test_frontier_against_frontier_and_each_at_its_own_best_differ_as_worked_out():
    base = {"a": [c([(0, 0.0), (100, 0.49), (200, 0.5)])]}
    cfg = {"x": [c([(0, 0.0), (60, 0.49), (200, 0.5)])], "y": [c([(0, 0.0), (40, 0.3), (200, 0.7)])]}
    # grid 0, 40, 60, 100, 200; threshold 0.49, baseline reach 100
    # x: 0, 0.327, 0.49, 0.493, 0.5; y: 0, 0.3, 0.35, 0.45, 0.7 → the frontier is x until 200, reach 60 → 40%
    front = compare(base, cfg, draws=100)
    assert front["saved_pct"] == pytest.approx(40)
    assert front["cfg_labels"] == ["x", "x", "x", "x", "y"]  # a tie at 0 goes to the first label
    # own best = the label highest at the last budget, y (0.7 > 0.5): reach 100 + 100·(0.49 − 0.45)/0.25 = 116
    own = compare(base, cfg, draws=100, pick="own_best")
    assert own["reach_cfg"] == pytest.approx(116)
    assert own["saved_pct"] == pytest.approx(-16)
    assert own["cfg_labels"] == ["y"] * 5


def test_percentile_bounds_are_none_where_they_fall_on_censored_draws():
    # 100 draws, nearest rank: the 5% bound is sorted index rint(99·0.05) = 5, the 95% one index rint(99·0.95) = 94
    ten_censored = [-INF] * 10 + list(range(90))
    assert percentile_bounds(ten_censored) == (None, 84.0)  # index 94 holds 94 − 10
    three_censored = [-INF] * 3 + list(range(97))
    assert percentile_bounds(three_censored) == (2.0, 91.0)


def test_a_config_that_never_reaches_is_censored_not_saved():
    out = compare({"lr": [c([(0, 0), (100, 0.5)])]}, {"lr": [c([(0, 0), (100, 0.3)])]}, draws=100)
    assert out["reach_cfg"] == INF and out["saved_pct"] is None
    assert out["saved_pct_ci"] == [None, None] and out["censored_fraction"] == 1.0


def test_partly_censored_draws_leave_the_lower_bound_undefined_and_report_their_share():
    # baseline on the grid 0, 50, 100: 0, 0.25, 0.5 → threshold 0.49, reached at 50 + 50·0.24/0.25 = 98
    base = {"lr": [c([(0, 0), (100, 0.5)])]}
    s1, s2, s3 = c([(0, 0), (50, 0.5), (100, 0.5)]), c([(0, 0), (100, 0.2)]), c([(0, 0), (100, 0.3)])
    out = compare(base, {"lr": [s1, s2, s3]})
    # the median of the three seeds never gets past 0.3 → not reached
    assert out["reach_cfg"] == INF and out["saved_pct"] is None
    # a draw's median reaches only with s1 drawn ≥ 2 of 3 times, P = 3·(1/3)²·(2/3) + (1/3)³ = 7/27; its median is
    # then s1 (0.5 at 50) reaching at 49, saved 1 − 49/98 = 50%. Censored share 20/27 > 5% → lower bound undefined
    assert out["censored_fraction"] == pytest.approx(20 / 27, abs=0.04)
    assert out["saved_pct_ci"][0] is None and out["saved_pct_ci"][1] == pytest.approx(50)


def identical_sides(acc: list[tuple]) -> dict:
    """compare() of seeds (evals at compute 0, 25, 50, 75, 100) against a copy of themselves."""
    seeds = [c(list(zip((0, 25, 50, 75, 100), a))) for a in acc]
    return compare({"lr": seeds}, {"lr": list(seeds)})


def test_identical_sides_give_an_interval_that_contains_zero():
    # the ratio-1 ladder rung: replay that behaves exactly like the baseline must not look like a saving. The seeds
    # differ in when they get to ~0.50 (75 for the median), not in how high they get
    out = identical_sides([(0.30, 0.45, 0.49, 0.50, 0.50), (0.30, 0.36, 0.42, 0.47, 0.50),
                           (0.31, 0.40, 0.47, 0.49, 0.505), (0.29, 0.38, 0.44, 0.50, 0.50),
                           (0.30, 0.42, 0.46, 0.48, 0.502)])
    assert out["reach_base"] == out["reach_cfg"] == pytest.approx(75) and out["saved_pct"] == pytest.approx(0)
    assert out["budgets_ahead_fraction"] == 1.0 and out["censored_fraction"] == 0.0
    lo, hi = out["saved_pct_ci"]
    assert lo is not None and hi is not None and lo < 0 < hi < 100  # a real spread around 0, not [0, 0]


def test_identical_sides_with_noisy_bests_contain_zero_with_an_undefined_lower_bound():
    # here the seeds' bests (0.47, 0.50, 0.49, 0.52, 0.49) differ by more than 2%: a draw whose config median best
    # is 0.47 or 0.49 misses 98% of a baseline draw whose median best is 0.52 (0.98 · 0.52 ≈ 0.51), so ~10% of
    # draws are censored. The lower bound is then "not reached" (None), the upper one stays positive: 0 is inside
    out = identical_sides([(0.30, 0.36, 0.33, 0.45, 0.47), (0.31, 0.40, 0.44, 0.42, 0.50),
                           (0.29, 0.33, 0.41, 0.49, 0.48), (0.30, 0.38, 0.37, 0.46, 0.52),
                           (0.32, 0.35, 0.46, 0.47, 0.49)])
    assert out["saved_pct"] == pytest.approx(0) and 0.05 < out["censored_fraction"] < 0.2
    lo, hi = out["saved_pct_ci"]
    assert lo is None and 0 < hi < 100

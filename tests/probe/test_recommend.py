"""From (μ, α, ρ) to a setting: agrees with theory.plan, picks the cheapest split, handles the limits."""

import pytest

from replay_rl.probe.recommend import ALPHA_MIN, at_split, lr_for, mu_direction, recommend
from replay_rl.analysis.theory import plan


def test_capacity_at_the_split_is_plans_and_the_best_split_costs_no_more():
    rec = recommend(5.28, 0.25, 0.1, 128, (5, 3), 1.5e-4, 5.28 * 3 / 5, horizon_cap=12)
    here, best = rec["at_config_split"], rec["best_split"]
    assert here["capacity"] == plan(5.28, 0.25, 0.1, 128, 5 / 3, discrete=True).capacity == 162
    assert here["replay_ratio"] == pytest.approx(5.28 * 3 / 5)
    assert here["lr"] == pytest.approx(1.5e-4)  # the config's own replay ratio keeps the config's LR
    assert best["cost"] <= here["cost"] and best["generators"] + best["learners"] == 8
    assert rec["theorem"]["x_star"] == 5 and rec["theorem"]["feasible"]


def test_capacity_rounds_up_to_the_learner_count_and_intervals_come_from_the_draws():
    rec = recommend(5.28, 0.1, 0.1, 128, (5, 3), 1e-4, 1.0, 12, alpha_draws=[0.08, 0.1, 0.12] * 20,
                    rho_draws=[0.05, 0.1, 0.2] * 20, multiple=3)
    here = rec["at_config_split"]
    assert here["capacity"] % 3 == 0
    lo, hi = here["capacity_interval"]
    assert lo <= here["capacity"] <= hi
    assert here["lr"] == pytest.approx(1e-4 / here["replay_ratio"])  # an on-policy config: lr / y


def test_limits_no_growth_keeps_the_split_at_the_longest_horizon_and_fast_growth_is_on_policy():
    flat = recommend(5.28, ALPHA_MIN / 2, 0.1, 128, (5, 3), 1e-4, 1.0, 12, alpha_draws=[0.0, 0.2],
                     rho_draws=[0.1, 0.1])
    assert flat["at_config_split"]["limit"] == "unbounded" and flat["theorem"] is None
    assert flat["best_split"]["generators"] == 5
    assert flat["at_config_split"]["horizon"] == pytest.approx(12, abs=0.1)
    assert flat["at_config_split"]["capacity_interval"][1] is None  # an unbounded draw: no finite upper end
    steep = at_split(5.28, 0.6, 0.1, 128, 5, 3, 12)
    assert steep["limit"] == "on_policy" and steep["capacity"] == 128


def test_rho_outside_zero_one_is_clipped_and_said():
    rec = recommend(5.28, 0.2, -0.3, 128, (5, 3), 1e-4, 1.0, 12)
    assert rec["rho"] == 0.0 and rec["rho_clipped"]


def test_mu_direction_smaller_mu_gives_a_shorter_horizon_and_less_reuse_but_more_rollouts():
    out = mu_direction(0.1, 0.1, 128, (5, 3), 12, alpha_draws=[0.08, 0.12], rho_draws=[0.05, 0.15])
    for where in ("theorem", "best_split"):
        assert out[where]["smaller_x"] and out[where]["smaller_y"]
        assert not out[where]["smaller_n"]  # N = B·x/y falls with μ at a fixed B: 465 at μ=2, 314 at μ=10
    assert out["at_config_split"]["smaller_y"] and not out["at_config_split"]["smaller_n"]
    assert out["share_draws_smaller_y_at_config_split"] == 1.0
    assert out["low"]["mu"] == 2.0 and out["high"]["mu"] == 10.0


def test_lr_rule():
    assert lr_for(2.0, 1e-4, 1.0) == pytest.approx(5e-5)
    assert lr_for(3.0, 1e-4, 3.0) == pytest.approx(1e-4)


def test_mu_direction_reads_a_probe_json():
    from replay_rl.probe.recommend import mu_direction_from_probe

    result = {"alpha": {"value": 0.1}, "rho": {"value": 0.1}, "draws": {"alpha": [0.08, None, 0.12],
              "rho": [0.05, 0.1, 0.15]}, "run": {"batch_size": 128, "split": [5, 3], "horizon": 12}}
    out = mu_direction_from_probe(result)
    assert out["best_split"]["smaller_y"] and out["share_draws_smaller_y_at_config_split"] == 1.0

import json
import math
import subprocess
import sys

import pytest

from replay_rl.analysis.theory import cost, objective, optimum_closed_form, optimum_numeric, plan


@pytest.mark.parametrize("mu, alpha, rho, x, y", [
    (5.28, 0.25, 0.1, 2.43, 3.21),   # hand-checked in shared/PAPER.md
    (6.84, 0.25, 0.1, 2.79, 3.86),
    (5.28, 0.1, 0.05, 21.6, 7.41),
])
def test_closed_form_reproduces_hand_checked_values(mu, alpha, rho, x, y):
    xs, ys = optimum_closed_form(mu, alpha, rho)
    assert xs == pytest.approx(x, rel=2e-3) and ys == pytest.approx(y, rel=2e-3)


@pytest.mark.parametrize("mu, alpha, rho", [(5.28, 0.25, 0.1), (2.0, 0.4, 0.2), (7.0, 0.05, 0.01)])
def test_numeric_minimiser_agrees_with_closed_form(mu, alpha, rho):
    xc, yc = optimum_closed_form(mu, alpha, rho)
    xn, yn = optimum_numeric(mu, alpha, rho)
    assert xn == pytest.approx(xc, rel=1e-3) and yn == pytest.approx(yc, rel=1e-3)
    assert objective(xn, mu, alpha, rho) <= objective(xn * 1.1, mu, alpha, rho)


def test_optimum_grows_with_mu():
    assert optimum_closed_form(6.84, 0.25, 0.1)[0] > optimum_closed_form(5.28, 0.25, 0.1)[0]


def test_plan_recommends_capacity_for_a_split():
    p = plan(5.28, 0.25, 0.1, batch_size=60, w_over_t=5 / 3)
    assert p.rollouts_per_step == pytest.approx(60 * (5 / 3) / 5.28)
    assert p.replay_ratio_at_split == pytest.approx(5.28 / (5 / 3))  # y = B/R = μ/(W/T), fixed by the hardware
    assert p.x_at_split == pytest.approx(1 / (0.1 + 1 / 3.168))   # (1−2α)/(2α(ρ + 1/y)) at α = ¼
    assert p.capacity == max(60, round(p.x_at_split * p.rollouts_per_step))  # a shard must hold one batch
    assert p.w_over_t_for_y_star == pytest.approx(5.28 / p.y_star)


def test_plan_cli():
    out = subprocess.run([sys.executable, "-m", "replay_rl.cli", "plan", "--mu", "5.28", "--alpha", "0.25", "--rho",
                          "0.1", "--batch-size", "60", "--w-t", "5/3"], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["y_star"] == pytest.approx(3.21, abs=0.01) and got["x_star"] == pytest.approx(2.43, abs=0.01)
    bad = subprocess.run([sys.executable, "-m", "replay_rl.cli", "plan", "--mu", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "mu must be a finite number > 0" in bad.stderr


def plan_cli(*args):
    return subprocess.run([sys.executable, "-m", "replay_rl.cli", "plan", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, code, message", [
    (["--mu", "5.28", "--alpha", "0.6"], 1, "no interior optimum at alpha = 0.6 ≥ 1/2"),
    (["--mu", "5.28", "--alpha", "0.5"], 1, "no interior optimum at alpha = 0.5 ≥ 1/2"),
    (["--mu", "5.28", "--alpha", "0"], 1, "no interior optimum at alpha = 0: "),
    (["--mu", "nan"], 2, "mu must be a finite number > 0 (got nan)"),
    (["--mu", "inf"], 2, "mu must be a finite number > 0 (got inf)"),
    (["--mu", "5.28", "--batch-size", "60", "--w-t", "5/0"], 2, "--w-t: expected W/T like 5/3"),
    (["--mu", "5.28", "--batch-size", "60", "--w-t", "abc"], 2, "--w-t: expected W/T like 5/3"),
    (["--mu", "5.28", "--batch-size", "60", "--w-t", "-5/3"], 2, "W/T must be a finite number > 0"),
    (["--mu", "5.28", "--batch-size", "0", "--w-t", "5/3"], 2, "batch_size must be ≥ 1 (got 0)"),
])
def test_plan_never_answers_nonsense(args, code, message):
    out = plan_cli(*args)
    assert out.returncode == code and out.stderr.startswith("plan: ") and message in out.stderr and len(out.stderr.strip().splitlines()) == 1 and not out.stdout


def test_plan_says_when_it_raises_n_to_the_batch_size():
    out = plan_cli("--mu", "5.28", "--batch-size", "60", "--w-t", "5/3")
    got = json.loads(out.stdout)
    assert got["capacity_unclamped"] == 46 and got["capacity"] == 60  # 2.41 · 18.9 = 45.6
    assert got["x_at_capacity"] == pytest.approx(60 / got["rollouts_per_step"]) and got["x_at_capacity"] > got["x_star"]
    assert ("the best horizon 2.41 gives N = 46 < B, so N is raised to B = 60 (horizon 3.17)" in out.stderr)


def test_discrete_horizon_at_the_paper_point_is_twice_the_power_law():
    from replay_rl.analysis.theory import optimum_discrete

    x, y = optimum_discrete(5.28, 0.25, 0.1)
    assert x == 5 and y == pytest.approx(math.sqrt(5.28 / (0.1 + 1 / 5)))
    assert plan(5.28, 0.25, 0.1).x_star == pytest.approx(2.43, abs=0.01)
    # brute force over integer horizons agrees
    objective = lambda h: sum(k ** 0.5 for k in range(1, h + 1)) / h * (  # noqa: E731
        math.sqrt(1 / 5.28) + math.sqrt(0.1 + 1 / h)) ** 2
    assert min(range(1, 500), key=objective) == 5
    p = plan(5.28, 0.25, 0.1, 60, 5 / 3, discrete=True)
    assert p.x_star == 5 and p.feasible and (p.x_feasible, p.y_feasible) == (p.x_star, p.y_star)  # 5 ≥ 4.20
    # at the split y = 3.168 is fixed: mean(√h, h ≤ H)·(1/y + ρ + 1/H) is 1.035, 1.023, 1.032 at H = 3, 4, 5
    assert p.x_at_split == 4 and p.capacity == round(4 * 60 * (5 / 3) / 5.28)


# N ≥ B (x ≥ y): whether the theorem's point is feasible, and the best point that is

def power_cost(x, y, mu, alpha, rho):
    return cost(x, y, mu, rho, x ** (2 * alpha))


def test_paper_point_is_infeasible_and_the_best_feasible_point_has_n_equal_b():
    p = plan(5.28, 0.25, 0.1, batch_size=128, w_over_t=5 / 3)
    assert not p.feasible and p.x_star == pytest.approx(2.43, abs=0.01) and p.y_star == pytest.approx(3.21, abs=0.01)
    # on x = y: ρ(1+2α)x² + 2α(ρμ+2)x − 2μ(1−2α) = 0.15x² + 1.264x − 5.28 = 0
    x = (-1.264 + math.sqrt(1.264**2 + 4 * 0.15 * 5.28)) / (2 * 0.15)
    assert p.x_feasible == p.y_feasible == pytest.approx(x) == pytest.approx(3.0635, abs=1e-4)
    assert p.w_over_t_feasible == pytest.approx(5.28 / x) and p.capacity_optimal_split == 128
    # the split fixes y = 5.28·3/5 = 3.168 > the best horizon 1/(0.1 + 1/3.168) = 2.41, so N = B
    assert p.capacity == 128 and p.capacity_unclamped == round(2.4058 * 128 * (5 / 3) / 5.28) == 97


def test_small_mu_point_is_feasible_and_left_alone():
    p = plan(1.0, 0.1, 0.1, batch_size=128, w_over_t=0.5)
    # y* = (−0.1 + √(0.01 + 0.08))/0.1 = 2, x* = 4/(1 − 0.4) = 20/3
    assert p.feasible and p.y_star == pytest.approx(2) and p.x_star == pytest.approx(20 / 3)
    assert (p.x_feasible, p.y_feasible) == (p.x_star, p.y_star)
    # W/T = μ/y* realises y*, so the best horizon at the split is x* itself: N = x*·B/y* = 426.7
    assert p.x_at_split == pytest.approx(20 / 3) and p.capacity == p.capacity_optimal_split == 427


@pytest.mark.parametrize("alpha, rho", [(0.1, 0.05), (0.2, 0.1)])
def test_feasible_exactly_below_the_mu_threshold(alpha, rho):
    mu_max = (1 - 4 * alpha) * (1 - 2 * alpha) / (4 * alpha**2 * rho)  # 240 and 7.5
    assert plan(mu_max * 0.99, alpha, rho).feasible and not plan(mu_max * 1.01, alpha, rho).feasible


@pytest.mark.parametrize("mu", [0.01, 1.0, 5.28, 100.0])
def test_never_feasible_from_alpha_one_quarter(mu):
    assert not plan(mu, 0.25, 0.1).feasible and not plan(mu, 0.3, 0.01).feasible


@pytest.mark.parametrize("mu, alpha, rho", [(5.28, 0.25, 0.1), (5.28, 0.1, 0.05), (2.0, 0.4, 0.2), (5.28, 0.25, 0.0),
                                            (1.0, 0.1, 0.1), (50.0, 0.1, 0.05)])
def test_feasible_point_beats_a_grid_of_feasible_points(mu, alpha, rho):
    p = plan(mu, alpha, rho)
    assert p.x_feasible >= p.y_feasible and p.feasible == (p.x_star >= p.y_star)
    best = power_cost(p.x_feasible, p.y_feasible, mu, alpha, rho)
    grid = [math.exp(i / 40) for i in range(-200, 250)]
    assert all(power_cost(x, y, mu, alpha, rho) >= best * (1 - 1e-9) for x in grid for y in grid if y <= x)
    for f in (0.98, 1.02):  # and its neighbours on the boundary or in the interior are worse
        x = p.x_feasible * f
        y = min(x, p.y_feasible) if p.feasible else x
        assert power_cost(x, y, mu, alpha, rho) > best


@pytest.mark.parametrize("mu, alpha, rho, w_over_t", [(5.28, 0.25, 0.1, 5 / 3), (5.28, 0.1, 0.05, 5 / 3),
                                                      (5.28, 0.1, 0.05, 6 / 2), (2.0, 0.2, 0.1, 1.0)])
def test_capacity_is_the_best_n_at_the_split(mu, alpha, rho, w_over_t):
    p = plan(mu, alpha, rho, 60, w_over_t)
    r, y = p.rollouts_per_step, p.replay_ratio_at_split
    brute = min(range(60, 5000), key=lambda n: power_cost(n / r, y, mu, alpha, rho))
    assert p.capacity >= 60 and abs(p.capacity - brute) <= 1


def test_discrete_feasible_point_matches_brute_force():
    mu, alpha, rho = 5.28, 0.3, 0.1
    p = plan(mu, alpha, rho, discrete=True)
    sbar2 = lambda h: sum(k ** (2 * alpha) for k in range(1, h + 1)) / h  # noqa: E731
    ys = [i / 100 for i in range(1, 2000)]
    h, y = min(((h, y) for h in range(1, 60) for y in ys if y <= h), key=lambda c: cost(*c, mu, rho, sbar2(c[0])))
    assert not p.feasible and p.x_feasible == h == 4 and p.y_feasible == pytest.approx(y, abs=0.01)


def test_cli_names_the_infeasible_point_and_the_feasible_one():
    err = plan_cli("--mu", "5.28", "--batch-size", "128", "--w-t", "5/3").stderr.splitlines()
    assert err[0] == ("plan: Theorem 4.5's point is infeasible: x* = 2.43 < y* = 3.21 means N < B, a buffer "
                      "smaller than one batch")
    assert err[1] == "plan: best feasible point: x = y = 3.06 (N = B) at W/T = 1.72"
    assert "infeasible" not in plan_cli("--mu", "1", "--alpha", "0.1").stderr

import json
import math
import subprocess
import sys

import pytest

from replay_rl.theory import objective, optimum_closed_form, optimum_numeric, plan


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
    assert p.capacity == max(60, round(p.x_star * p.rollouts_per_step))  # a shard must hold one batch
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
    assert got["capacity_unclamped"] == 46 and got["capacity"] == 60
    assert got["x_at_capacity"] == pytest.approx(60 / got["rollouts_per_step"]) and got["x_at_capacity"] > got["x_star"]
    assert "N is raised to B = 60; that N implies a horizon of 3.17 (x* is 2.43)" in out.stderr


def test_discrete_horizon_at_the_paper_point_is_twice_the_power_law():
    from replay_rl.theory import optimum_discrete

    x, y = optimum_discrete(5.28, 0.25, 0.1)
    assert x == 5 and y == pytest.approx(math.sqrt(5.28 / (0.1 + 1 / 5)))
    assert plan(5.28, 0.25, 0.1).x_star == pytest.approx(2.43, abs=0.01)
    # brute force over integer horizons agrees
    objective = lambda h: sum(k ** 0.5 for k in range(1, h + 1)) / h * (  # noqa: E731
        math.sqrt(1 / 5.28) + math.sqrt(0.1 + 1 / h)) ** 2
    assert min(range(1, 500), key=objective) == 5
    p = plan(5.28, 0.25, 0.1, 60, 5 / 3, discrete=True)
    assert p.x_star == 5 and p.capacity == round(5 * 60 * (5 / 3) / 5.28)

import json
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
    assert bad.returncode == 2 and "mu must be > 0" in bad.stderr

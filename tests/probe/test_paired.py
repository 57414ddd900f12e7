"""A rollout measured at two probe points is its own control: age's effect on retention apart from cohort."""

import numpy as np

from replay_rl.probe.estimators import Sketches
from replay_rl.probe.paired import paired_retention

K, G, RANK = 128, 8, 8


def remeasured(shrink: float, cohort: float, groups: int = 6, ages: int = 8, step: int = 4, seed: int = 0):
    """Two probe points `step` versions apart, ages 1..ages at each: the rollouts of ages 1..ages−step at the first
    are ages 1+step.. at the second, with the same (rank-8, group-correlated) noise. g = c(t_i)·(1 − shrink·τ)·
    (∇F_p + ε_i), c(t_i) = 1 + cohort·(t_i + 2)/8 on buffer rollouts: the cohort trend moves retention by age at
    one point, not within a rollout."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((K, RANK)))[0] / np.sqrt(RANK)
    grads = [rng.standard_normal(K) for _ in range(2)]
    grads = [g * np.sqrt(0.5) / np.linalg.norm(g) for g in grads]
    born = np.arange(-ages, step)            # generation version t_i of each cohort; points at t = 0 and t = step
    eps = {t: ((0.37 * rng.standard_normal((groups, 1, RANK)) + 0.93 * rng.standard_normal((groups, G, RANK)))
               @ basis.T).reshape(-1, K) for t in born}
    g, age, cl, pr, rid = [], [], [], [], []
    for p, t_p in enumerate((0, step)):
        rows = [(t_p - t, t) for t in born if 1 <= t_p - t <= ages] + [(0, None)] * 1
        for tau, t in rows:
            e = eps[t] if t is not None else (rng.standard_normal((64, G, RANK)) @ basis.T).reshape(-1, K)
            n = len(e)
            coh = 1 + cohort * (t + 2) / 8 if t is not None else 1.0  # the fresh sets' scale stays 1
            g.append(coh * (1 - shrink * tau) * (grads[p] + e))
            age += [tau] * n
            ids = (1000 + t) * 100 + np.arange(n) if t is not None else 10**7 + p * 10**5 + np.arange(n)
            rid.append(ids)
            cl.append(ids // G)
            pr += [p] * n
    return Sketches(np.concatenate(g), np.array(age), np.concatenate(cl), np.array(pr), 0.0,
                    rollout=np.concatenate(rid))


def test_a_cohort_trend_does_not_move_the_paired_change():
    sk = remeasured(shrink=0.0, cohort=0.5)
    out = paired_retention(sk, draws=200)
    first = [o["retention"][0] for o in out]
    assert first[0] - first[-1] > 0.1   # unpaired, at one point: retention falls with age by cohort alone
    assert [o["ages"] for o in out] == [[1, 5], [2, 6], [3, 7], [4, 8]]
    assert all(o["rollouts"] == 6 * G for o in out)
    assert sum(o["change"]["lo"] <= 0 <= o["change"]["hi"] for o in out) >= 3
    assert all(abs(o["change"]["value"]) < 0.15 for o in out)


def test_shrinkage_shows_in_the_paired_change():
    out = paired_retention(remeasured(shrink=0.05, cohort=0.0, seed=1), draws=200)
    covered = [o["change"]["lo"] <= -0.2 <= o["change"]["hi"] for o in out]   # (1 − 0.05(τ+4)) − (1 − 0.05τ)
    assert sum(covered) >= 3 and all(o["change"]["hi"] < 0 for o in out)
    assert paired_retention(Sketches(np.zeros((2, 2)), np.array([0, 1]), np.array([0, 1]), np.array([0, 0]), 0.0)) == []

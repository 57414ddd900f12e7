"""The estimators recover a known α, ρ and κ from synthetic gradient sketches built to Assumptions 4.2/4.3."""

import numpy as np
import pytest

from replay_rl.probe.estimators import Sketches, estimate


def synthetic(alpha: float, rho: float, kappa: float = 0.0, probes: int = 4, ages: int = 10, clusters: int = 3,
              size: int = 8, fresh_clusters: int = 12, k: int = 256, seed: int = 0) -> Sketches:
    """g_i = ∇F + b(τ_i) + ε_i with E‖ε_i‖² = (τ_i/τ₀)^{2α}, corr(ε_i, ε_j) = ρ|τ_i − τ_j|/N for buffer rollouts
    of different ages (0 at the same age, as the assumption's form says), fresh rollouts independent at σ(1), and a
    bias b(τ) = κ·Δ(τ)·u along one unit vector u with drift Δ(τ) = 0.05·τ."""
    rng = np.random.default_rng(seed)
    tau0 = 0.5
    per_age = clusters * size
    age = np.repeat(np.arange(1, ages + 1), per_age)
    n_buf = len(age)
    sd = (age / tau0) ** alpha
    corr = rho * np.abs(age[:, None] - age[None, :]) / n_buf
    cov = sd[:, None] * sd[None, :] * (np.eye(n_buf) + corr * (1 - np.eye(n_buf)))
    vals, vecs = np.linalg.eigh(cov)
    assert vals.min() > 0  # the assumption's correlation structure is a valid covariance at these sizes
    root = vecs * np.sqrt(vals)
    drift = np.tile(0.05 * np.arange(ages + 1), (probes, 1))
    u = rng.standard_normal(k)
    u /= np.linalg.norm(u)
    g, a, cl, pr = [], [], [], []
    for p in range(probes):
        grad = rng.standard_normal(k)
        eps = root @ rng.standard_normal((n_buf, k)) / np.sqrt(k)        # per coordinate: covariance cov / k
        bias = kappa * drift[p, age][:, None] * u
        fresh = rng.standard_normal((fresh_clusters * size, k)) * (1 / tau0) ** alpha / np.sqrt(k)
        g += [grad + bias + eps, grad + fresh]
        a += [age, np.zeros(fresh_clusters * size, int)]
        base = p * 10_000
        cl += [base + np.repeat(np.arange(ages * clusters), size),
               base + 5_000 + np.repeat(np.arange(fresh_clusters), size)]
        pr += [np.full(n_buf + fresh_clusters * size, p)]
    return Sketches(np.concatenate(g), np.concatenate(a), np.concatenate(cl), np.concatenate(pr), float(n_buf),
                    drift if kappa else None)


def rho_variance_truth(alpha: float, rho: float, ages: int = 10, per_age: int = 24) -> float:
    """R·c̄ of the synthetic covariance: c̄ pooled over every pair of distinct buffer rollouts."""
    age = np.repeat(np.arange(1, ages + 1), per_age)
    sd = (age / 0.5) ** alpha
    off = 1 - np.eye(len(age))
    cov = np.outer(sd, sd) * rho * np.abs(age[:, None] - age[None, :]) / len(age) * off
    return per_age * cov.sum() / (np.outer(sd, sd) * off).sum()


@pytest.mark.parametrize("alpha,rho", [(0.25, 0.3), (0.1, 0.0), (0.4, 0.45)])
def test_alpha_and_rho_are_recovered_within_their_intervals(alpha, rho):
    est = estimate(synthetic(alpha, rho), draws=200)
    assert est.alpha.lo <= alpha <= est.alpha.hi
    assert est.rho.lo <= rho <= est.rho.hi
    assert abs(est.alpha.value - alpha) < 0.03
    assert abs(est.rho.value - rho) < 0.15
    assert est.alpha.hi - est.alpha.lo < 0.1   # informative, not just wide
    # σ²(τ) per age against the truth (τ/τ₀)^{2α}, τ₀ = 0.5; the fresh set is at σ(1)
    truth = {int(t): (max(t, 1) / 0.5) ** (2 * alpha) for t in est.ages}
    for t, s in zip(est.ages, est.sigma2):
        assert s.lo <= truth[int(t)] * 1.02 and truth[int(t)] * 0.98 <= s.hi
    assert len(est.alpha_draws) == len(est.rho_draws) == len(est.rho_variance_draws) == 200
    truth_v = rho_variance_truth(alpha, rho)
    assert est.rho_variance.lo <= truth_v <= est.rho_variance.hi
    assert est.rho_variance.hi - est.rho_variance.lo < est.rho.hi - est.rho.lo  # the tighter of the two
    for s in est.signal:  # no bias: every age carries the full mean gradient
        assert s.lo <= 1.0 <= s.hi


def test_kappa_is_recovered_and_no_bias_reads_near_zero():
    est = estimate(synthetic(0.2, 0.2, kappa=3.0), draws=200)
    assert est.kappa.lo <= 3.0 <= est.kappa.hi
    assert abs(est.kappa.value - 3.0) < 0.6
    assert estimate(synthetic(0.2, 0.2, kappa=1e-9), draws=50).kappa.value < 0.6


def test_same_time_pairs_read_zero_when_the_assumption_holds():
    est = estimate(synthetic(0.25, 0.3), draws=10)
    assert abs(est.corr_same_group) < 0.02 and abs(est.corr_same_time) < 0.02


def test_too_little_data_is_one_clear_error():
    sk = synthetic(0.25, 0.3)
    keep = sk.age <= 1
    with pytest.raises(ValueError, match="two ages"):
        estimate(Sketches(sk.g[keep], sk.age[keep], sk.cluster[keep], sk.probe[keep], sk.capacity))

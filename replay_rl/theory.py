"""Theorem 4.5 of the paper: the compute-optimal staleness horizon x* = N/R and replay ratio y* = B/R.

R = rollouts inserted per learner step, B = batch size, N = buffer capacity, μ = generation/training cost ratio,
ρ = sample–iterate correlation, σ̄(x) = average gradient-noise scale over ages 1..x. With the power law
σ(x) = (x/τ)^α, σ̄²(x) ∝ x^{2α}, and for α < 1/2 the optimum has a closed form (§9.3.2):

    y* = (−α + √(α² + μρ(1−2α))) / ρ,        x* = y*² / (μ − ρ y*²)

In general x* = argmin_x σ̄²(x)·(√(1/μ) + √(ρ + 1/x))² and y* = √(μ / (ρ + 1/x*)); `optimum_numeric` solves that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    x_star: float            # optimal staleness horizon N/R (max age in steps)
    y_star: float            # optimal replay ratio B/R (mean uses per rollout)
    rollouts_per_step: float | None = None   # R ≈ B·(W/T)/μ for the given hardware split
    capacity: int | None = None              # recommended N = x*·R
    replay_ratio_at_split: float | None = None  # B/R the given W/T actually yields
    w_over_t_for_y_star: float | None = None    # the W/T that would give y* (= μ / y*)


def _check(mu: float, alpha: float, rho: float) -> None:
    if mu <= 0:
        raise ValueError(f"mu must be > 0 (got {mu})")
    if not 0 <= alpha:
        raise ValueError(f"alpha must be ≥ 0 (got {alpha})")
    if not 0 <= rho <= 1:
        raise ValueError(f"rho must be in [0, 1] (got {rho})")


def optimum_closed_form(mu: float, alpha: float, rho: float) -> tuple[float, float]:
    """(x*, y*) under power-law variance; needs 0 < α < 1/2 and ρ > 0."""
    _check(mu, alpha, rho)
    if not (0 < alpha < 0.5 and rho > 0):
        raise ValueError("the closed form needs 0 < alpha < 1/2 and rho > 0; use optimum_numeric")
    y = (-alpha + math.sqrt(alpha**2 + mu * rho * (1 - 2 * alpha))) / rho
    return y**2 / (mu - rho * y**2), y


def objective(x: float, mu: float, alpha: float, rho: float) -> float:
    """σ̄²(x)·(√(1/μ) + √(ρ + 1/x))² with σ̄²(x) ∝ x^{2α} (constants dropped)."""
    return x ** (2 * alpha) * (math.sqrt(1 / mu) + math.sqrt(rho + 1 / x)) ** 2


def optimum_numeric(mu: float, alpha: float, rho: float, lo: float = 1e-4, hi: float = 1e6) -> tuple[float, float]:
    """(x*, y*) by golden-section search on log x (the objective is unimodal in log x for the power law)."""
    _check(mu, alpha, rho)
    f = lambda t: objective(math.exp(t), mu, alpha, rho)  # noqa: E731
    a, b, g = math.log(lo), math.log(hi), (math.sqrt(5) - 1) / 2
    for _ in range(200):
        c, d = b - g * (b - a), a + g * (b - a)
        a, b = (a, d) if f(c) < f(d) else (c, b)
    x = math.exp((a + b) / 2)
    return x, math.sqrt(mu / (rho + 1 / x))


def plan(mu: float, alpha: float, rho: float, batch_size: int | None = None, w_over_t: float | None = None) -> Plan:
    """x*, y*, and with B and W/T the recommended buffer size N = x*·R where R = B·(W/T)/μ."""
    try:
        x, y = optimum_closed_form(mu, alpha, rho)
    except ValueError:
        x, y = optimum_numeric(mu, alpha, rho)
    if batch_size is None or w_over_t is None:
        return Plan(x, y)
    r = batch_size * w_over_t / mu
    return Plan(x, y, r, max(batch_size, round(x * r)), batch_size / r, mu / y)

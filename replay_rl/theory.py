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
    capacity: int | None = None              # recommended N = x*·R, raised to B when that is smaller
    capacity_unclamped: int | None = None    # x*·R before raising it to B
    x_at_capacity: float | None = None       # the horizon N/R the recommended N implies (≠ x* when clamped)
    replay_ratio_at_split: float | None = None  # B/R the given W/T actually yields
    w_over_t_for_y_star: float | None = None    # the W/T that would give y* (= μ / y*)


class NoInteriorOptimum(ValueError):
    """The theorem's objective has no minimum inside (0, ∞) for these parameters; the message gives the limit."""


def _check(mu: float, alpha: float, rho: float) -> None:
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu must be a finite number > 0 (got {mu})")
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number ≥ 0 (got {alpha})")
    if not 0 <= rho <= 1:
        raise ValueError(f"rho must be in [0, 1] (got {rho})")


def _check_interior(alpha: float) -> None:
    """σ̄²(x) ∝ x^{2α} against the (√(1/μ) + √(ρ + 1/x))² that staleness buys: the product falls forever at α = 0
    and never falls (x^{2α−1} at small x) at α ≥ 1/2."""
    if alpha == 0:
        raise NoInteriorOptimum("no interior optimum at alpha = 0: staleness adds no gradient noise, so the horizon "
                                "x* is unbounded (take N as large as memory allows)")
    if alpha >= 0.5:
        raise NoInteriorOptimum(f"no interior optimum at alpha = {alpha:g} ≥ 1/2: gradient noise grows at least as "
                                "fast as staleness saves, so x* → 0 (stay on-policy: N = B, replay ratio 1)")


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


def optimum_discrete(mu: float, alpha: float, rho: float, h_max: int = 100_000) -> tuple[float, float]:
    """(x*, y*) with the exact σ̄²(H) = mean of σ(h)² = h^{2α} over the integer ages h = 1..H, instead of the
    power law's x^{2α}. At the paper's point (μ=5.28, α=¼, ρ=0.1) the horizon is 5, twice the closed form's 2.43:
    the mean over ages 1..H grows more slowly than H^{2α}, so a longer horizon costs less noise than it says."""
    _check(mu, alpha, rho)
    total, best_h, best_f = 0.0, 1, math.inf
    for h in range(1, h_max + 1):
        total += h ** (2 * alpha)
        f = total / h * (math.sqrt(1 / mu) + math.sqrt(rho + 1 / h)) ** 2
        if f < best_f:
            best_h, best_f = h, f
        elif h > 4 * best_h + 100:  # past the single minimum: the mean of h^{2α} only keeps growing
            break
    return float(best_h), math.sqrt(mu / (rho + 1 / best_h))


def plan(mu: float, alpha: float, rho: float, batch_size: int | None = None, w_over_t: float | None = None,
         discrete: bool = False) -> Plan:
    """x*, y*, and with B and W/T the recommended buffer size N = x*·R where R = B·(W/T)/μ. discrete: the exact
    mean of σ² over integer ages (optimum_discrete) instead of the closed-form power law."""
    _check(mu, alpha, rho)
    _check_interior(alpha)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1 (got {batch_size})")
    if w_over_t is not None and not (math.isfinite(w_over_t) and w_over_t > 0):
        raise ValueError(f"W/T must be a finite number > 0 (got {w_over_t})")
    if discrete:
        x, y = optimum_discrete(mu, alpha, rho)
    else:
        try:
            x, y = optimum_closed_form(mu, alpha, rho)
        except ValueError:
            x, y = optimum_numeric(mu, alpha, rho)
    if batch_size is None or w_over_t is None:
        return Plan(x, y)
    r = batch_size * w_over_t / mu
    n = max(batch_size, round(x * r))
    return Plan(x, y, rollouts_per_step=r, capacity=n, capacity_unclamped=round(x * r), x_at_capacity=n / r,
                replay_ratio_at_split=batch_size / r, w_over_t_for_y_star=mu / y)

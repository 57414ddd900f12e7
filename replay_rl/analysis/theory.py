"""Theorem 4.5 of the paper: the compute-optimal staleness horizon x* = N/R and replay ratio y* = B/R.

R = rollouts inserted per learner step, B = batch size, N = buffer capacity, μ = generation/training cost ratio,
ρ = sample–iterate correlation, σ̄(x) = average gradient-noise scale over ages 1..x. The bound to minimise (§9.3.1) is

    𝒥(x, y) ∝ σ̄²(x) · (1 + y/μ) · (1/y + 1/x + ρ)

For fixed x it is convex in y with minimum at y = √(μ / (ρ + 1/x)); substituting gives the 1-D objective
σ̄²(x)·(√(1/μ) + √(ρ + 1/x))². With the power law σ(x) = (x/τ)^α, σ̄²(x) ∝ x^{2α}, and for α < 1/2 (§9.3.2):

    y* = (−α + √(α² + μρ(1−2α))) / ρ,        x* = y*² / (μ − ρ y*²)

`optimum_numeric` solves the 1-D objective in general.

Feasibility. A buffer holds at least one batch, N ≥ B, i.e. x ≥ y; the theorem ignores this. Under the power law
x* ≥ y* ⇔ y* ≥ 2αμ/(1−2α) ⇔ μ ≤ (1−4α)(1−2α)/(4α²ρ), so for α ≥ 1/4 (with ρ > 0) the theorem's point is
never feasible: at the paper's point (μ=5.28, α=¼, ρ=0.1) x* = 2.43 < y* = 3.21. Then the best feasible point lies
on the boundary x = y, i.e. N = B (proof: the only stationary point of 𝒥 is infeasible and 𝒥 → ∞ at the edges of
{0 < y ≤ x}). On it 𝒥 ∝ x^{2α}(1 + x/μ)(2/x + ρ); setting the log-derivative to 0 gives

    ρ(1+2α)x² + 2α(ρμ+2)x − 2μ(1−2α) = 0  →  x_f = y_f = 4μ(1−2α) / (b + √(b² + 8ρμ(1−4α²))),  b = 2α(ρμ+2)

(3.06 at the paper's point, realised by W/T = μ/y_f = 1.72). At a given hardware split W/T, R = B·(W/T)/μ and so
y = B/R = μ/(W/T) are fixed; 𝒥 in x is then ∝ x^{2α}(1/y + ρ + 1/x), minimal at x = (1−2α)/(2α(ρ + 1/y)), and if
that is below y the best feasible horizon is x = y (N = B), as the function falls and then rises. Under the power
law that always happens for α ≥ 1/4.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Plan:
    x_star: float            # Theorem 4.5's staleness horizon N/R (max age in steps), ignoring N ≥ B
    y_star: float            # Theorem 4.5's replay ratio B/R (mean uses per rollout), ignoring N ≥ B
    feasible: bool           # x* ≥ y*, i.e. the theorem's point has N ≥ B (a buffer holds at least one batch)
    x_feasible: float        # best horizon under x ≥ y (= x* when feasible, else = y_feasible: N = B)
    y_feasible: float        # best replay ratio under x ≥ y (= y* when feasible)
    w_over_t_for_y_star: float      # the W/T that would give y* (= μ / y*)
    w_over_t_feasible: float        # the W/T that gives y_feasible (= μ / y_feasible)
    capacity_optimal_split: int | None = None   # N at (x_feasible, y_feasible) for the given B, i.e. at W/T =
                                                # w_over_t_feasible: B·x_feasible/y_feasible (= B when infeasible)
    rollouts_per_step: float | None = None      # R = B·(W/T)/μ for the given hardware split
    replay_ratio_at_split: float | None = None  # y = B/R the given W/T yields (= μ / (W/T)), fixed by hardware
    x_at_split: float | None = None             # best horizon at that y, before requiring x ≥ y
    capacity: int | None = None                 # best feasible N at the split: x_at_split·R, raised to B if smaller
    capacity_unclamped: int | None = None       # x_at_split·R before raising it to B
    x_at_capacity: float | None = None          # the horizon N/R the recommended N implies (≠ x_at_split if raised)


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


def best_y(x: float, mu: float, rho: float) -> float:
    """The replay ratio minimising 𝒥 at horizon x, ignoring y ≤ x: √(μ / (ρ + 1/x))."""
    return math.sqrt(mu / (rho + 1 / x))


def cost(x: float, y: float, mu: float, rho: float, sbar2: float) -> float:
    """𝒥(x, y) = σ̄²(x)·(1 + y/μ)·(1/y + 1/x + ρ), the bound per unit compute (constants dropped)."""
    return sbar2 * (1 + y / mu) * (1 / y + 1 / x + rho)


def optimum_closed_form(mu: float, alpha: float, rho: float) -> tuple[float, float]:
    """(x*, y*) under power-law variance; needs 0 < α < 1/2 and ρ > 0."""
    _check(mu, alpha, rho)
    if not (0 < alpha < 0.5 and rho > 0):
        raise ValueError("the closed form needs 0 < alpha < 1/2 and rho > 0; use optimum_numeric")
    y = (-alpha + math.sqrt(alpha**2 + mu * rho * (1 - 2 * alpha))) / rho
    return y**2 / (mu - rho * y**2), y


def objective(x: float, mu: float, alpha: float, rho: float) -> float:
    """σ̄²(x)·(√(1/μ) + √(ρ + 1/x))² with σ̄²(x) ∝ x^{2α} (constants dropped): 𝒥 at y = best_y(x)."""
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
    return x, best_y(x, mu, rho)


def optimum_on_boundary(mu: float, alpha: float, rho: float) -> float:
    """x = y minimising 𝒥 on the boundary N = B under the power law, 0 < α < 1/2, ρ ≥ 0 (root in the module doc,
    written without cancellation so that ρ = 0 gives μ(1−2α)/(2α))."""
    b = 2 * alpha * (rho * mu + 2)
    return 4 * mu * (1 - 2 * alpha) / (b + math.sqrt(b * b + 8 * rho * mu * (1 - 4 * alpha**2)))


def horizon_at_ratio(y: float, alpha: float, rho: float) -> float:
    """x minimising 𝒥 at a fixed replay ratio y under the power law: (1−2α) / (2α(ρ + 1/y)), ignoring x ≥ y."""
    return (1 - 2 * alpha) / (2 * alpha * (rho + 1 / y))


def _argmin_ages(alpha: float, f: Callable[[int, float], float], h_max: int = 100_000) -> int:
    """The integer horizon H minimising f(H, σ̄²(H)), with σ̄²(H) the exact mean of h^{2α} over ages h = 1..H."""
    total, best_h, best_f = 0.0, 1, math.inf
    for h in range(1, h_max + 1):
        total += h ** (2 * alpha)
        v = f(h, total / h)
        if v < best_f:
            best_h, best_f = h, v
        elif h > 4 * best_h + 100:  # past the single minimum: the mean of h^{2α} only keeps growing
            break
    return best_h


def optimum_discrete(mu: float, alpha: float, rho: float, h_max: int = 100_000) -> tuple[float, float]:
    """(x*, y*) with the exact σ̄²(H) = mean of σ(h)² = h^{2α} over the integer ages h = 1..H, instead of the
    power law's x^{2α}. At the paper's point (μ=5.28, α=¼, ρ=0.1) the horizon is 5, twice the closed form's 2.43:
    the mean over ages 1..H grows more slowly than H^{2α}, so a longer horizon costs less noise than it says."""
    _check(mu, alpha, rho)
    h = _argmin_ages(alpha, lambda h, s: cost(h, best_y(h, mu, rho), mu, rho, s), h_max)
    return float(h), best_y(h, mu, rho)


def feasible_discrete(mu: float, alpha: float, rho: float) -> tuple[float, float]:
    """optimum_discrete under y ≤ x: at each integer H the best feasible y is min(best_y(H), H), as 𝒥 is convex
    in y. At the paper's point it is feasible already (H = 5, y = 4.20)."""
    _check(mu, alpha, rho)
    y_of = lambda h: min(best_y(h, mu, rho), h)  # noqa: E731
    h = _argmin_ages(alpha, lambda h, s: cost(h, y_of(h), mu, rho, s))
    return float(h), y_of(h)


def plan(mu: float, alpha: float, rho: float, batch_size: int | None = None, w_over_t: float | None = None,
         discrete: bool = False) -> Plan:
    """Theorem 4.5's (x*, y*), whether it is feasible (N ≥ B), the best feasible point, and with B and W/T the best
    feasible N at that split (module doc). discrete: the exact mean of σ² over integer ages (optimum_discrete)
    instead of the power law."""
    _check(mu, alpha, rho)
    _check_interior(alpha)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1 (got {batch_size})")
    if w_over_t is not None and not (math.isfinite(w_over_t) and w_over_t > 0):
        raise ValueError(f"W/T must be a finite number > 0 (got {w_over_t})")
    if discrete:
        x, y = optimum_discrete(mu, alpha, rho)
        xf, yf = feasible_discrete(mu, alpha, rho)
    else:
        try:
            x, y = optimum_closed_form(mu, alpha, rho)
        except ValueError:
            x, y = optimum_numeric(mu, alpha, rho)
        xf = yf = optimum_on_boundary(mu, alpha, rho)
        if x >= y:
            xf, yf = x, y
    p = Plan(x, y, feasible=x >= y, x_feasible=xf, y_feasible=yf, w_over_t_for_y_star=mu / y,
             w_over_t_feasible=mu / yf, capacity_optimal_split=None if batch_size is None else
             max(batch_size, round(batch_size * xf / yf)))  # max: only guards rounding, xf ≥ yf
    if batch_size is None or w_over_t is None:
        return p
    r = batch_size * w_over_t / mu
    ys = batch_size / r
    if discrete:
        xs = float(_argmin_ages(alpha, lambda h, s: cost(h, ys, mu, rho, s)))
    else:
        xs = horizon_at_ratio(ys, alpha, rho)
    n = max(batch_size, round(xs * r))
    return replace(p, rollouts_per_step=r, replay_ratio_at_split=ys, x_at_split=xs, capacity=n,
                   capacity_unclamped=round(xs * r), x_at_capacity=n / r)


def parse_ratio(text: str) -> float:
    """A W/T split as 'W/T' (5/3) or a number (1.67), as `replay-rl plan --w-t` takes it."""
    num, sep, den = text.partition("/")
    try:
        return float(num) / float(den) if sep else float(num)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"--w-t: expected W/T like 5/3 or a positive number (got {text!r})") from None

"""The compute-saved study's arithmetic: pure numpy over the eval curves a run writes, no Ray and no plotting.

A curve is one run's eval points: `compute` in trainer-step equivalents ((K_train + μ·K_inf)/B, the paper's Fig. 1
x-axis) and `acc` (held-out greedy pass@1). The baseline's learning does not depend on μ, only its accounting
does, so `recharge` re-prices a run's counts at another μ and one set of baseline runs serves every μ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Curve:
    compute: np.ndarray  # (E,) trainer-step equivalents at each eval, increasing, first at 0
    acc: np.ndarray      # (E,) greedy pass@1 at each eval

    def best_by(self, budget: float) -> float:
        """The best accuracy this run had shown by `budget` (what a user could keep, stopping there)."""
        seen = self.acc[self.compute <= budget + 1e-9]
        return float(seen.max()) if len(seen) else float("nan")

    def reach(self, threshold: float) -> float:
        """Compute at which accuracy first reaches `threshold`, interpolated between evals; inf if never."""
        hits = np.flatnonzero(self.acc >= threshold)
        if not len(hits):
            return float("inf")
        i = int(hits[0])
        if i == 0:
            return float(self.compute[0])
        c0, c1, a0, a1 = self.compute[i - 1], self.compute[i], self.acc[i - 1], self.acc[i]
        return float(c0 + (c1 - c0) * (threshold - a0) / (a1 - a0))

    def drawdown(self) -> float:
        """Largest fall from a running peak: how unstable the run was."""
        return float(np.max(np.maximum.accumulate(self.acc) - self.acc))


def recharge(k_train: np.ndarray, k_inf: np.ndarray, batch_size: int, mu: float) -> np.ndarray:
    """Compute of the same counts under another μ: (K_train + μ·K_inf) / B."""
    return (np.asarray(k_train, float) + mu * np.asarray(k_inf, float)) / batch_size


def saved_fraction(base_reach: list[float], cfg_reach: list[float]) -> float:
    """1 − median compute to reach (this config) / median compute to reach (baseline); −inf if it never does. NaN
    when the baseline reaches the threshold at compute 0 (it ended no higher than it started), so nothing can be
    saved against it (seen in a 12-step mini study: the baseline went 0.44 → 0.31)."""
    b, c = float(np.median(base_reach)), float(np.median(cfg_reach))
    if not np.isfinite(c):
        return float("-inf")
    if b == 0:
        return float("nan")
    return 1.0 - c / b


def bootstrap_interval(base_reach: list[float], cfg_reach: list[float], seed: int = 0, draws: int = 2000,
                       level: float = 0.9) -> tuple[float, float]:
    """Percentile bootstrap over seeds (both sides resampled with replacement) of saved_fraction."""
    rng = np.random.default_rng(seed)
    b, c = np.asarray(base_reach, float), np.asarray(cfg_reach, float)
    stats = [saved_fraction(list(rng.choice(b, len(b))), list(rng.choice(c, len(c)))) for _ in range(draws)]
    lo, hi = np.percentile(stats, [50 * (1 - level), 50 * (1 + level)], method="nearest")  # −inf safe
    return float(lo), float(hi)


def median_best(curves: list[Curve], grid: np.ndarray) -> np.ndarray:
    """Median over seeds of the best accuracy shown by each budget in `grid`."""
    return np.median([[c.best_by(g) for g in grid] for c in curves], axis=0)


def fraction_of_budgets_ahead(base: list[Curve], cfg: list[Curve]) -> float:
    """Share of compute budgets (the baseline's eval points after step 0, up to the shorter range) at which the
    config's median best-so-far accuracy is ≥ the baseline's."""
    top = min(min(float(c.compute[-1]) for c in base), min(float(c.compute[-1]) for c in cfg))
    grid = np.unique(np.concatenate([c.compute[1:] for c in base]))
    grid = grid[grid <= top + 1e-9]
    if not len(grid):
        return float("nan")
    return float(np.mean(median_best(cfg, grid) >= median_best(base, grid) - 1e-12))


def summarise_config(base: list[Curve], cfg: list[Curve], threshold: float) -> dict[str, float | list[float]]:
    """Per config: lift, compute to reach the baseline's final accuracy, saved % with a 90% interval, budgets ahead."""
    base_reach, cfg_reach = [c.reach(threshold) for c in base], [c.reach(threshold) for c in cfg]
    saved = saved_fraction(base_reach, cfg_reach)
    lo, hi = bootstrap_interval(base_reach, cfg_reach)
    pct = lambda x: 100 * x if np.isfinite(x) else None  # noqa: E731  (JSON has no −inf)
    return {
        "lift_median": float(np.median([c.acc[-1] - c.acc[0] for c in cfg])),
        "start_median": float(np.median([c.acc[0] for c in cfg])),
        "final_median": float(np.median([c.acc[-1] for c in cfg])),
        "reached": f"{sum(np.isfinite(cfg_reach))}/{len(cfg)}",
        "compute_to_reach_median": float(np.median(cfg_reach)),
        "compute_saved_pct": pct(saved),
        "compute_saved_pct_ci90": [pct(lo), pct(hi)],
        "budgets_ahead_fraction": fraction_of_budgets_ahead(base, cfg),
        "drawdown_median": float(np.median([c.drawdown() for c in cfg])),
        "final_compute_median": float(np.median([c.compute[-1] for c in cfg])),
    }


def hist_quantile(hist: list[int], q: float) -> float:
    """Quantile of a histogram over bins 0..len−1."""
    h = np.asarray(hist, float)
    if h.sum() == 0:
        return float("nan")
    return float(np.searchsorted(np.cumsum(h) / h.sum(), q))


def hist_mean(hist: list[int]) -> float:
    h = np.asarray(hist, float)
    return float(np.dot(h, np.arange(len(h))) / h.sum()) if h.sum() else float("nan")

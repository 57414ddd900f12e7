"""The compute-saved study's arithmetic: pure numpy over the eval curves a run writes, no Ray and no plotting.

A curve is one run's eval points: `compute` in trainer-step equivalents ((K_train + μ·K_inf)/B, the paper's Fig. 1
x-axis) and `acc` (held-out greedy pass@1). The baseline's learning does not depend on μ, only its accounting
does, so `recharge` re-prices a run's counts at another μ and one set of baseline runs serves every μ.

Compute saved (`compare`, the paper's Fig. 14 measure): a side (baseline or config) is {label: seeds' curves}, a
label being e.g. a learning rate. Each curve becomes its best-so-far accuracy (running max at each eval, linearly
interpolated in compute) on one merged grid of both sides' eval points; a label's score curve is the median of its
seeds' curves and a side's curve is the max over labels (its LR frontier, Fig. 4) or its single best label. The
threshold is `frac` (0.98) × the baseline curve's best, and saved = 1 − reach_cfg / reach_base, each the compute at
which that side's curve first reaches the threshold. Why this curve: one run's first crossing is decided by a single
noisy eval, and pairing seeds does not remove that noise; the median over seeds removes most of it and the running
best makes the curve monotone, so "first reach" is well defined and stable. As the threshold sits below the
baseline's own best, the baseline always reaches it; only the config can fail to (censored: reach inf, saved None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Curve:
    compute: np.ndarray  # (E,) trainer-step equivalents at each eval, increasing, first at 0
    acc: np.ndarray      # (E,) greedy pass@1 at each eval

    def reach(self, threshold: float) -> float:
        """Compute at which accuracy first reaches `threshold`, interpolated between evals; inf if never."""
        return first_reach(self.compute, self.acc, threshold)

    def best_so_far(self, grid: np.ndarray) -> np.ndarray:
        """(G,) best accuracy shown by each compute in `grid`: the running max at each eval, linearly interpolated
        between evals (a step function would judge a run on an eval up to one interval old); NaN past the last."""
        return np.interp(grid, self.compute, np.maximum.accumulate(self.acc), left=np.nan, right=np.nan)

    def drawdown(self) -> float:
        """Largest fall from a running peak: how unstable the run was."""
        return float(np.max(np.maximum.accumulate(self.acc) - self.acc))


def recharge(k_train: np.ndarray, k_inf: np.ndarray, batch_size: int, mu: float) -> np.ndarray:
    """Compute of the same counts under another μ: (K_train + μ·K_inf) / B."""
    return (np.asarray(k_train, float) + mu * np.asarray(k_inf, float)) / batch_size


def first_reach(grid: np.ndarray, values: np.ndarray, threshold: float) -> float:
    """Compute at which `values` (on `grid`) first reach `threshold`, linearly interpolated between grid points;
    grid[0] if they start there, inf if they never do."""
    hits = np.flatnonzero(np.asarray(values) >= threshold)
    if not len(hits):
        return float("inf")
    i = int(hits[0])
    if i == 0:
        return float(grid[0])
    c0, c1, a0, a1 = grid[i - 1], grid[i], values[i - 1], values[i]
    return float(c0 + (c1 - c0) * (threshold - a0) / (a1 - a0))


def saved(reach_base: float, reach_cfg: float) -> float:
    """1 − reach_cfg / reach_base. Censored values keep their order for a bootstrap: −inf when the config never
    reached (it saved less than anything measured), +inf when only the baseline never reached; NaN when undefined
    (the baseline was there at compute 0, or neither side got there)."""
    if np.isinf(reach_cfg):
        return float("nan") if np.isinf(reach_base) else float("-inf")
    if np.isinf(reach_base):
        return float("inf")
    return float("nan") if reach_base == 0 else float(1.0 - reach_cfg / reach_base)


def percentile_bounds(stats: np.ndarray, level: float = 0.9) -> tuple[float | None, float | None]:
    """Nearest-rank percentile interval of bootstrap draws. ±inf draws are censored: a bound that lands on one is
    None (undefined), never a number; with a share c of −inf draws the lower bound is None once c > (1 − level)/2
    and the upper one once c > (1 + level)/2. NaN draws (no saving defined at all) are left out, and their share is
    reported apart (compare's undefined_fraction); with none left both bounds are None."""
    s = np.sort(np.asarray(stats, float))
    s = s[~np.isnan(s)]
    if not len(s):
        return None, None
    lo, hi = (s[int(np.rint((len(s) - 1) * q))] for q in ((1 - level) / 2, (1 + level) / 2))
    return (float(lo) if np.isfinite(lo) else None), (float(hi) if np.isfinite(hi) else None)


def merged_grid(curves: list[Curve]) -> np.ndarray:
    """Every eval compute of `curves` after 0, up to and including the shortest curve's last eval: the budgets at
    which all of them are defined (no budget is dropped and no side is judged on a stale eval)."""
    top = min(float(c.compute[-1]) for c in curves)
    grid = np.unique(np.concatenate([c.compute for c in curves]))
    return grid[(grid > 0) & (grid <= top)]


def _pct(x: float | None) -> float | None:
    """A saved fraction as a percentage for the report; None for a censored, undefined or missing one (JSON has no
    ±inf)."""
    return None if x is None or not np.isfinite(x) else 100 * float(x)


def _ahead(base_values: np.ndarray, cfg_values: np.ndarray) -> tuple[float, float]:
    """Share of budgets at which the config's curve is ≥ the baseline's (a tie counts), and its largest lead."""
    if not len(base_values):
        return float("nan"), float("nan")
    lead = cfg_values - base_values
    return float(np.mean(lead >= -1e-12)), float(lead.max())


def median_curve(curves: list[Curve], grid: np.ndarray) -> np.ndarray:
    """(G,) median over seeds of the interpolated best-so-far accuracy."""
    return np.median([c.best_so_far(grid) for c in curves], axis=0)


Side = dict[object, list[Curve]]  # {label (e.g. a learning rate): its seeds' curves}
Pick = Literal["frontier", "own_best"]


def frontier(side: Side, grid: np.ndarray) -> tuple[np.ndarray, list]:
    """A side {label: seeds' curves} at each budget of `grid`: the max over labels of the label's median_curve (its
    LR frontier, the paper's Fig. 4), and the label that gives it at each budget."""
    values, index = _side_curves(_stacks(side, grid), "frontier", None, 1)
    return values[0], [list(side)[i] for i in index[0]]


def _stacks(side: Side, grid: np.ndarray) -> list[np.ndarray]:
    """Each label's (S, G) best-so-far curves on `grid`, labels in the side's order."""
    return [np.array([c.best_so_far(grid) for c in curves]) for curves in side.values()]


def _side_curves(stacks: list[np.ndarray], pick: Pick, rng: np.random.Generator | None, draws: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(D, G) a side's curve and (D, G) the index of the label giving it, per bootstrap draw. `stacks` holds each
    label's (S, G) best-so-far curves; a draw resamples every label's seeds with replacement (rng None: one draw
    with the seeds as they are). `pick`: the frontier, or the label whose median is highest at the last budget."""
    rows = (lambda n: np.arange(n)[None]) if rng is None else (lambda n: rng.integers(0, n, (draws, n)))
    medians = np.stack([np.median(a[rows(len(a))], axis=1) for a in stacks], axis=1)  # (D, L, G)
    if pick == "frontier":
        return medians.max(1), medians.argmax(1)
    best = medians[:, :, -1].argmax(1)  # (D,)
    return medians[np.arange(len(best)), best], np.repeat(best[:, None], medians.shape[2], axis=1)


def compare(base: Side, cfg: Side, frac: float = 0.98, level: float = 0.9, draws: int = 2000, seed: int = 0,
            pick: Pick = "frontier") -> dict:
    """Compute saved by `cfg` against `base`, each a side {label: list[Curve] over seeds} (one label when there is
    one learning rate). pick="frontier": frontier against frontier; "own_best": each side at its single best label,
    the one whose median curve is highest at the last common budget (re-chosen in every bootstrap draw).

    Returns: grid (compute 0, then merged_grid of all curves), base_curve and cfg_curve on it, base_labels and
    cfg_labels (the label at each budget); base_best (max of base_curve), threshold (frac × base_best), reach_base
    and reach_cfg (first_reach; inf when not reached), saved_pct (100·saved, None when not reached or undefined);
    saved_pct_ci [lo, hi] at `level`, a percentile bootstrap over seeds (`draws`, rng `seed`), a bound None when it
    falls among censored draws; censored_fraction (draws where cfg did not reach), undefined_fraction (draws where
    the baseline was at the threshold at compute 0); budgets_ahead_fraction (share of budgets after 0 where
    cfg_curve ≥ base_curve) and max_lead (max of cfg_curve − base_curve there).
    """
    every = [c for side in (base, cfg) for curves in side.values() for c in curves]
    grid = np.concatenate([[0.0], merged_grid(every)])
    stacks = [_stacks(side, grid) for side in (base, cfg)]

    def reaches(rng: np.random.Generator | None, n: int) -> tuple[np.ndarray, ...]:
        (vb, ib), (vc, ic) = (_side_curves(s, pick, rng, n) for s in stacks)
        threshold = frac * vb.max(1)
        rb = np.array([first_reach(grid, v, t) for v, t in zip(vb, threshold)])
        rc = np.array([first_reach(grid, v, t) for v, t in zip(vc, threshold)])
        return vb, ib, vc, ic, threshold, rb, rc

    vb, ib, vc, ic, threshold, rb, rc = (x[0] for x in reaches(None, 1))
    *_, rbs, rcs = reaches(np.random.default_rng(seed), draws)
    stats = np.array([saved(b, c) for b, c in zip(rbs, rcs)])
    ahead, lead = _ahead(vb[1:], vc[1:])
    return {
        "grid": grid.tolist(), "base_curve": vb.tolist(), "cfg_curve": vc.tolist(),
        "base_labels": [list(base)[i] for i in ib], "cfg_labels": [list(cfg)[i] for i in ic],
        "base_best": float(vb.max()), "threshold": float(threshold), "reach_base": float(rb), "reach_cfg": float(rc),
        "saved_pct": _pct(saved(rb, rc)), "saved_pct_ci": [_pct(b) for b in percentile_bounds(stats, level)],
        "ci_level": level, "censored_fraction": float(np.mean(np.isinf(rcs))),
        "undefined_fraction": float(np.mean(np.isnan(stats))),
        "budgets_ahead_fraction": ahead, "max_lead": lead,
    }


def fraction_of_budgets_ahead(base: list[Curve], cfg: list[Curve]) -> float:
    """Share of the budgets of merged_grid(base + cfg) at which the config's median_curve is ≥ the baseline's."""
    grid = merged_grid(base + cfg)
    return _ahead(median_curve(base, grid), median_curve(cfg, grid))[0]


def hist_quantile(hist: list[int], q: float) -> float:
    """Quantile of a histogram over bins 0..len−1."""
    h = np.asarray(hist, float)
    if h.sum() == 0:
        return float("nan")
    return float(np.searchsorted(np.cumsum(h) / h.sum(), q))


def hist_mean(hist: list[int]) -> float:
    h = np.asarray(hist, float)
    return float(np.dot(h, np.arange(len(h))) / h.sum()) if h.sum() else float("nan")

"""The compute-saved study's arithmetic: pure numpy over the eval curves a run writes, no Ray and no plotting.

A curve is one run's eval points: `compute` in trainer-step equivalents ((K_train + μ·K_inf)/B, the paper's Fig. 1
x-axis) and `acc` (held-out greedy pass@1). The baseline's learning does not depend on μ, only its accounting
does, so `recharge` re-prices a run's counts at another μ and one set of baseline runs serves every μ.

Compute saved (`compare`): a side (baseline or config) is {label: seeds' curves}, a label being e.g. a learning
rate, seeds matched by position across labels. The estimator, chosen by the simulation in
tests/analysis/test_study_estimator.py among the candidates that benchmarks/estimator_choice.py compares:
1. each seed's curve is made monotone by isotonic regression (`isotonic`: the least-squares non-decreasing fit),
   which pools the noise of a flat top instead of keeping its highest eval; a running max (of the raw evals, or
   after a ±2-eval mean, the estimator until issue 42) lifts the noisier side, and on the 3× runs' long flat top
   read identical curves as −8 points saved at 98% of the best (benchmarks/results/estimator_choice);
2. a side's curve at each budget is its LR frontier with the label chosen on held-out seeds (leave one seed out: the
   label best on the other seeds, scored on the held-out one, averaged), so picking the luckiest LR flatters neither;
3. reach = the compute at which that curve (running max) first reaches a threshold: `frac` (0.98) × the baseline's
   best (the paper's Fig. 14 bar) or an absolute accuracy target; saved = 1 − reach_cfg / reach_base;
4. the interval is a leave-one-seed-out jackknife over both sides with Student-t quantiles: with 3 seeds a side a
   percentile bootstrap covered the truth ~75% of the time for a nominal 90%, the jackknife-t 88-94%. The sides are
   not paired (matched seeds correlate ~0.1 in the committed study: pairing would buy little).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np

SMOOTH_HALF = 2  # evals each side of the moving average (the estimator until issue 42; the study's LR pick to extend)


def moving_average(acc: np.ndarray, half: int = SMOOTH_HALF) -> np.ndarray:
    """The mean of the evals within ±half of each. The first eval (step 0: every seed scores the same model there)
    is kept as it is and never averaged into later ones; windows shrink at the ends."""
    acc = np.asarray(acc, float)
    out = acc.copy()
    for e in range(1, len(acc)):
        out[e] = acc[max(1, e - half):e + half + 1].mean()
    return out


def smooth(acc: np.ndarray, half: int = SMOOTH_HALF) -> np.ndarray:
    """`moving_average`, then the running max."""
    return np.maximum.accumulate(moving_average(acc, half))


@dataclass(frozen=True)
class Curve:
    compute: np.ndarray  # (E,) trainer-step equivalents at each eval, increasing, first at 0
    acc: np.ndarray      # (E,) greedy pass@1 at each eval

    def smoothed(self, grid: np.ndarray, smoother=smooth) -> np.ndarray:
        """(G,) `smoother` of the evals (compare passes the estimator's) linearly interpolated at `grid`; NaN past
        the last eval."""
        return np.interp(grid, self.compute, smoother(self.acc), left=np.nan, right=np.nan)

    def drawdown(self) -> float:
        """Largest fall from a running peak: how unstable the run was."""
        return float(np.max(np.maximum.accumulate(self.acc) - self.acc))


def recharge(k_train: np.ndarray, k_inf: np.ndarray, batch_size: int, mu: float) -> np.ndarray:
    """Compute of the same counts under another μ: (K_train + μ·K_inf) / B."""
    return (np.asarray(k_train, float) + mu * np.asarray(k_inf, float)) / batch_size


def first_reach(grid: np.ndarray, values: np.ndarray, threshold: float) -> float:
    """Compute at which `values` (on `grid`, NaN where undefined) first reach `threshold`, linearly interpolated
    between grid points; grid[0] if they start there, inf if they never do."""
    values = np.asarray(values, float)
    hits = np.flatnonzero(values >= threshold)
    if not len(hits):
        return float("inf")
    i = int(hits[0])
    if i == 0 or np.isnan(values[i - 1]):
        return float(grid[i])
    c0, c1, a0, a1 = grid[i - 1], grid[i], values[i - 1], values[i]
    return float(c0 + (c1 - c0) * (threshold - a0) / (a1 - a0))


def saved(reach_base: float, reach_cfg: float) -> float:
    """1 − reach_cfg / reach_base. Censored values keep their order: −inf when the config never reached (it saved
    less than anything measured), +inf when only the baseline never reached; NaN when undefined (the baseline was
    there at compute 0, or neither side got there)."""
    if np.isinf(reach_cfg):
        return float("nan") if np.isinf(reach_base) else float("-inf")
    if np.isinf(reach_base):
        return float("inf")
    return float("nan") if reach_base == 0 else float(1.0 - reach_cfg / reach_base)


@functools.lru_cache(maxsize=64)
def t_quantile(q: float, df: int) -> float:
    """Student-t quantile by bisection on its CDF (numeric integral of the density); numpy has none."""
    x = np.linspace(0.0, 60.0, 120001)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    pdf = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    cdf = 0.5 + np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2 * np.diff(x))])
    return float(np.interp(q, cdf, x)) if q >= 0.5 else -t_quantile(1 - q, df)


def jackknife_interval(point: float, replicates: list[np.ndarray], level: float = 0.9
                       ) -> tuple[float | None, float | None]:
    """point ± t·SE, SE² the sum over sides of each side's leave-one-seed-out jackknife variance, t with (seeds − 2)
    degrees of freedom (at least 1). A replicate where the config never reached (−inf) leaves the lower bound
    undefined (None), one where only the baseline never reached (+inf) the upper; a NaN or censored point, or a
    side with one seed: none."""
    if point is None or not np.isfinite(point) or any(len(r) < 2 for r in replicates):
        return None, None  # censored or undefined, or a side with one seed: no variance to estimate
    var, n_all = 0.0, 0
    for reps in replicates:
        n_all += len(reps)
        finite = reps[np.isfinite(reps)]
        if len(finite) > 1:
            var += (len(reps) - 1) / len(reps) * float(((finite - finite.mean()) ** 2).sum())
    half = t_quantile((1 + level) / 2, max(1, n_all - 2)) * math.sqrt(var)
    every = np.concatenate(replicates) if replicates else np.array([])
    lo = None if np.any(every == -np.inf) else point - half
    hi = None if np.any(every == np.inf) else point + half
    return lo, hi


Side = dict[object, list[Curve]]  # {label (e.g. a learning rate): its seeds' curves, matched by position}
Pick = Literal["frontier", "own_best"]


def budget_grid(sides: list[Side]) -> np.ndarray:
    """0, then every eval compute of the sides' curves up to the last budget at which each side still has a label
    with every seed defined (a study extends its best LRs: past the other labels' end a side's frontier is over the
    extended ones only; seeds of one label may end an eval apart, 3144 against 3145)."""
    top = min(max(min(float(c.compute[-1]) for c in curves) for curves in s.values()) for s in sides)
    grid = np.unique(np.concatenate([[0.0], *[c.compute for s in sides for curves in s.values() for c in curves]]))
    return grid[grid <= top]


def _array(side: Side, grid: np.ndarray, smoother) -> np.ndarray:
    """(L, S, G) each label's seeds' smoothed curves, NaN where a label has fewer seeds."""
    seeds = max(len(c) for c in side.values())
    out = np.full((len(side), seeds, len(grid)), np.nan)
    for i, curves in enumerate(side.values()):
        out[i, :len(curves)] = [c.smoothed(grid, smoother) for c in curves]
    return out


def _choose(means: np.ndarray, pick: Pick) -> np.ndarray:
    """(G,) the label index per budget from (L, G) label means: the best at each budget, or at the last one."""
    filled = np.where(np.isnan(means), -np.inf, means)
    if pick == "frontier":
        return filled.argmax(0)
    return np.full(means.shape[1], filled[:, -1].argmax())


def side_curve(a: np.ndarray, keep: list[int], pick: Pick = "frontier") -> tuple[np.ndarray, np.ndarray]:
    """A side's (G,) curve from its (L, S, G) array over the seed positions `keep`, and the (G,) label chosen on all
    of them. With ≥ 2 seeds the curve is leave-one-seed-out: for each kept seed, the label best on the others at
    each budget, read on that seed; then the mean over seeds. With one seed: that seed's best label."""
    with warnings.catch_warnings():  # a label without a seed or past its end is NaN there, and skipped: say nothing
        warnings.simplefilter("ignore", RuntimeWarning)
        in_sample = _choose(np.nanmean(a[:, keep], axis=1), pick)
        if len(keep) < 2:
            return a[in_sample, keep[0], np.arange(a.shape[2])], in_sample
        rows = []
        for s in keep:
            label = _choose(np.nanmean(a[:, [k for k in keep if k != s]], axis=1), pick)
            rows.append(a[label, s, np.arange(a.shape[2])])
        return np.nanmean(rows, axis=0), in_sample


def isotonic(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The (weighted) least-squares non-decreasing fit, pool adjacent violators. NaN entries are left out of the fit
    and filled by interpolation between their neighbours' fitted values (held flat past the ends)."""
    values = np.asarray(values, float)
    w = np.ones(len(values)) if weights is None else np.asarray(weights, float)
    keep = np.flatnonzero(~np.isnan(values))
    blocks: list[list[float]] = []  # [mean, weight, count]
    for y, wi in zip(values[keep], w[keep]):
        blocks.append([y, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    if not blocks:
        return np.full(len(values), np.nan)
    fit = np.concatenate([np.full(int(n), m) for m, _, n in blocks])
    return np.interp(np.arange(len(values)), keep, fit) if len(keep) < len(values) else fit


def running_max(values: np.ndarray) -> np.ndarray:
    """The best so far, NaN skipped."""
    return np.fmax.accumulate(values)


def compare(base: Side, cfg: Side, frac: float = 0.98, level: float = 0.9, pick: Pick = "frontier",
            targets: tuple[float, ...] = (), smoother=isotonic, monotone=running_max) -> dict:
    """Compute saved by `cfg` against `base` (see the module docstring for the estimator). pick="frontier": frontier
    against frontier; "own_best": each side at the single label best at the last common budget.

    Returns: grid, base_curve and cfg_curve on it (leave-one-seed-out, before the running max), base_labels and
    cfg_labels (the label chosen on all seeds at each budget); base_best, threshold (frac × base_best), reach_base,
    reach_cfg (inf when not reached), saved_pct (None when censored or undefined), saved_pct_ci (jackknife-t at
    `level`, a bound None where a replicate is censored), censored_fraction (share of the point and its jackknife
    replicates where cfg did not reach), budgets_ahead_fraction and max_lead (cfg against base after compute 0,
    both running maxes), and `targets`: the same reach and saving for each absolute accuracy target. `smoother`: the
    per-seed step, and `monotone`: the step after the mean over seeds, which reach reads (only
    benchmarks/estimator_choice.py changes them, to compare the candidates).
    """
    grid = budget_grid([base, cfg])
    arrays = [_array(s, grid, smoother) for s in (base, cfg)]
    seeds = [list(range(a.shape[1])) for a in arrays]
    goals = [None, *targets]  # None: frac × the baseline's best, re-taken in every replicate

    def savings(keep_b: list[int], keep_c: list[int]):
        vb, lb = side_curve(arrays[0], keep_b, pick)
        vc, lc = side_curve(arrays[1], keep_c, pick)
        mb, mc = monotone(vb), monotone(vc)
        best = float(np.nanmax(mb))
        rows = [(frac * best if g is None else g) for g in goals]
        reach = [(first_reach(grid, mb, t), first_reach(grid, mc, t)) for t in rows]
        return vb, vc, lb, lc, best, rows, reach

    vb, vc, lb, lc, best, thresholds, reach = savings(seeds[0], seeds[1])
    points = [saved(rb, rc) for rb, rc in reach]
    drop = lambda keep, j: [k for k in keep if k != j]  # noqa: E731
    # each replicate's reaches (savings' last item), leaving out one seed of one side
    jack = ([[saved(*r) for r in savings(drop(seeds[0], j), seeds[1])[-1]] for j in seeds[0] if len(seeds[0]) > 1],
            [[saved(*r) for r in savings(seeds[0], drop(seeds[1], j))[-1]] for j in seeds[1] if len(seeds[1]) > 1])
    reps = [[np.array([r[i] for r in side], float) for side in jack] for i in range(len(goals))]
    rows = [{"threshold": t, "reach_base": rb, "reach_cfg": rc, "saved_pct": _pct(p),
             "saved_pct_ci": [_pct(b) for b in jackknife_interval(p, r, level)],
             "censored_fraction": float(np.mean(np.concatenate([[p], *r]) == -np.inf))}
            for t, (rb, rc), p, r in zip(thresholds, reach, points, reps)]
    mb, mc = np.fmax.accumulate(vb)[1:], np.fmax.accumulate(vc)[1:]
    lead = mc - mb
    labels = lambda side, idx: [list(side)[i] for i in idx]  # noqa: E731
    return {"grid": grid.tolist(), "base_curve": vb.tolist(), "cfg_curve": vc.tolist(),
            "base_labels": labels(base, lb), "cfg_labels": labels(cfg, lc), "base_best": best, **rows[0],
            "ci_level": level, "budgets_ahead_fraction": float(np.mean(lead >= -1e-12)) if len(lead) else math.nan,
            "max_lead": float(np.max(lead)) if len(lead) else math.nan,
            "targets": [{"target": g} | r for g, r in zip(targets, rows[1:])]}


def _pct(x: float | None) -> float | None:
    """A saved fraction as a percentage for the report; None for a censored, undefined or missing one (JSON has no
    ±inf)."""
    return None if x is None or not np.isfinite(x) else 100 * float(x)


def end_slope(curves: list[Curve], level: float = 0.9) -> dict:
    """Accuracy gained per doubling of compute over the last doubling of a run (its evals from half its final
    compute on; a fixed count of evals spans a sliver of a long run: the last 8 of 61 are 0.18 doublings): each
    seed's least-squares slope of accuracy on log2(compute), then the mean over seeds with a t interval (None with
    one seed)."""
    def slope(c: Curve) -> float:
        keep = c.compute >= c.compute[-1] / 2
        x, y = np.log2(c.compute[keep]), c.acc[keep]
        return float(np.polyfit(x, y, 1)[0]) if len(x) >= 2 else math.nan

    slopes = np.array([slope(c) for c in curves])
    mean = float(slopes.mean())
    if len(slopes) < 2 or math.isnan(mean):
        return {"per_doubling": mean, "ci": [None, None], "seeds": len(slopes)}
    half = t_quantile((1 + level) / 2, len(slopes) - 1) * float(slopes.std(ddof=1)) / math.sqrt(len(slopes))
    return {"per_doubling": mean, "ci": [mean - half, mean + half], "seeds": len(slopes)}


def hist_quantile(hist: list[int], q: float) -> float:
    """Quantile of a histogram over bins 0..len−1."""
    h = np.asarray(hist, float)
    if h.sum() == 0:
        return float("nan")
    return float(np.searchsorted(np.cumsum(h) / h.sum(), q))


def hist_mean(hist: list[int]) -> float:
    h = np.asarray(hist, float)
    return float(np.dot(h, np.arange(len(h))) / h.sum()) if h.sum() else float("nan")

"""Studies with a known truth, to choose and check the compute-saved estimator (tests/test_study_estimator.py,
benchmarks/estimator_choice.py): each side's seeds read a true accuracy curve at the study's eval grid, plus eval
noise of a chosen size per side and a seed-to-seed spread in learning speed. The config's truth is the baseline's
stretched in compute, so a true saving s holds at every accuracy: cfg(c) = base(c / (1 − s)).
"""

from __future__ import annotations

import numpy as np

from replay_rl.analysis.study import Curve

# the committed frontier study's arithmetic baseline at its best LR (1.5e-4, 3 seeds): the seeds' mean made monotone
# (isotonic), a 3-eval moving average, at its eval grid (21 evals a run, benchmarks/results/frontier)
BASE_GRID = np.array([0, 161, 319, 476, 633, 790, 947, 1104, 1261, 1418, 1575, 1732, 1889, 2046, 2203, 2360, 2517,
                      2674, 2831, 2988, 3145], float)
BASE_TRUTH = np.array([0.377, 0.464, 0.525, 0.555, 0.579, 0.604, 0.626, 0.652, 0.671, 0.69, 0.702, 0.715, 0.725,
                       0.741, 0.751, 0.761, 0.767, 0.772, 0.776, 0.785, 0.803])
CFG_GRID = BASE_GRID + np.r_[0, np.full(20, 2.0)]  # replay's evals land a little later (its steps are smaller)


def truth(compute: np.ndarray) -> np.ndarray:
    """The true curve at any compute: BASE_TRUTH interpolated, and past its end continued at the gain per doubling
    of its last five evals (a stretched config is read past the baseline's budget)."""
    c = np.asarray(compute, float)
    slope = (BASE_TRUTH[-1] - BASE_TRUTH[-5]) / np.log2(BASE_GRID[-1] / BASE_GRID[-5])
    past = BASE_TRUTH[-1] + slope * np.log2(np.maximum(c, 1.0) / BASE_GRID[-1])
    return np.where(c > BASE_GRID[-1], past, np.interp(c, BASE_GRID, BASE_TRUTH))


def seeds(rng: np.random.Generator, grid: np.ndarray, noise: float, stretch: float, n: int, speed_sd: float
          ) -> list[Curve]:
    """n seeds' curves: each learns at its own speed (compute × e^N(0, speed_sd)) along truth(c / stretch), read with
    N(0, noise) at every eval after the first (step 0 is the same model for every seed: exact)."""
    out = []
    for _ in range(n):
        speed = np.exp(rng.normal(0.0, speed_sd))
        acc = truth(grid * speed / stretch) + np.r_[0.0, rng.normal(0.0, noise, len(grid) - 1)]
        out.append(Curve(grid, acc))
    return out


def simulate(estimate, studies: int, noise_base: float, noise_cfg: float, true_saved: float = 0.0, n_seeds: int = 3,
             speed_sd: float = 0.05, seed: int = 0) -> dict:
    """Run `estimate(base_curves, cfg_curves) -> (saved %, [lo, hi])` (None for censored) on `studies` simulated
    studies. Returns the median saved % (a censored study counts as −inf), its share of censored studies, and the
    share whose interval covers the truth (a None bound is open on its side)."""
    rng = np.random.default_rng(seed)
    points, covered = [], 0
    for _ in range(studies):
        base = seeds(rng, BASE_GRID, noise_base, 1.0, n_seeds, speed_sd)
        cfg = seeds(rng, CFG_GRID, noise_cfg, 1.0 - true_saved, n_seeds, speed_sd)
        point, (lo, hi) = estimate(base, cfg)
        points.append(-np.inf if point is None else point)
        covered += (lo is None or lo <= 100 * true_saved) and (hi is None or 100 * true_saved <= hi)
    points = np.array(points)
    return {"median_saved_pct": float(np.median(points)), "censored": float(np.mean(np.isinf(points))),
            "coverage": covered / studies}

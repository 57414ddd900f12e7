"""Studies with a known truth, to choose and check the compute-saved estimator (tests/analysis/test_study_estimator.py,
benchmarks/estimator_choice.py): each side's seeds read true accuracy curves at the study's eval grid, plus eval
noise of a chosen size per side and a seed-to-seed spread in learning speed. The config's truth is the baseline's
stretched in compute, so a true saving s holds at every accuracy: cfg(c) = base(c / (1 − s)).

Two shapes, both from the committed arithmetic studies (their baseline's seeds' mean made monotone, then a 3-eval
moving average):
- ONE_X, the frontier study's steep curve: 21 evals to compute 3145, one learning rate a side;
- THREE_X, the 3× runs' flattening curve (benchmarks/results/measure): 61 evals to 9425, seeds differing more in
  speed (SD 0.10), the config's eval noise autocorrelated from one eval to the next (lag 1: 0.23, as replay's
  residuals at 5e-5 measured), and two learning rates a side (the best, 1.5e-4, and 3e-4, which flattens at 0.75),
  so the estimator's held-out choice of LR runs as it does on the study.
Each shape's absolute targets: those of 0.6, 0.7 and 0.8, and the highest multiple of 0.02 (the study's target
step), that its true curve reaches after its fourth eval (earlier, the grid cannot resolve a saving) and before 80%
of its budget (later, a slower seed may not get there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay_rl.analysis.study import Curve, Side, compare

BASE_GRID = np.array([0, 161, 319, 476, 633, 790, 947, 1104, 1261, 1418, 1575, 1732, 1889, 2046, 2203, 2360, 2517,
                      2674, 2831, 2988, 3145], float)
BASE_TRUTH = np.array([0.377, 0.464, 0.525, 0.555, 0.579, 0.604, 0.626, 0.652, 0.671, 0.69, 0.702, 0.715, 0.725,
                       0.741, 0.751, 0.761, 0.767, 0.772, 0.776, 0.785, 0.803])
# the 3× baseline at 1.5e-4 and at 3e-4, every third of its 61 evals (0, 471, ..., 9425), interpolated between
THREE_X_AT = np.linspace(0.0, 9425.0, 21)
THREE_X_BEST = np.array([0.413, 0.516, 0.581, 0.623, 0.68, 0.735, 0.754, 0.782, 0.791, 0.798, 0.82, 0.828, 0.831,
                         0.839, 0.842, 0.843, 0.845, 0.847, 0.849, 0.851, 0.852])
THREE_X_HIGH_LR = np.array([0.413, 0.447, 0.56, 0.609, 0.643, 0.718, 0.729, 0.744, 0.747, 0.747, 0.747, 0.747, 0.747,
                            0.747, 0.748, 0.748, 0.748, 0.754, 0.77, 0.781, 0.786])


@dataclass(frozen=True)
class Shape:
    """A study's true curves: each label's (a learning rate's) accuracy at the eval computes `at`, the eval grid
    the seeds read them on (the config's evals land a little later: its steps are smaller), the seeds' spread in
    speed, the lag-1 autocorrelation of the config's eval noise, and the absolute targets checked beside 98% of the
    best."""
    name: str
    at: np.ndarray
    labels: tuple[np.ndarray, ...]
    grid: np.ndarray
    speed_sd: float
    targets: tuple[float, ...]
    cfg_noise_lag1: float = 0.0

    def truth(self, label: int, compute: np.ndarray) -> np.ndarray:
        """A label's true curve at any compute: interpolated, and past its end continued at its gain over its last
        doubling (a stretched config, or a fast seed, is read past the baseline's budget)."""
        c, acc = np.asarray(compute, float), self.labels[label]
        slope = acc[-1] - np.interp(self.at[-1] / 2, self.at, acc)
        past = acc[-1] + slope * np.log2(np.maximum(c, 1.0) / self.at[-1])
        return np.where(c > self.at[-1], past, np.interp(c, self.at, acc))


ONE_X = Shape("1×: 21 evals, steep", BASE_GRID, (BASE_TRUTH,), BASE_GRID, speed_sd=0.05,
              targets=(0.6, 0.7, 0.76))
THREE_X = Shape("3×: 61 evals, flattening", THREE_X_AT, (THREE_X_BEST, THREE_X_HIGH_LR), np.linspace(0.0, 9425.0, 61),
                speed_sd=0.10, targets=(0.6, 0.7, 0.8, 0.84), cfg_noise_lag1=0.23)


def estimator(smoother=None, monotone=None):
    """simulate's `estimate` for compare() with these steps (None: compare's defaults): 98% of the best, then each
    target, as (saved %, [lo, hi])."""
    steps = {k: v for k, v in (("smoother", smoother), ("monotone", monotone)) if v is not None}

    def estimate(base: Side, cfg: Side, targets: tuple[float, ...]) -> list[tuple]:
        out = compare(base, cfg, targets=targets, **steps)
        return [(out["saved_pct"], out["saved_pct_ci"]), *[(t["saved_pct"], t["saved_pct_ci"]) for t in out["targets"]]]
    return estimate


def eval_noise(rng: np.random.Generator, sd: float, n: int, lag1: float) -> np.ndarray:
    """n evals' noise of marginal SD `sd`, AR(1) with coefficient `lag1` (0: independent)."""
    e = rng.normal(0.0, sd, n)
    for i in range(1, n):
        e[i] = lag1 * e[i - 1] + np.sqrt(1 - lag1 ** 2) * e[i]
    return e


def side(rng: np.random.Generator, shape: Shape, grid: np.ndarray, noise: float, stretch: float, n: int,
         lag1: float = 0.0) -> Side:
    """One side's seeds for every label: each seed learns at its own speed (compute × e^N(0, speed_sd), the same for
    its labels) along truth(c / stretch), read with `eval_noise` at every eval after the first (step 0 is the same
    model for every seed: exact)."""
    speeds = np.exp(rng.normal(0.0, shape.speed_sd, n))
    def read(label: int, speed: float) -> Curve:
        noise_at = np.r_[0.0, eval_noise(rng, noise, len(grid) - 1, lag1)]
        return Curve(grid, shape.truth(label, grid * speed / stretch) + noise_at)
    return {label: [read(label, s) for s in speeds] for label in range(len(shape.labels))}


def simulate(estimate, studies: int, noise_base: float, noise_cfg: float, true_saved: float = 0.0, n_seeds: int = 3,
             shape: Shape = ONE_X, seed: int = 0) -> list[dict]:
    """Run `estimate(base_side, cfg_side, targets) -> [(saved %, [lo, hi]), ...]` (98% of the best, then each of
    shape.targets; None for censored) on `studies` simulated studies. Returns, per goal, the median saved % (a
    censored study counts as −inf), its share of censored studies, and the share whose interval covers the truth (a
    None bound is open on its side; a censored study covers nothing)."""
    rng = np.random.default_rng(seed)
    cfg_grid = shape.grid + np.r_[0, np.full(len(shape.grid) - 1, 2.0)]
    points, covered = [], []
    for _ in range(studies):
        base = side(rng, shape, shape.grid, noise_base, 1.0, n_seeds)
        cfg = side(rng, shape, cfg_grid, noise_cfg, 1.0 - true_saved, n_seeds, shape.cfg_noise_lag1)
        got = estimate(base, cfg, shape.targets)
        points.append([-np.inf if p is None else p for p, _ in got])
        # a censored or undefined point has no interval: it does not cover the truth
        covered.append([p is not None and (lo is None or lo <= 100 * true_saved) and
                        (hi is None or 100 * true_saved <= hi) for p, (lo, hi) in got])
    points, covered = np.array(points), np.array(covered, float)
    return [{"goal": goal, "median_saved_pct": float(np.median(points[:, i])),
             "censored": float(np.mean(np.isinf(points[:, i]))), "coverage": float(covered[:, i].mean())}
            for i, goal in enumerate(["98% of the best", *shape.targets])]

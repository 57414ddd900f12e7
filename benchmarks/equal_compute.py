"""Each side at its best LR, read at equal compute from a committed study's results.json: the median over seeds of
pass@16 and sampled pass@1 at a third, two thirds and all of the shortest run's compute (either side's), with the
seeds' range in brackets, and the mean entropy of the training batches over the run (median over seeds). Then the
gap in greedy pass@1 (replay − baseline) at the same budgets: each seed's evals averaged over ±2 evals (the
estimator's per-seed step, so one noisy eval does not decide it), the difference of the sides' means with a 90%
Welch t interval over seeds. Prints one line a side and one for the gap; the findings pages quote them.

    python benchmarks/equal_compute.py benchmarks/results/measure/countdown/results.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from replay_rl.analysis.study import moving_average, t_quantile


def at_equal_compute(runs: list[dict], end: float, thirds: int = 3) -> dict:
    budgets = [end * (i + 1) / thirds for i in range(thirds)]
    read = {k: [[float(np.interp(b, r["compute"], r["pass_at_k"][k])) for r in runs] for b in budgets]
            for k in ("16", "1")}
    return {"budgets": budgets, "pass@16": read["16"], "sampled pass@1": read["1"],
            "entropy": float(np.median([np.mean(r["entropy"]) for r in runs]))}


def greedy_gap(base: list[dict], cfg: list[dict], budgets: list[float], level: float = 0.9) -> list[tuple]:
    """(mean difference, lo, hi) of smoothed greedy pass@1 at each budget, replay − baseline, Welch t interval."""
    def at(runs, b):
        return np.array([np.interp(b, r["compute"], moving_average(r["pass@1"])) for r in runs])
    return [welch(at(base, b), at(cfg, b), level) for b in budgets]


def welch(x: np.ndarray, y: np.ndarray, level: float = 0.9) -> tuple[float, float, float]:
    """(mean of y − mean of x, lo, hi): the Welch t interval over seeds (df rounded down, at least 1). Seeds that
    all read the same on both sides give no spread to build an interval on: lo and hi are then NaN, not d."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    if vx + vy == 0:
        return y.mean() - x.mean(), float("nan"), float("nan")
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    half = t_quantile((1 + level) / 2, max(1, int(df))) * np.sqrt(vx + vy)
    return y.mean() - x.mean(), y.mean() - x.mean() - half, y.mean() - x.mean() + half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a task's results.json from benchmarks/compute_saved.py")
    study = json.load(open(ap.parse_args().results))
    best = {"baseline": study["headline"]["base_best_lr"], study["headline"]["cfg_best_lr"][0]:
            study["headline"]["cfg_best_lr"][1]}
    runs = {side: [r for r in study["runs"][side] if abs(r["lr"] - lr) <= 1e-12] for side, lr in best.items()}
    end = min(r["compute"][-1] for side in runs.values() for r in side)  # the shortest run of either side
    for side, lr in best.items():
        got = at_equal_compute(runs[side], end)
        budgets = " / ".join(f"{b:.0f}" for b in got["budgets"])
        print(f"{side} at lr {lr:g} ({len(runs[side])} seeds), compute {budgets}: pass@16 {seeds(got['pass@16'])}; "
              f"sampled pass@1 {seeds(got['sampled pass@1'])}; entropy {got['entropy']:.3f}")
    sides = list(best)
    gaps = greedy_gap(runs[sides[0]], runs[sides[1]], at_equal_compute(runs[sides[0]], end)["budgets"])
    print(f"greedy pass@1, {sides[1]} − {sides[0]} (±2-eval mean a seed, 90% Welch t): " +
          " / ".join(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]" for d, lo, hi in gaps))


def seeds(at_budgets: list[list[float]]) -> str:
    """Each budget's median over seeds, with the seeds' range."""
    return " / ".join(f"{np.median(v):.3f} [{min(v):.2f}, {max(v):.2f}]" for v in at_budgets)


if __name__ == "__main__":
    main()

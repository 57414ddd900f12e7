"""Which compute-saved estimator to trust: every candidate on the same simulated studies with a known truth
(replay_rl/analysis/study_sim.py: the committed arithmetic baseline's shape, its eval grid, 3 seeds a side), at the noise
levels of the committed study's best LRs (baseline 0.024, replay 0.012), the reverse, and equal noise; identical true
curves and a true 15% saving. The checks are tests/test_study_estimator.py's: median within ±3 points of the truth
(12-18 for 15%), and a 90% interval covering 0 in ≥ 85% of studies.

    python benchmarks/estimator_choice.py [--studies 500]   # ~2 min here; writes benchmarks/results/estimator_choice/

Candidates, each per seed before the mean over seeds, the held-out LR choice and the jackknife-t interval of
replay_rl/analysis/study.py: the raw running max, isotonic regression, 3- and 5-eval moving averages (then the running max).
"committed" is the estimator the frontier study used until then: running max per seed, median over seeds, and a
percentile bootstrap over seeds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from replay_rl.analysis.study import compare, first_reach, saved, smooth
from replay_rl.analysis.study_sim import simulate

ROOT = Path(__file__).resolve().parents[1]


def isotonic(acc: np.ndarray) -> np.ndarray:
    """Pool-adjacent-violators: the least-squares non-decreasing fit."""
    blocks: list[list[float]] = []  # [mean, weight]
    for y in np.asarray(acc, float):
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1), (m2, w2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return np.concatenate([np.full(int(w), m) for m, w in blocks])


SMOOTHERS = {"running max": np.maximum.accumulate, "isotonic": isotonic,
             "moving average ±1 eval": lambda a: smooth(a, 1), "moving average ±2 evals (chosen)": smooth}


def with_smoother(smoother):
    def estimate(base, cfg):
        out = compare({"lr": base}, {"lr": cfg}, smoother=smoother)
        return out["saved_pct"], out["saved_pct_ci"]
    return estimate


def committed(base, cfg, draws: int = 400, seed: int = 0):
    """The earlier estimator: running max per seed, median over seeds, nearest-rank percentile bootstrap."""
    grid = np.unique(np.concatenate([[0.0], *[c.compute for c in base + cfg]]))
    grid = grid[grid <= min(c.compute[-1] for c in base + cfg)]
    stack = lambda cs: np.array([c.smoothed(grid, np.maximum.accumulate) for c in cs])  # noqa: E731
    sb, sc = stack(base), stack(cfg)

    def one(ib, ic):
        vb, vc = np.median(sb[ib], 0), np.median(sc[ic], 0)
        t = 0.98 * vb.max()
        return saved(first_reach(grid, vb, t), first_reach(grid, vc, t))
    rng = np.random.default_rng(seed)
    point = one(np.arange(len(sb)), np.arange(len(sc)))
    draws_ = np.sort([one(rng.integers(0, len(sb), len(sb)), rng.integers(0, len(sc), len(sc))) for _ in range(draws)])
    lo, hi = (draws_[int(np.rint((draws - 1) * q))] for q in (0.05, 0.95))
    pct = lambda x: 100 * x if np.isfinite(x) else None  # noqa: E731
    return pct(point), [pct(lo), pct(hi)]


CASES = {"same curve, noise 0.024 vs 0.012": (0.024, 0.012, 0.0), "same curve, 0.012 vs 0.024": (0.012, 0.024, 0.0),
         "same curve, 0.018 both": (0.018, 0.018, 0.0), "15% saved, 0.024 vs 0.012": (0.024, 0.012, 0.15),
         "15% saved, 0.012 vs 0.024": (0.012, 0.024, 0.15)}


def passes(case: tuple, got: dict) -> bool:
    truth = 100 * case[2]
    if truth == 0:
        return abs(got["median_saved_pct"]) <= 3 and got["coverage"] >= 0.85
    return truth - 3 <= got["median_saved_pct"] <= truth + 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", type=int, default=500)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "estimator_choice"))
    args = ap.parse_args()
    estimators = {"committed (running max, median, bootstrap)": committed} | {
        name: with_smoother(s) for name, s in SMOOTHERS.items()}
    table = {name: {case: simulate(est, args.studies, nb, nc, ts) for case, (nb, nc, ts) in CASES.items()}
             for name, est in estimators.items()}
    for name, row in table.items():
        row["passes_every_check"] = all(passes(CASES[c], row[c]) for c in CASES)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"studies": args.studies, "table": table}, indent=1))
    lines = [f"# Estimator choice ({args.studies} simulated studies a cell, 3 seeds a side)", "",
             "Each cell: median saved % / share of studies whose 90% interval covers the truth. Checks: median within "
             "±3 points of the truth, coverage ≥ 85% where the truth is 0.", "",
             "| estimator | " + " | ".join(CASES) + " | passes |", "|" + "---|" * (len(CASES) + 2)]
    for name, row in table.items():
        cells = [f"{row[c]['median_saved_pct']:.1f} / {100 * row[c]['coverage']:.0f}%" for c in CASES]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if row['passes_every_check'] else 'no'} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()

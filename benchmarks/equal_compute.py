"""Each side at its best LR, read at equal compute from a committed study's results.json: the median over seeds of
pass@16 and sampled pass@1 at a third, two thirds and all of the shortest run's compute (either side's), with the
seeds' range in brackets (3 seeds: too few for an interval), and the mean entropy of the training batches over the
run (median over seeds). Prints one line a side; the findings pages quote it.

    python benchmarks/equal_compute.py benchmarks/results/measure/countdown/results.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def at_equal_compute(runs: list[dict], end: float, thirds: int = 3) -> dict:
    budgets = [end * (i + 1) / thirds for i in range(thirds)]
    read = {k: [[float(np.interp(b, r["compute"], r["pass_at_k"][k])) for r in runs] for b in budgets]
            for k in ("16", "1")}
    return {"budgets": budgets, "pass@16": read["16"], "sampled pass@1": read["1"],
            "entropy": float(np.median([np.mean(r["entropy"]) for r in runs]))}


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


def seeds(at_budgets: list[list[float]]) -> str:
    """Each budget's median over seeds, with the seeds' range."""
    return " / ".join(f"{np.median(v):.3f} [{min(v):.2f}, {max(v):.2f}]" for v in at_budgets)


if __name__ == "__main__":
    main()

"""The replication's phase-1 rule (benchmarks/results/replication/plan.md), applied to phase 1's results.json: for
each side, the LR with the higher mean over seeds 0-2 of the isotonic-per-seed greedy pass@1 at the budget's end;
a tie within 0.005 keeps the incumbent (baseline 1.5e-4, replay 5e-5). Written before phase 1's results were read.
Prints JSON (each side's LRs with their per-seed and mean values, and the LR chosen) and writes it to --out.

    python benchmarks/replication_phase1.py runs/replication/phase1/arithmetic/results.json \
        --out benchmarks/results/replication/phase1/choice.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from replay_rl.analysis.study import isotonic

INCUMBENT = {"baseline": 1.5e-4, "replay_53_N10B": 5e-5}
TIE = 0.005
SEEDS = (0, 1, 2)


def end_value(run: dict) -> float:
    """The isotonic fit of one seed's greedy pass@1 against its evals, read at its last eval."""
    return float(isotonic(np.asarray(run["pass@1"], float))[-1])


def choose(runs: list[dict], incumbent: float) -> dict:
    by_lr: dict[float, dict[int, float]] = {}
    for r in runs:
        if r["seed"] in SEEDS:
            by_lr.setdefault(r["lr"], {})[r["seed"]] = end_value(r)
    if any(sorted(seeds) != list(SEEDS) for seeds in by_lr.values()):
        raise SystemExit(f"phase 1 is not complete: seeds per LR {({lr: sorted(s) for lr, s in by_lr.items()})}")
    means = {lr: float(np.mean(list(seeds.values()))) for lr, seeds in by_lr.items()}
    best = max(means, key=means.get)
    inc = next(lr for lr in means if abs(lr - incumbent) <= 1e-12)
    chosen = inc if means[best] - means[inc] <= TIE else best
    return {"per_seed": {f"{lr:g}": {str(s): v for s, v in sorted(seeds.items())} for lr, seeds in by_lr.items()},
            "mean": {f"{lr:g}": v for lr, v in means.items()}, "incumbent": incumbent, "chosen_lr": chosen,
            "rule": f"highest mean; within {TIE} of the incumbent keeps the incumbent"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="phase 1's arithmetic results.json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    study = json.loads(Path(args.results).read_text())
    choice = {"results": args.results, "sides": {side: choose(study["runs"][side], inc)
                                                for side, inc in INCUMBENT.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(choice, indent=1))
    print(json.dumps(choice))


if __name__ == "__main__":
    main()

"""Our on-policy runs against TRL's GRPOTrainer at equal rollouts (issue 42, item 4): is the gap in the noise?
Greedy held-out pass@1 at each eval step both sides share, and the mean reward of the training batches over a
window of steps (TRL's, and ours at cluster.emulate.lead_steps=1: each step's rollouts come from the weights it
updates), each as ours − TRL with a 90% Welch t interval over seeds. Writes gap.json; the peer_trl results page
quotes it.

    python benchmarks/peer_gap.py --trl DIR/seed0 DIR/seed1 --ours RUN0 RUN1 --window 26 50 --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from equal_compute import welch
from peer_compare import ours, trl

from replay_rl.metrics import read_metrics


def our_rewards(run: Path) -> dict[int, float]:
    return {r["step"]: r["batch/reward_mean"] for r in read_metrics(run / "metrics.jsonl", "train")}


def trl_rewards(folder: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["reward_mean"] for r in rows}


def window_mean(rewards: dict[int, float], lo: int, hi: int, run: Path) -> float:
    missing = [s for s in range(lo, hi + 1) if s not in rewards]
    if missing:
        raise SystemExit(f"{run} has no training row at steps {missing[:5]}: pass --window within its steps")
    return float(np.mean([rewards[s] for s in range(lo, hi + 1)]))


def gap(name: str, theirs: list[float], mine: list[float], level: float) -> dict:
    d, lo, hi = welch(np.array(theirs), np.array(mine), level)
    return {"measure": name, "trl": theirs, "ours": mine, "ours_minus_trl": d, "lo": lo, "hi": hi, "level": level}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trl", nargs="+", type=Path, required=True, help="peer_trl.py seed folders")
    ap.add_argument("--ours", nargs="+", type=Path, required=True, help="our run folders (metrics.jsonl)")
    ap.add_argument("--window", nargs=2, type=int, default=(26, 50), help="training steps LO HI, inclusive")
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if min(len(args.trl), len(args.ours)) < 2:
        raise SystemExit("--trl and --ours each need at least 2 seeds for an interval")
    theirs = [{e["step"]: e["pass@1"] for e in trl(f)} for f in args.trl]
    mine = [{e["step"]: e["pass@1"] for e in ours(r)} for r in args.ours]
    steps = sorted(set.intersection(*(set(c) for c in theirs + mine)) - {0})
    rows = [gap(f"greedy pass@1 at step {s}", [c[s] for c in theirs], [c[s] for c in mine], args.level)
            for s in steps]
    lo, hi = args.window
    rows.append(gap(f"training reward, steps {lo}-{hi}", [window_mean(trl_rewards(f), lo, hi, f) for f in args.trl],
                    [window_mean(our_rewards(r), lo, hi, r) for r in args.ours], args.level))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gap.json").write_text(json.dumps({"trl": [str(f) for f in args.trl],
                                                   "ours": [str(r) for r in args.ours], "rows": rows}, indent=1))
    for r in rows:
        print(f"{r['measure']}: ours − TRL {r['ours_minus_trl']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}] "
              f"({int(r['level'] * 100)}% Welch; TRL {', '.join(f'{v:.3f}' for v in r['trl'])}; "
              f"ours {', '.join(f'{v:.3f}' for v in r['ours'])})")


if __name__ == "__main__":
    main()

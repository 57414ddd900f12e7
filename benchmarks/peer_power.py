"""How often peer_gap.py's rule would call a gap, by seeds a side (issue 42): normal seeds with each side's spread as
measured (a gap.json row), the rule's 90% Welch interval off 0 counted over many simulated replications, once with the
measured difference as the truth (power) and once with no difference (the rule's false-gap rate). Sizes a fresh
replication before it runs. Writes power.json beside the gap.json it read.

    python benchmarks/peer_power.py benchmarks/results/peer_trl/gap4/gap.json --seeds 3 4 6 8
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from equal_compute import welch


def gap_rate(truth: float, sd_trl: float, sd_ours: float, seeds: int, draws: int, level: float,
             rng: np.random.Generator) -> float:
    """The share of `draws` simulated replications (`seeds` a side) whose interval for ours − TRL lies off 0."""
    off = 0
    for _ in range(draws):
        _, lo, hi = welch(rng.normal(0.0, sd_trl, seeds), rng.normal(truth, sd_ours, seeds), level)
        off += bool(hi < 0 or lo > 0)
    return off / draws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gap_json", type=Path, help="peer_gap.py's gap.json")
    ap.add_argument("--measure", default="greedy pass@1 at step 50", help="the row whose spreads and difference to use")
    ap.add_argument("--seeds", nargs="+", type=int, default=[3, 4, 6, 8])
    ap.add_argument("--draws", type=int, default=4000)
    args = ap.parse_args()
    row = next(r for r in json.loads(args.gap_json.read_text())["rows"] if r["measure"] == args.measure)
    sd_trl, sd_ours = float(np.std(row["trl"], ddof=1)), float(np.std(row["ours"], ddof=1))
    rng = np.random.default_rng(0)
    out = {"measure": args.measure, "truth": row["ours_minus_trl"], "sd_trl": sd_trl, "sd_ours": sd_ours,
           "level": row["level"], "draws": args.draws, "by_seeds": [
               {"seeds": n, "power": gap_rate(row["ours_minus_trl"], sd_trl, sd_ours, n, args.draws, row["level"], rng),
                "false_gap_rate": gap_rate(0.0, sd_trl, sd_ours, n, args.draws, row["level"], rng)}
               for n in args.seeds]}
    (args.gap_json.parent / "power.json").write_text(json.dumps(out, indent=1))
    for r in out["by_seeds"]:
        print(f"{r['seeds']} seeds a side: power {r['power']:.2f} against {out['truth']:+.3f}, "
              f"false-gap rate {r['false_gap_rate']:.2f}")


if __name__ == "__main__":
    main()

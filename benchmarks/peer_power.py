"""How often peer_gap.py's rule would call a gap, by seeds a side (issue 42): normal seeds with each side's spread as
measured (a gap.json row) or as given, the rule's 90% Welch interval off 0 counted over many simulated replications,
with a true ours − TRL of the measured difference or of the ones given (power: the interval below 0), and with none
(the false rates: below 0, and off 0 either way). The measured difference is the one that drew attention, so power at
it reads high; give smaller ones and a wider spread too. Sizes a fresh replication before it runs; writes power.json
beside the gap.json it read.

    python benchmarks/peer_power.py benchmarks/results/peer_trl/gap4/gap.json --seeds 3 4 6 \
        --ours-minus-trl -0.035 -0.02 --sd-trl 0.019 0.03
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from equal_compute import welch


def gap_rates(ours_minus_trl: float, sd_trl: float, sd_ours: float, seeds: int, draws: int, level: float,
              rng: np.random.Generator) -> tuple[float, float]:
    """Of `draws` simulated replications (`seeds` a side): the share whose interval for ours − TRL lies below 0, and
    the share whose interval lies off 0 either way."""
    below = above = 0
    for _ in range(draws):
        _, lo, hi = welch(rng.normal(0.0, sd_trl, seeds), rng.normal(ours_minus_trl, sd_ours, seeds), level)
        below, above = below + bool(hi < 0), above + bool(lo > 0)
    return below / draws, (below + above) / draws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gap_json", type=Path, help="peer_gap.py's gap.json")
    ap.add_argument("--measure", default="greedy pass@1 at step 50", help="the row whose spreads and difference to use")
    ap.add_argument("--seeds", nargs="+", type=int, default=[3, 4, 6, 8])
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--ours-minus-trl", nargs="+", type=float, help="true differences to size for (default: measured)")
    ap.add_argument("--sd-trl", nargs="+", type=float, help="TRL's seed spreads to size for (default: measured)")
    args = ap.parse_args()
    row = next(r for r in json.loads(args.gap_json.read_text())["rows"] if r["measure"] == args.measure)
    sd_ours = float(np.std(row["ours"], ddof=1))
    rng = np.random.default_rng(0)
    rows = []
    for sd_trl in args.sd_trl or [float(np.std(row["trl"], ddof=1))]:
        for n in args.seeds:
            false_below, false_off = gap_rates(0.0, sd_trl, sd_ours, n, args.draws, row["level"], rng)
            rows += [{"seeds": n, "sd_trl": sd_trl, "ours_minus_trl": d,
                      "power": gap_rates(d, sd_trl, sd_ours, n, args.draws, row["level"], rng)[0],
                      "false_below_rate": false_below, "false_off_rate": false_off}
                     for d in args.ours_minus_trl or [row["ours_minus_trl"]]]
    out = {"measure": args.measure, "measured": row, "sd_ours": sd_ours, "level": row["level"], "draws": args.draws,
           "rows": rows}
    (args.gap_json.parent / "power.json").write_text(json.dumps(out, indent=1))
    for r in rows:
        print(f"{r['seeds']} seeds a side, TRL sd {r['sd_trl']:.3f}: power {r['power']:.2f} against a true "
              f"{r['ours_minus_trl']:+.3f}; with none, below 0 {r['false_below_rate']:.3f}, "
              f"off 0 {r['false_off_rate']:.3f}")


if __name__ == "__main__":
    main()

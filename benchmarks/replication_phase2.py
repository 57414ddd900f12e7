"""The replication's phase-2 outcomes (benchmarks/results/replication/plan.md), from the study's results.json: each
side at its one fixed LR (phase 1's choice), the seeds given. Written before phase 2's results were read.

- primary: compute saved at the targets 0.60, 0.62, ..., 0.86 (`compare`, pick="own_best") with a simultaneous 90%
  band, Bonferroni over the targets (each target's jackknife-t interval at 1 - 0.10/14), and the plan's verdict at
  each target: "replay saves" where the band lies above 0, "baseline cheaper" where below, else "unresolved";
- secondary (pointwise 90%): Δ greedy pass@1 (replay - baseline, ±2-eval mean a seed, Welch t) at a third, two
  thirds and all of the shortest run's compute; compute saved to 98% of the baseline's best; each side's slope per
  doubling of compute over its last doubling.

Prints JSON and writes it to --out, and the tables as markdown to --md.

    python benchmarks/replication_phase2.py RUNS/replication/phase2/arithmetic/results.json \
        --out benchmarks/results/replication/phase2/outcomes.json --md benchmarks/results/replication/phase2/outcomes.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from equal_compute import at_equal_compute, greedy_gap
from replay_rl.analysis.study import compare, end_slope
from replay_rl.study.table import side

CHOICE = Path(__file__).parent / "results/replication/phase1/choice.json"
TARGETS = tuple(round(0.60 + 0.02 * i, 2) for i in range(14))
FAMILY_LEVEL = 0.90
SEEDS = tuple(range(3, 13))


def verdict(lo: float | None, hi: float | None, point: float | None) -> str:
    """The plan's words for one target's band (a bound None: a jackknife replicate censored on that side)."""
    if lo is not None and lo > 0:
        return "replay saves"
    if hi is not None and hi < 0:
        return "baseline cheaper"
    return "unresolved" if point is not None else "unresolved (censored or undefined)"


def pick_runs(study: dict, lrs: dict[str, float], seeds: tuple[int, ...]) -> dict[str, list[dict]]:
    """Each side's runs at its fixed LR and in `seeds`, by seed; exits with one line where a side has none."""
    out = {}
    for name, lr in lrs.items():
        runs = sorted((r for r in study["runs"][name] if abs(r["lr"] - lr) <= 1e-12 and r["seed"] in seeds),
                      key=lambda r: r["seed"])
        if not runs:
            raise SystemExit(f"no {name} run at lr {lr:g} with seeds {list(seeds)} in the results")
        out[name] = runs
    return out


def outcomes(runs: dict[str, list[dict]]) -> dict:
    (base_name, base_runs), (cfg_name, cfg_runs) = runs.items()
    base, cfg = side(base_runs), side(cfg_runs)
    level = 1 - (1 - FAMILY_LEVEL) / len(TARGETS)
    band = compare(base, cfg, pick="own_best", level=level, targets=TARGETS)
    primary = [{"target": t["target"], "saved_pct": t["saved_pct"], "band": t["saved_pct_ci"],
                "censored_fraction": t["censored_fraction"], "reach_base": t["reach_base"],
                "reach_cfg": t["reach_cfg"], "verdict": verdict(*t["saved_pct_ci"], t["saved_pct"])}
               for t in band["targets"]]
    top = compare(base, cfg, pick="own_best", level=0.9)
    end = min(r["compute"][-1] for rs in runs.values() for r in rs)
    budgets = at_equal_compute(base_runs, end)["budgets"]
    gaps = greedy_gap(base_runs, cfg_runs, budgets)
    return {
        "sides": {name: {"lr": rs[0]["lr"], "seeds": [r["seed"] for r in rs],
                         "model_sha256": sorted({r["model_sha256"] for r in rs}),
                         "end_slope_per_doubling": end_slope(next(iter(side(rs).values()))),
                         "final_pass@1_mean": float(np.mean([r["pass@1"][-1] for r in rs])),
                         "run_restarts": [r.get("run_restarts", 0) for r in rs]}
                  for name, rs in runs.items()},
        "primary": {"family_level": FAMILY_LEVEL, "per_target_level": level, "targets": primary,
                    "df": len(base_runs) + len(cfg_runs) - 2},
        "secondary": {
            "delta_pass@1": [{"compute": b, "delta": d, "ci90": [lo, hi]} for b, (d, lo, hi) in zip(budgets, gaps)],
            "saved_to_98pct_of_base_best": {k: top[k] for k in ("base_best", "threshold", "reach_base", "reach_cfg",
                                                                 "saved_pct", "saved_pct_ci", "censored_fraction")}},
        "names": {"baseline": base_name, "replay": cfg_name}}


def fmt(x: float | None, spec: str = "+.1f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(o: dict) -> str:
    p, s = o["primary"], o["secondary"]
    n = {k: len(v["seeds"]) for k, v in o["sides"].items()}
    lines = [f"Primary: compute saved, simultaneous {p['family_level']:.0%} band (Bonferroni, each target at "
             f"{p['per_target_level']:.4f}, jackknife-t with {p['df']} df), seeds {n}.", "",
             "| target | saved % | band | censored share | baseline reach | replay reach | verdict |",
             "|---|---|---|---|---|---|---|"]
    for t in p["targets"]:
        lines.append(f"| {t['target']:.2f} | {fmt(t['saved_pct'])} | [{fmt(t['band'][0])}, {fmt(t['band'][1])}] | "
                     f"{t['censored_fraction']:.2f} | {t['reach_base']:.0f} | {t['reach_cfg']:.0f} | {t['verdict']} |")
    top = s["saved_to_98pct_of_base_best"]
    lines += ["", "Secondary (pointwise 90%):", "",
              f"- compute saved to 98% of the baseline's best ({top['base_best']:.3f}, threshold "
              f"{top['threshold']:.3f}): {fmt(top['saved_pct'])}% [{fmt(top['saved_pct_ci'][0])}, "
              f"{fmt(top['saved_pct_ci'][1])}], censored share {top['censored_fraction']:.2f}",
              "- Δ greedy pass@1, replay − baseline: " + "; ".join(
                  f"at compute {g['compute']:.0f} {g['delta']:+.3f} [{g['ci90'][0]:+.3f}, {g['ci90'][1]:+.3f}]"
                  for g in s["delta_pass@1"])]
    for name, sd in o["sides"].items():
        sl = sd["end_slope_per_doubling"]
        lines.append(f"- {name} (lr {sd['lr']:g}): final pass@1 mean {sd['final_pass@1_mean']:.3f}; slope over the "
                     f"last doubling {sl['per_doubling']:+.3f} [{fmt(sl['ci'][0], '+.3f')}, "
                     f"{fmt(sl['ci'][1], '+.3f')}] per doubling; run restarts {sum(sd['run_restarts'])}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="phase 2's arithmetic results.json")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated (the plan: 3-12)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", help="where to write the tables as markdown")
    args = ap.parse_args()
    choice = json.loads(CHOICE.read_text())["sides"]
    lrs = {name: c["chosen_lr"] for name, c in choice.items()}
    seeds = tuple(int(s) for s in args.seeds.split(","))
    o = outcomes(pick_runs(json.loads(Path(args.results).read_text()), lrs, seeds)) | {"results": args.results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(o, indent=1))
    if args.md:
        Path(args.md).write_text(markdown(o))
    print(json.dumps(o))


if __name__ == "__main__":
    main()

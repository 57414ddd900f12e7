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
import sys
from pathlib import Path

import numpy as np

from equal_compute import at_equal_compute, greedy_gap
from replay_rl.analysis.study import compare, end_slope
from replay_rl.study.table import BASELINE, side

CHOICE = Path(__file__).parent / "results/replication/phase1/choice.json"
TARGETS = tuple(round(0.60 + 0.02 * i, 2) for i in range(14))
FAMILY_LEVEL = 0.90
SEEDS = tuple(range(3, 13))
PLAN_MODEL = "f9378cc86b72"  # the shipped arith2-warm-330's sha256, as the plan names it


def verdict(lo: float | None, hi: float | None, point: float | None) -> str:
    """The plan's words for one target's band. A bound None: a jackknife replicate was censored on that side (a
    side never reached the target), and the other bound's spread leaves that replicate out: said beside the word."""
    if lo is not None and lo > 0:
        word = "replay saves"
    elif hi is not None and hi < 0:
        word = "baseline cheaper"
    else:
        return "unresolved" if point is not None else "unresolved (censored or undefined)"
    return word + (" (one bound censored)" if lo is None or hi is None else "")


def finite(x: float | None) -> float | None:
    """JSON has no infinity: a reach never made (inf) is null."""
    return None if x is None or not np.isfinite(x) else float(x)


def pick_runs(study: dict, lrs: dict[str, float], seeds: tuple[int, ...]) -> dict[str, list[dict]]:
    """The baseline's runs, then replay's, each at its fixed LR and in `seeds`, by seed; one line and exit where a
    side has none, a warning where a side has fewer than the seeds asked or the runs started from other models."""
    out = {}
    for name in sorted(lrs, key=lambda n: n != BASELINE):
        lr = lrs[name]
        runs = sorted((r for r in study["runs"].get(name, []) if abs(r["lr"] - lr) <= 1e-12 and r["seed"] in seeds),
                      key=lambda r: r["seed"])
        if not runs:
            raise SystemExit(f"no {name} run at lr {lr:g} with seeds {list(seeds)} in the results")
        if len(runs) < len(seeds):
            print(f"warning: {name} has {len(runs)} of the {len(seeds)} seeds asked", file=sys.stderr)
        out[name] = runs
    models = {r["model_sha256"] for rs in out.values() for r in rs}
    if len(models) != 1 or not next(iter(models)).startswith(PLAN_MODEL):
        print(f"warning: the runs started from {sorted(models)}, not the plan's model {PLAN_MODEL}…", file=sys.stderr)
    return out


def outcomes(runs: dict[str, list[dict]]) -> dict:
    (base_name, base_runs), (cfg_name, cfg_runs) = runs.items()  # pick_runs puts the baseline first
    base, cfg = side(base_runs), side(cfg_runs)
    level = 1 - (1 - FAMILY_LEVEL) / len(TARGETS)
    band = compare(base, cfg, pick="own_best", level=level, targets=TARGETS)
    primary = [{"target": t["target"], "saved_pct": t["saved_pct"], "band": t["saved_pct_ci"],
                "censored_fraction": t["censored_fraction"], "reach_base": finite(t["reach_base"]),
                "reach_cfg": finite(t["reach_cfg"]), "verdict": verdict(*t["saved_pct_ci"], t["saved_pct"])}
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
            "saved_to_98pct_of_base_best": {k: top[k] for k in ("base_best", "threshold", "saved_pct", "saved_pct_ci",
                                                                 "censored_fraction")}
            | {k: finite(top[k]) for k in ("reach_base", "reach_cfg")}},
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
                     f"{t['censored_fraction']:.2f} | {fmt(t['reach_base'], '.0f')} | {fmt(t['reach_cfg'], '.0f')} | "
                     f"{t['verdict']} |")
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
    if not CHOICE.is_file() or not Path(args.results).is_file():
        raise SystemExit(f"missing {CHOICE if not CHOICE.is_file() else args.results}: run from a full checkout, "
                         "with the path of phase 2's results.json")
    lrs = {name: c["chosen_lr"] for name, c in json.loads(CHOICE.read_text())["sides"].items()}
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise SystemExit(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 3,4,5") from None
    o = outcomes(pick_runs(json.loads(Path(args.results).read_text()), lrs, seeds)) | {"results": args.results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(o, indent=1))
    if args.md:
        Path(args.md).write_text(markdown(o))
    print(json.dumps(o))


if __name__ == "__main__":
    main()

"""Where replay pays: the on-policy baseline against replay buffers on an emulated GPU cluster (cluster.emulate).

    python benchmarks/compute_saved.py --preset quick      # ≤ 12 min here: baseline + one replay config, 2 seeds
    python benchmarks/compute_saved.py --preset full       # ≤ 2 h here, by hand: the issue's whole study

Every run is a real `replay-rl train` (Ray generators, replay shards, DeepSpeed learner) on the testbed of
configs/tiny_cpu.yaml, paced as a W/T cluster on which generating a batch costs μ training steps. Compute is the
paper's axis, (K_train + μ·K_inf)/B trainer-step equivalents, so a CPU box measures the paper's trade-off: how much
learning replayed (older, reused) rollouts buy per unit of compute. Replay runs get the baseline's compute budget.
The baseline's learning does not depend on μ, so its runs are shared and re-priced at every μ (study.recharge).

Writes results.json, summary.md and PNGs into --out and prints the summary JSON; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.metrics import read_metrics
from replay_rl.study import Curve, hist_mean, hist_quantile, recharge, summarise_config
from replay_rl.theory import plan

PAPER_MU = 5.28  # Qwen2.5-7B, paper Table 2
BASELINE = "baseline"


def replay(w: int, t: int, *, n_mult: float = 1.0, mu: float = PAPER_MU, extra: tuple[str, ...] = ()) -> dict:
    return {"w": w, "t": t, "mu": mu, "n_mult": n_mult, "overrides": list(extra)}


HEADLINE = {
    "replay_53_N": replay(5, 3),
    "replay_53_N2.5x": replay(5, 3, n_mult=2.5),
    "replay_53_N10x": replay(5, 3, n_mult=10),
    "replay_44_N": replay(4, 4),
    "replay_62_N": replay(6, 2),
    "posbias0.2_53_N": replay(5, 3, extra=("replay.type=positive_bias", "replay.delta=0.2")),
    "posbias0.5_53_N": replay(5, 3, extra=("replay.type=positive_bias", "replay.delta=0.5")),
    "asymre_53_N": replay(5, 3, extra=("learner.loss.type=asymre",)),
}
SENSITIVITY = {"replay_53_N_mu2": replay(5, 3, mu=2.0), "replay_53_N_mu10": replay(5, 3, mu=10.0)}

# the sanity ladder at (5,3): replay ratio μ·T/W = 1 (must match the baseline), 1.5, 2, 3 at the horizon N, then larger N
LADDER = {f"fifo_y{y:g}_N": replay(5, 3, mu=y * 5 / 3) for y in (1, 1.5, 2, 3)} | {
    "fifo_y3_N4x": replay(5, 3, mu=5.0, n_mult=4), "fifo_y3_N10x": replay(5, 3, mu=5.0, n_mult=10)}

PRESETS: dict[str, dict] = {
    # the ladder: 1 seed a rung, ~15 min here
    "ladder": {"steps": 200, "eval_every": 25, "seeds": 1, "configs": LADDER, "sensitivity": {},
               "sensitivity_seeds": 0, "set": []},
    # the study: baseline + headline configs at 5 seeds, sensitivity at 3; ~2 h on 2 cores
    "full": {"steps": 400, "eval_every": 25, "seeds": 5, "configs": HEADLINE, "sensitivity": SENSITIVITY,
             "sensitivity_seeds": 3, "set": []},
    # a first look: ≤ 12 min on 2 cores
    "quick": {"steps": 200, "eval_every": 25, "seeds": 2, "configs": {"replay_53_N": HEADLINE["replay_53_N"]},
              "sensitivity": {}, "sensitivity_seeds": 0, "set": []},
    # CI: the whole pipeline end to end in about a minute; its numbers mean nothing
    "mini": {"steps": 12, "eval_every": 6, "seeds": 1, "configs": {"replay_53_N": HEADLINE["replay_53_N"]},
             "sensitivity": {}, "sensitivity_seeds": 0, "set": ["run.eval_prompts=100", "learner.batch_size=32"]},
}
# the study runs one generator actor and one learner rank: on 2 cores that wastes least; the emulated W/T is
# set by cluster.emulate, which is all the pacing and accounting read
STUDY_BASE = ["cluster.generators=1", "cluster.learners=1", "replay.sample_timeout_s=600", "run.checkpoint_every=null"]


def horizon_capacity(cfg: RunConfig, w: int, t: int, mu: float) -> int:
    """N = x*·R from Theorem 4.5 (α=0.25, ρ=0.1, `replay-rl plan`), raised to B by plan() as the shard must fill."""
    return int(plan(mu, 0.25, 0.1, cfg.learner.batch_size, w / t).capacity)


def fresh_capacity_floor(cfg: RunConfig) -> int:
    """The smallest N whose fresh part holds one batch: positive-bias keeps only (1−δ)N fresh items, and its δN
    reserve fills only with correct rollouts that age out, so at N = B a paced run could never fill a batch."""
    keep = 1 - cfg.replay.delta if cfg.replay.type == "positive_bias" else 1.0
    t = cfg.cluster.learners
    return int(math.ceil(cfg.learner.batch_size / keep / t)) * t


def run_specs(preset: dict, base: list[str], out: Path) -> list[tuple[str, int, RunConfig]]:
    """(config name, seed, RunConfig) for every run, baseline first. Replay gets the baseline's compute budget."""
    probe = RunConfig.load(None, base)
    b, steps, every = probe.learner.batch_size, preset["steps"], preset["eval_every"]
    specs = []

    def add(name: str, seeds: int, overrides: list[str], run_steps: int, run_every: int) -> None:
        for seed in range(seeds):
            specs.append((name, seed, RunConfig.load(None, [*base, *overrides, f"run.steps={run_steps}",
                                                         f"run.eval_every={run_every}", f"run.seed={seed}",
                                                         f"run.output_dir={out / name / f'seed{seed}'}"])))

    add(BASELINE, preset["seeds"], ["replay.type=lifo_once", f"replay.capacity={max(1024, 2 * b)}",
                                    f"cluster.emulate={{mu: {PAPER_MU}, generators: 5, learners: 3}}"], steps, every)
    for group, seeds in (("configs", preset["seeds"]), ("sensitivity", preset["sensitivity_seeds"])):
        for name, c in preset[group].items():
            scale = (1 + c["mu"]) / (1 + c["w"] / c["t"])  # same compute as the baseline's `steps`
            n = int(math.ceil(horizon_capacity(probe, c["w"], c["t"], c["mu"]) * c["n_mult"] / probe.cluster.learners)
                    ) * probe.cluster.learners
            # probed at a capacity any retention accepts: the base's N may be below this config's floor
            n = max(n, fresh_capacity_floor(RunConfig.load(None, [*base, *c["overrides"], "replay.capacity=65536"])))
            add(name, seeds, [*c["overrides"], f"replay.capacity={n}",
                              f"cluster.emulate={{mu: {c['mu']}, generators: {c['w']}, learners: {c['t']}}}"],
                int(round(steps * scale)), max(1, int(round(every * scale))))
    return specs


def load_run(cfg: RunConfig) -> dict:
    """What the study keeps of one finished run: its eval curve with counts, per-step learner stats, histograms."""
    out = Path(cfg.run.output_dir)
    evals, trains = read_metrics(out / "metrics.jsonl", "eval"), read_metrics(out / "metrics.jsonl", "train")
    hist = json.loads((out / "replay_stats.json").read_text())
    k = cfg.run.eval_k
    col = lambda rows, key: [r[key] for r in rows]  # noqa: E731
    return {"mu": cfg.cluster.emulate.mu, "batch_size": cfg.learner.batch_size, "capacity": cfg.replay.capacity,
            "steps": col(evals, "step"), "k_train": col(evals, "ledger/k_train"), "k_inf": col(evals, "ledger/k_inf"),
            "compute": col(evals, "ledger/compute"), "tokens": col(evals, "ledger/tokens"),
            "active_s": col(evals, "ledger/active_s"),
            "pass@1": col(evals, "eval/pass@1"), f"pass@{k}": col(evals, f"eval/pass@{k}"),
            "eval_problems": evals[-1]["eval/eval_problems"], "train_steps": col(trains, "step"),
            "entropy": col(trains, "batch/entropy"), "age_mean": col(trains, "batch/age_mean"),
            "clip_fraction": col(trains, "batch/clip_fraction"), "ratio_mean": col(trains, "batch/ratio_mean"),
            "replay_ratio": hist["replay_ratio"], "age_hist": hist["age_hist"], "reuse_hist": hist["reuse_hist"],
            "since_last_use_hist": hist["since_last_use_hist"], "wall_s": trains[-1]["ledger/wall_s"]}


def curve(run: dict, mu: float | None = None) -> Curve:
    """A run's eval curve, its compute priced at `mu` (default: the μ it ran at)."""
    compute = recharge(run["k_train"], run["k_inf"], run["batch_size"], run["mu"] if mu is None else mu)
    return Curve(compute, np.asarray(run["pass@1"], float))


def summarise(results: dict[str, list[dict]], k: int) -> dict:
    """The study table: each config against the baseline re-priced at that config's μ."""
    base = results[BASELINE]
    table = {}
    for name, runs in results.items():
        mu = runs[0]["mu"] if name != BASELINE else PAPER_MU
        base_curves = [curve(r, mu) for r in base]
        threshold = float(np.median([c.acc[-1] for c in base_curves]))
        row = summarise_config(base_curves, [curve(r) for r in runs], threshold)
        ages = [a for r in runs for a in r["age_mean"]]
        table[name] = row | {
            "mu": mu, "baseline_final_pass@1": threshold, "capacity": runs[0]["capacity"],
            "replay_ratio_median": float(np.median([r["replay_ratio"] for r in runs])),
            f"final_pass@{k}_median": float(np.median([r[f"pass@{k}"][-1] for r in runs])),
            "entropy_mean_median": float(np.median([np.mean(r["entropy"]) for r in runs])),
            "batch_age_mean": float(np.mean(ages)),
            "buffer_age_p90_median": float(np.median([hist_quantile(r["age_hist"], 0.9) for r in runs])),
            "reuse_at_eviction_mean_median": float(np.median([hist_mean(r["reuse_hist"]) for r in runs])),
            "since_last_use_mean_median": float(np.median([hist_mean(r["since_last_use_hist"]) for r in runs])),
            "clip_fraction_mean_median": float(np.median([np.mean(r["clip_fraction"]) for r in runs])),
            "wall_s_median": float(np.median([r["wall_s"] for r in runs])), "seeds": len(runs),
        }
    return table


def fidelity(table: dict) -> list[dict]:
    """The paper's three qualitative findings, each marked reproduced or not at this scale, with its numbers."""
    rows = []
    head, base = table.get("replay_53_N"), table[BASELINE]
    if head:
        f = head["budgets_ahead_fraction"]
        rows.append({"finding": "(i) the buffer is ≥ the baseline at every compute budget (5,3), horizon N",
                     "reproduced": bool(f == 1.0), "numbers": f"replay ≥ baseline at {100 * f:.0f}% of budgets"})
        rows.append({"finding": "(iii) entropy stays higher with a buffer (training batches, as in the paper)",
                     "reproduced": bool(head["entropy_mean_median"] > base["entropy_mean_median"]),
                     "numbers": f"mean entropy {head['entropy_mean_median']:.3f} vs baseline "
                                f"{base['entropy_mean_median']:.3f}"})
    big = table.get("replay_53_N10x")
    if head and big:
        slower = big["compute_to_reach_median"] > head["compute_to_reach_median"] or \
            big["final_median"] < head["final_median"]
        stabler = big["drawdown_median"] < head["drawdown_median"]
        rows.append({"finding": "(ii) a larger N learns more slowly but more stably",
                     "reproduced": bool(slower and stabler),
                     "numbers": f"N={big['capacity']}: final {big['final_median']:.3f}, reach "
                                f"{big['compute_to_reach_median']:.0f}, drawdown {big['drawdown_median']:.3f}; "
                                f"N={head['capacity']}: final {head['final_median']:.3f}, reach "
                                f"{head['compute_to_reach_median']:.0f}, drawdown {head['drawdown_median']:.3f}"})
    return rows


def markdown(table: dict, rows: list[dict], k: int) -> str:
    fmt = lambda x, p=2: "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{p}f}"  # noqa
    lines = [f"| config | μ | N | seeds | pass@1 start → final (lift) | reached | compute saved % [90% CI] | "
             f"budgets ahead | pass@{k} | replay ratio | batch age | entropy |", "|" + "---|" * 12]
    for name, t in table.items():
        lo, hi = t["compute_saved_pct_ci90"]
        lines.append(f"| {name} | {t['mu']:g} | {t['capacity']} | {t['seeds']} | {fmt(t['start_median'])} → "
                     f"{fmt(t['final_median'])} ({fmt(t['lift_median'])}) | {t['reached']} | "
                     f"{fmt(t['compute_saved_pct'], 0)} [{fmt(lo, 0)}, {fmt(hi, 0)}] | "
                     f"{fmt(t['budgets_ahead_fraction'])} | {fmt(t[f'final_pass@{k}_median'])} | "
                     f"{fmt(t['replay_ratio_median'])} | {fmt(t['batch_age_mean'], 1)} | "
                     f"{fmt(t['entropy_mean_median'], 3)} |")
    lines += ["", "| finding | reproduced | numbers |", "|---|---|---|"]
    lines += [f"| {r['finding']} | {'yes' if r['reproduced'] else 'no'} | {r['numbers']} |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    ap.add_argument("--out", default="runs/bench/compute_saved")
    ap.add_argument("--set", "-s", action="append", default=[], help="override applied to every run")
    ap.add_argument("--seeds", type=int, help="seeds per config (default: the preset's); sensitivity keeps ≤ this")
    ap.add_argument("--configs", help="comma-separated subset of the preset's configs (the baseline always runs)")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: summarise the finished runs already in --out (a study stopped part-way); "
                         "without it, finished runs in --out are kept and only the rest run")
    args = ap.parse_args()
    preset, out = dict(PRESETS[args.preset]), Path(args.out)
    if args.seeds:
        preset |= {"seeds": args.seeds, "sensitivity_seeds": min(args.seeds, preset["sensitivity_seeds"])}
    if args.configs:
        keep = set(args.configs.split(","))
        unknown = keep - set(preset["configs"]) - set(preset["sensitivity"])
        if unknown:
            ap.error(f"--configs: {sorted(unknown)} not in preset {args.preset!r}; choose from "
                     f"{sorted([*preset['configs'], *preset['sensitivity']])}")
        preset |= {g: {n: c for n, c in preset[g].items() if n in keep} for g in ("configs", "sensitivity")}
    specs = run_specs(preset, [*STUDY_BASE, *preset["set"], *args.set], out)

    from replay_rl.trainer import connect, train
    from replay_rl.warmstart import ensure_model

    if args.report_only:  # a run is finished once it wrote replay_stats.json
        specs = [s for s in specs if (Path(s[2].run.output_dir) / "replay_stats.json").is_file()]
    else:
        connect(specs[0][2])  # one Ray session for all runs
        ensure_model(specs[0][2])  # the shared warm-started model, built once
    results: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    todo = [not (Path(cfg.run.output_dir) / "replay_stats.json").is_file() for _, _, cfg in specs]
    trained = 0
    for i, ((name, seed, cfg), run_it) in enumerate(zip(specs, todo)):
        t1 = time.perf_counter()
        if run_it:  # a rerun continues a stopped study: finished runs are kept, a partial one starts over
            shutil.rmtree(cfg.run.output_dir, ignore_errors=True)
            train(cfg)
            trained += 1
        run = load_run(cfg)
        results.setdefault(name, []).append(run)
        done, left = time.perf_counter() - t0, sum(todo[i + 1:])
        how = f"{cfg.run.steps} steps in {time.perf_counter() - t1:.0f} s" if run_it else "finished earlier"
        print(f"[{i + 1}/{len(specs)}] {name} seed {seed}: {how}, "
              f"pass@1 {run['pass@1'][0]:.3f} → {run['pass@1'][-1]:.3f}, compute {run['compute'][-1]:.0f}; "
              f"{done / 60:.1f} min so far, ~{done / max(trained, 1) * left / 60:.1f} min left",
              file=sys.stderr, flush=True)
    k = specs[0][2].run.eval_k
    table = summarise(results, k)
    rows = fidelity(table)
    out.mkdir(parents=True, exist_ok=True)
    from study_plots import plot_all  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

    plots = plot_all(results, table, out)
    report = {"benchmark": "compute_saved", "preset": args.preset, "compute_axis": "(K_train + mu*K_inf)/B",
              "table": table, "fidelity": rows, "plots": plots, "wall_min": (time.perf_counter() - t0) / 60}
    (out / "results.json").write_text(json.dumps(report | {"runs": results}, indent=1))
    (out / "summary.md").write_text(markdown(table, rows, k))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

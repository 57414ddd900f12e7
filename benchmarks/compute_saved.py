"""Where replay pays: the on-policy baseline against replay buffers on an emulated GPU cluster (cluster.emulate).

    python benchmarks/compute_saved.py --preset quick      # ≤ 12 min here: baseline + one replay config, 2 seeds
    python benchmarks/compute_saved.py --preset full       # ≤ 2 h here, by hand: the issue's whole study
    python benchmarks/compute_saved.py --preset frontier   # the LR frontier (Fig. 4) on arithmetic and countdown
    python benchmarks/compute_saved.py --preset rules_frontier  # issue 29: the best rule's LR frontier, both tasks
    python benchmarks/compute_saved.py --preset probe_grid  # issue 30: the grid over N that judges the probe's pilot

Every run is a real `replay-rl train` (Ray generators, replay shards, DeepSpeed learner) on the testbed of
configs/tiny_cpu.yaml (task "arithmetic") or configs/tiny_cpu_countdown.yaml ("countdown"), paced as a W/T cluster
on which generating a batch costs μ training steps. Compute is the paper's axis, (K_train + μ·K_inf)/B trainer-step
equivalents, so a CPU box measures the paper's trade-off: how much learning replayed (older, reused) rollouts buy
per unit of compute. Replay runs get the baseline's compute budget.
The baseline's learning does not depend on μ, so its runs are shared and re-priced at every μ (study.recharge).

Each task writes results.json, summary.md and PNGs into --out/TASK; --out/summary.md and results.json put the
tasks' headlines side by side. Prints the headlines as JSON; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

from replay_rl.config import RunConfig
from replay_rl.analysis.theory import plan
from study_markdown import markdown, tasks_markdown
from study_presets import PRESETS, STUDY_BASE
from study_runs import check_one_model, committed_run, committed_runs, extending, extension_specs, finished, load_run
from study_table import BASELINE, PAPER_MU, buffer_frontier, fidelity, n_grid, summarise

ROOT = Path(__file__).resolve().parents[1]
# each task's testbed: None is the embedded default (configs/tiny_cpu.yaml's arithmetic)
TASKS = {"arithmetic": None, "countdown": str(ROOT / "configs" / "tiny_cpu_countdown.yaml")}


def capacity_for(rule: str, cfg: RunConfig, w: int, t: int, mu: float) -> tuple[int, str]:
    """N for a row's rule, and how it was set. "probe": `replay-rl probe`'s N at this split, from the task's
    committed benchmarks/results/probe/TASK/probe.json (issue 20's check against the grid over N). "horizon":
    `replay-rl plan`'s best N at this split (Theorem 4.5 with α=0.25, ρ=0.1), which is raised to B when smaller (a
    shard must hold a batch: the row is then N = B, and says so); "B", "B+R", "kB": the batch size, one batch plus
    one step's inserts R = B·(W/T)/μ, k batches."""
    b = cfg.learner.batch_size
    if rule == "probe":  # issue 20's check: the probe's recommendation on this task, as committed
        probe = ROOT / "benchmarks" / "results" / "probe" / cfg.task.type / "probe.json"
        return json.loads(probe.read_text())["recommendation"]["at_config_split"]["capacity"], "probe"
    if rule == "horizon":
        p = plan(mu, 0.25, 0.1, b, w / t)
        raised = p.capacity != p.capacity_unclamped
        return p.capacity, f"horizon {p.capacity_unclamped} < B, raised to B" if raised else "horizon"
    if rule == "B+R":
        return int(math.ceil(b + b * (w / t) / mu)), "B+R"
    return int(math.ceil(float(rule.removesuffix("B") or 1) * b)), rule


def capacity_notes(preset: dict, base: list[str], config: str | None = None) -> dict[str, str]:
    """How each row's N was set (capacity_for), for the study table: a horizon row raised to B must say so."""
    probe = RunConfig.load(config, base)
    return {name: capacity_for(c["n"], probe, c["w"], c["t"], c["mu"])[1]
            for group in ("configs", "sensitivity") for name, c in preset[group].items()} | {BASELINE: "backlog bound"}


def fresh_capacity_floor(cfg: RunConfig) -> int:
    """The smallest N whose fresh part holds one batch: positive-bias keeps only (1−δ)N fresh items, and its δN
    reserve fills only with correct rollouts that age out, so at N = B a paced run could never fill a batch."""
    keep = 1 - cfg.replay.delta if cfg.replay.type == "positive_bias" else 1.0
    t = cfg.cluster.learners
    return int(math.ceil(cfg.learner.batch_size / keep / t)) * t


def run_specs(preset: dict, base: list[str], out: Path, config: str | None = None) -> list[tuple[str, int, RunConfig]]:
    """(config name, seed, RunConfig) for every run, baseline first, each at every learning rate of its row.
    Replay gets the baseline's compute budget. A run's folder is out/NAME/lr{LR}/seed{S} (out/NAME/seed{S} when the
    preset keeps the config's LR). `config` is the task's YAML (None: the embedded default)."""
    probe = RunConfig.load(config, base)
    b, steps, every = probe.learner.batch_size, preset["steps"], preset["eval_every"]
    specs = []

    def add(name: str, seeds: int, overrides: list[str], run_steps: int, run_every: int, lrs) -> None:
        for lr in lrs:
            folder = out / name / (f"lr{lr:g}" if lr is not None else "")
            for seed in range(preset.get("first_seed", 0), preset.get("first_seed", 0) + seeds):
                lr_set = [f"learner.lr={lr}"] if lr is not None else []
                specs.append((name, seed, RunConfig.load(config, [*base, *overrides, *lr_set, f"run.steps={run_steps}",
                                                             f"run.eval_every={run_every}", f"run.seed={seed}",
                                                             f"run.output_dir={folder / f'seed{seed}'}"])))

    add(BASELINE, preset["seeds"], ["replay.type=lifo_once", f"replay.capacity={max(1024, 2 * b)}",
                                    f"cluster.emulate={{mu: {PAPER_MU}, generators: 5, learners: 3}}"], steps, every,
        preset["lrs"])
    for group, seeds in (("configs", preset["seeds"]), ("sensitivity", preset["sensitivity_seeds"])):
        for name, c in preset[group].items():
            scale = (1 + c["mu"]) / (1 + c["w"] / c["t"])  # same compute as the baseline's `steps`
            n, _ = capacity_for(c["n"], probe, c["w"], c["t"], c["mu"])
            n = int(math.ceil(n / probe.cluster.learners)) * probe.cluster.learners
            # probed at a capacity any retention accepts: the base's N may be below this config's floor
            n = max(n, fresh_capacity_floor(RunConfig.load(config, [*base, *c["overrides"], "replay.capacity=65536"])))
            add(name, min(seeds, c["seeds"] or seeds), [*c["overrides"], f"replay.capacity={n}",
                              f"cluster.emulate={{mu: {c['mu']}, generators: {c['w']}, learners: {c['t']}}}"],
                int(round(steps * scale)), max(1, int(round(every * scale))), c["lrs"] or preset["lrs"])
    return specs


def task_presets(preset: dict, tasks: list[str] | None) -> dict[str, dict]:
    """The preset as each task runs it: its "tasks" entry's keys replace the preset's (no entry: arithmetic only).
    `tasks` picks some of them; a task the preset does not name is an error (its grids were set for another)."""
    named = preset.get("tasks", {"arithmetic": {}})
    unknown = set(tasks or ()) - set(named)
    if unknown:
        raise ValueError(f"--task {sorted(unknown)}: this preset runs {sorted(named)}")
    return {task: preset | named[task] for task in (tasks or named)}


def study_task(task: str, preset: dict, specs: list, base: list[str], out: Path, report_only: bool,
               progress: dict, dest: Path) -> dict:
    """Run one task's unfinished runs in `out` (all of them are kept, so that a stopped study resumes) and write
    its results.json, summary.md and PNGs into `dest` (`out`, or a folder of its own for --no-extend, so that a
    base-budget report never replaces the full one). Returns its report."""
    from replay_rl.driver.trainer import train
    from study_plots import plot_all  # benchmarks/ is on sys.path when run as a script

    kept = committed_runs(out) if report_only else {}

    def run_all(specs: list) -> dict[str, list[dict]]:
        results: dict[str, list[dict]] = {}
        for name, seed, cfg in specs:
            done_before, short_of = finished(cfg), extending(cfg)
            if report_only and not done_before:
                # the committed runs (results.json) stand in for run folders not here, each at its own budget
                run = committed_run(kept, name, cfg)
                if run is not None:
                    results.setdefault(name, []).append(run)
                    progress["i"] += 1
                continue
            t1 = time.perf_counter()
            if not done_before:
                if short_of is None:  # a partial run starts over
                    shutil.rmtree(cfg.run.output_dir, ignore_errors=True)
                train(cfg)  # one that finished short of its steps resumes from its final checkpoint
                progress["trained"] += 1
            progress["left"] -= not done_before
            run = load_run(cfg)
            results.setdefault(name, []).append(run)
            progress["i"] += 1
            done = time.perf_counter() - progress["t0"]
            how = ("finished earlier" if done_before else f"{cfg.run.steps} steps in {time.perf_counter() - t1:.0f} s"
                   + (f" (extended from step {short_of})" if short_of else ""))
            print(f"[{progress['i']}/{progress['n']}] {task} {name} lr {cfg.learner.lr:g} seed {seed}: {how}, "
                  f"pass@1 {run['pass@1'][0]:.3f} → {run['pass@1'][-1]:.3f}, compute {run['compute'][-1]:.0f}; "
                  f"{done / 60:.1f} min so far, "
                  f"~{done / max(progress['trained'], 1) * progress['left'] / 60:.1f} min left", file=sys.stderr,
                  flush=True)
        return results

    results = run_all(specs)
    longer = extension_specs(preset, specs, results) if BASELINE in results else []
    progress["n"] += len(longer)
    progress["left"] += sum(not finished(cfg) for *_, cfg in longer)
    extended = run_all(longer)
    for name, runs in extended.items():  # the extended runs replace their shorter selves
        lrs = {r["lr"] for r in runs}
        results[name] = [r for r in results[name] if r["lr"] not in lrs] + runs
    model = check_one_model(results)
    if BASELINE not in results:  # a stopped study that had not reached this task
        print(f"{task}: no finished baseline run, nothing to summarise", file=sys.stderr, flush=True)
        return {}
    k = specs[0][2].run.eval_k
    print(f"summarising {task} (jackknife over seeds) ...", file=sys.stderr, flush=True)
    table, curves = summarise(results, k)
    for name, how in capacity_notes(preset, base, TASKS[task]).items():
        if name in table:
            table[name]["n_rule"] = how
    (headline, headline_curves), (pooled, _) = (buffer_frontier(results, pooled=p) for p in (False, True))
    rows, grid = fidelity(table, headline), n_grid(results)
    dest.mkdir(parents=True, exist_ok=True)
    plots = plot_all(results, table, curves, headline, headline_curves, dest)
    report = {"benchmark": "compute_saved", "task": task, "compute_axis": "(K_train + mu*K_inf)/B",
              "reach": "compute to first reach 98% of the baseline frontier's best, and each accuracy target "
                       "(smoothed seeds, LR chosen on held-out seeds, jackknife-t interval: replay_rl/analysis/study.py)",
              "warm_model_sha256": model,
              "extended": {name: sorted({r["lr"] for r in runs}) for name, runs in extended.items()},
              "headline": headline, "pooled_buffer_frontier": pooled, "table": table, "fidelity": rows, "n_grid": grid,
              "plots": plots}
    (dest / "results.json").write_text(strict_json(report | {"curves": curves, "headline_curves": headline_curves,
                                                            "runs": results}))
    if headline:  # the front page says what the frontier covers past the shorter runs' end
        headline["extended"] = report["extended"]
    (dest / "summary.md").write_text(markdown(table, headline, pooled, rows, k, grid))
    return report


def main(argv: list[str] | None = None) -> None:
    """argv: the command line's arguments (None: sys.argv's); the suite's report-only calls pass them in-process."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    ap.add_argument("--out", default="runs/bench/compute_saved")
    ap.add_argument("--task", action="append", choices=sorted(TASKS),
                    help="run only this task (repeatable; default: every task the preset names)")
    ap.add_argument("--set", "-s", action="append", default=[], help="override applied to every run")
    ap.add_argument("--seeds", type=int, help="seeds per config (default: the preset's); sensitivity keeps ≤ this")
    ap.add_argument("--configs", help="comma-separated subset of the preset's configs (the baseline always runs)")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: summarise the finished runs already in --out (a study stopped part-way); "
                         "without it, finished runs in --out are kept and only the rest run")
    ap.add_argument("--no-extend", action="store_true",
                    help="summarise at the preset's base budget, into --out/base_budget/: its longer runs neither run "
                         "nor count (the report of a study whose extension has not run yet)")
    args = ap.parse_args(argv)
    out, plans = Path(args.out), {}
    try:
        presets = task_presets(PRESETS[args.preset], args.task)
    except ValueError as e:
        ap.error(str(e))
    keep = set(args.configs.split(",")) if args.configs else None
    rows = {n for p in presets.values() for g in ("configs", "sensitivity") for n in p[g]}
    if keep and keep - rows:
        ap.error(f"--configs: {sorted(keep - rows)} not in preset {args.preset!r}; choose from {sorted(rows)}")
    for task, preset in presets.items():
        if args.no_extend:
            preset |= {"extend": 0}
        if args.seeds:
            preset |= {"seeds": args.seeds, "sensitivity_seeds": min(args.seeds, preset["sensitivity_seeds"])}
        if keep:  # a task without the named rows runs only its baseline
            preset |= {g: {n: c for n, c in preset[g].items() if n in keep} for g in ("configs", "sensitivity")}
        base = [*STUDY_BASE, *preset["set"], *args.set]
        plans[task] = (preset, base, run_specs(preset, base, out / task, TASKS[task]))

    from replay_rl.driver.session import connect
    from replay_rl.evaluation.warmstart import ensure_model

    t0 = time.perf_counter()
    all_specs = [s for _, _, specs in plans.values() for s in specs]
    done_before = sum(finished(cfg) for _, _, cfg in all_specs)
    if args.report_only and not done_before and not any((out / task / "results.json").is_file() for task in plans):
        sys.exit(f"--report-only: {out} holds no finished run and no TASK/results.json to summarise; run the study "
                 "without --report-only first, or point --out at a committed study (benchmarks/results/NAME)")
    # --report-only counts only the finished runs, the ones it reads
    progress = {"t0": t0, "i": 0, "trained": 0, "n": done_before if args.report_only else len(all_specs),
                "left": 0 if args.report_only else len(all_specs) - done_before}
    if not args.report_only:
        connect(all_specs[0][2])  # one Ray session for all runs
    reports, dest = {}, out / "base_budget" if args.no_extend else out
    for task, (preset, base, specs) in plans.items():
        if not args.report_only:
            ensure_model(specs[0][2])  # the task's warm-started model, built once
        reports[task] = study_task(task, preset, specs, base, out / task, args.report_only, progress,
                                   dest / task)
    head = {task: {key: r.get(key) for key in ("headline", "pooled_buffer_frontier", "fidelity", "n_grid", "plots")}
            for task, r in reports.items()}
    # --report-only made no run: the study's own time, kept from the results.json it rewrites (null if none)
    wall = kept_wall(dest / "results.json") if args.report_only else (time.perf_counter() - t0) / 60
    summary = {"benchmark": "compute_saved", "preset": args.preset, "tasks": head, "wall_min": wall}
    (dest / "results.json").write_text(strict_json(summary))
    (dest / "summary.md").write_text(tasks_markdown({task: r.get("headline") for task, r in reports.items()},
                                                   args.preset))
    print(strict_json(summary))


def kept_wall(path: Path) -> float | None:
    return json.loads(path.read_text()).get("wall_min") if path.is_file() else None


def strict_json(obj) -> str:
    """JSON with ±inf (a side that never reached) and NaN written as null, which every reader accepts."""
    clean = lambda x: (None if isinstance(x, float) and not math.isfinite(x) else  # noqa: E731
                       {k: clean(v) for k, v in x.items()} if isinstance(x, dict) else
                       [clean(v) for v in x] if isinstance(x, (list, tuple)) else x)
    return json.dumps(clean(obj), indent=1)

if __name__ == "__main__":
    main()

"""`replay-rl study` (and benchmarks/compute_saved.py): where replay pays, the on-policy baseline against replay
buffers on an emulated GPU cluster (cluster.emulate), each run a Ray Tune trial.

    replay-rl study --preset quick      # ≤ 12 min here: baseline + one replay config, 2 seeds
    replay-rl study --preset full       # ≤ 2 h here, by hand: the issue's whole study
    replay-rl study --preset frontier   # the LR frontier (Fig. 4) on arithmetic and countdown
    replay-rl study --preset rules_frontier  # issue 29: the best rule's LR frontier, both tasks
    replay-rl study --preset probe_grid  # issue 30: the grid over N that judges the probe's pilot

Every run is a real `replay-rl train` (Ray generators, replay shards, DeepSpeed learner) on the testbed of
configs/tiny_cpu.yaml (task "arithmetic") or configs/tiny_cpu_countdown.yaml ("countdown"), paced as a W/T cluster
on which generating a batch costs μ training steps. Compute is the paper's axis, (K_train + μ·K_inf)/B trainer-step
equivalents, so a CPU box measures the paper's trade-off: how much learning replayed (older, reused) rollouts buy
per unit of compute. Replay runs get the baseline's compute budget.
The baseline's learning does not depend on μ, so its runs are shared and re-priced at every μ (study.recharge).

Each run reserves its own shape (cluster.bundles()) on the Ray cluster, and as many run at once as it holds
(--max-concurrent caps it; one at a time when the study starts its own local Ray). A study whose driver died
resumes when run again with the same arguments: finished runs are kept, the others run again.

Each task writes results.json, summary.md and PNGs into --out/TASK; --out/summary.md and results.json put the
tasks' headlines side by side. Prints the headlines as JSON; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from replay_rl.config import ConfigError
from replay_rl.study.markdown import tasks_markdown
from replay_rl.study.preset_schema import read
from replay_rl.study.presets import PRESETS, STUDY_BASE
from replay_rl.study.progress import Progress
from replay_rl.study.report import front_page, kept_wall, report_one, strict_json
from replay_rl.study.runs import StudyStopped, committed_runs, finished
from replay_rl.study.specs import TASKS, absolute, run_specs, task_presets


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="replay-rl study", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="quick", help=f"one of {', '.join(sorted(PRESETS))}, or a preset file of "
                    "your own (PATH.yaml, as replay_rl/study/preset_files/ holds them)")
    ap.add_argument("--out", default="runs/bench/compute_saved")
    ap.add_argument("--task", action="append", choices=sorted(TASKS),
                    help="run only this task (repeatable; default: every task the preset names)")
    ap.add_argument("--set", "-s", action="append", default=[], help="override applied to every run")
    ap.add_argument("--seeds", type=int, help="seeds per config (default: the preset's); sensitivity keeps ≤ this")
    ap.add_argument("--configs", help="comma-separated subset of the preset's configs (the baseline always runs)")
    ap.add_argument("--max-concurrent", type=int, default=None,
                    help="at most this many runs at once (default: as many as the cluster's resources hold; one at "
                         "a time when the study starts its own local Ray). A resumed study keeps its first value")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: summarise the finished runs already in --out (a study stopped part-way); "
                         "without it, finished runs in --out are kept and only the rest run")
    ap.add_argument("--no-extend", action="store_true",
                    help="summarise at the preset's base budget, into --out/base_budget/: its longer runs neither run "
                         "nor count (the report of a study whose extension has not run yet)")
    args = ap.parse_args(argv)
    if args.max_concurrent is not None and args.max_concurrent < 1:
        ap.error("--max-concurrent: at least 1")
    try:
        args.presets = task_presets(preset_named(args.preset), args.task)
    except (ValueError, ConfigError) as e:
        ap.error(str(e))
    keep = set(args.configs.split(",")) if args.configs else None
    rows = {n for p in args.presets.values() for g in ("configs", "sensitivity") for n in p[g]}
    if keep and keep - rows:
        ap.error(f"--configs: {sorted(keep - rows)} not in preset {args.preset!r}; choose from {sorted(rows)}")
    args.keep = keep
    return args


def preset_named(name: str) -> dict:
    """A packaged preset by name, or a preset file by its path."""
    if name in PRESETS:
        return PRESETS[name]
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        raise ValueError(f"--preset {name!r}: choose from {sorted(PRESETS)}, or give a preset file (PATH.yaml)")
    if not path.is_file():
        raise ValueError(f"--preset {name}: no such file")
    return read(path)


def plans_of(args: argparse.Namespace, out: Path) -> dict[str, tuple[dict, list[str], list]]:
    """task -> (its preset as run, its base overrides, its specs), every spec's folders absolute."""
    plans = {}
    for task, preset in args.presets.items():
        if args.no_extend:
            preset |= {"extend": 0}
        if args.seeds:
            preset |= {"seeds": args.seeds, "sensitivity_seeds": min(args.seeds, preset["sensitivity_seeds"])}
        if args.keep:  # a task without the named rows runs only its baseline
            preset |= {g: {n: c for n, c in preset[g].items() if n in args.keep} for g in ("configs", "sensitivity")}
        base = [*STUDY_BASE, *preset["set"], *args.set]
        specs = [(name, seed, absolute(cfg)) for name, seed, cfg in run_specs(preset, base, out / task, TASKS[task])]
        plans[task] = (preset, base, specs)
    return plans


def main(argv: list[str] | None = None) -> None:
    """argv: the command line's arguments (None: sys.argv's); the suite's report-only calls pass them in-process.
    An input or a cluster that cannot run the study is one line on stderr and exit 2."""
    args = parse(argv)
    try:
        study(args)
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        sys.exit(2)
    except (StudyStopped, KeyboardInterrupt) as e:  # Ctrl-C, `ray job stop`: Tune saved the study's state
        print(str(e) or "stopped; run the same command to resume the study", file=sys.stderr, flush=True)
        sys.exit(130)


def study(args: argparse.Namespace) -> None:
    out = Path(args.out).absolute()
    plans = plans_of(args, out)
    t0 = time.perf_counter()
    all_specs = [s for _, _, specs in plans.values() for s in specs]
    done_before = sum(finished(cfg) for _, _, cfg in all_specs)
    if args.report_only and not done_before and not any((out / task / "results.json").is_file() for task in plans):
        sys.exit(f"--report-only: {args.out} holds no finished run and no TASK/results.json to summarise; run the "
                 "study without --report-only first, or point --out at a committed study (benchmarks/results/NAME)")
    # --report-only counts only the finished runs, the ones it reads
    progress = Progress(done_before if args.report_only else len(all_specs),
                        0 if args.report_only else len(all_specs) - done_before, t0=t0)
    dest = out / "base_budget" if args.no_extend else out
    if args.report_only:
        reports = {task: report_one(task, plan, progress, dest / task, committed_runs(out / task))
                   for task, plan in plans.items()}
        failed, wall = [], kept_wall(dest / "results.json")  # no run made: the study's own time, as kept
    else:
        from replay_rl.study.driver import run_study

        reports, failed = run_study(plans, out, args.max_concurrent, progress, dest)
        wall = (time.perf_counter() - t0) / 60
    summary = front_page(reports, args.preset, wall)
    (dest / "results.json").write_text(strict_json(summary))
    (dest / "summary.md").write_text(tasks_markdown({task: r.get("headline") for task, r in reports.items()},
                                                   args.preset))
    print(strict_json(summary))
    if failed:
        sys.exit("\n".join([f"{len(failed)} runs failed (the report covers the runs that finished); run the same "
                            "command again to resume the study:", *failed]))


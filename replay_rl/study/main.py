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

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import click
import typer

from replay_rl.config_errors import ConfigError

# the packaged presets' names, without reading them: `replay-rl --help` stays quick (the study's modules bring torch)
PRESET_NAMES = sorted(p.stem for p in (Path(__file__).with_name("preset_files")).glob("*.yaml"))


@dataclass
class StudyArgs:
    """The command line, checked (study_args): what study() runs."""
    preset: str = "quick"
    out: str = "runs/bench/compute_saved"
    task: list[str] | None = None
    set: list[str] = field(default_factory=list)
    seeds: int | None = None
    max_concurrent: int | None = None
    report_only: bool = False
    no_extend: bool = False
    presets: dict = field(default_factory=dict)  # task -> its preset (task_presets)
    keep: set[str] | None = None                 # --configs: the rows to run (None: all)


def study_args(preset: str = "quick", out: str = "runs/bench/compute_saved", task: list[str] | None = None,
               set_: list[str] | None = None, seeds: int | None = None, configs: str | None = None,
               max_concurrent: int | None = None, report_only: bool = False, no_extend: bool = False) -> StudyArgs:
    """The options as the command takes them, checked against the preset: a ConfigError line if they do not fit."""
    from replay_rl.study.specs import TASKS, task_presets

    if bad := sorted(set(task or []) - set(TASKS)):
        raise ConfigError(f"--task: {bad} is not a study task; choose from {sorted(TASKS)}")
    try:
        presets = task_presets(preset_named(preset), task)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    keep = set(configs.split(",")) if configs else None
    rows = {n for p in presets.values() for g in ("configs", "sensitivity") for n in p[g]}
    if keep and keep - rows:
        raise ConfigError(f"--configs: {sorted(keep - rows)} not in preset {preset!r}; choose from {sorted(rows)}")
    return StudyArgs(preset, out, task, list(set_ or []), seeds, max_concurrent, report_only, no_extend, presets, keep)


def preset_named(name: str) -> dict:
    """A packaged preset by name, or a preset file by its path."""
    from replay_rl.study.preset_schema import read
    from replay_rl.study.presets import PRESETS

    if name in PRESETS:
        return PRESETS[name]
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        raise ValueError(f"--preset {name!r}: choose from {sorted(PRESETS)}, or give a preset file (PATH.yaml)")
    if not path.is_file():
        raise ValueError(f"--preset {name}: no such file")
    return read(path)


def plans_of(args: StudyArgs, out: Path) -> dict[str, tuple[dict, list[str], list]]:
    """task -> (its preset as run, its base overrides, its specs), every spec's folders absolute."""
    from replay_rl.study.presets import STUDY_BASE
    from replay_rl.study.specs import TASKS, absolute, run_specs

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


def command(preset: str = typer.Option("quick", help=f"one of {', '.join(PRESET_NAMES)}, or a preset file of "
                                        "your own (PATH.yaml, as replay_rl/study/preset_files/ holds them)"),
            out: str = typer.Option("runs/bench/compute_saved", help="the study's folder (a rerun resumes it)"),
            task: Optional[List[str]] = typer.Option(None, help="run only this task (repeatable; default: every "
                                                     "task the preset names)"),
            set_: Optional[List[str]] = typer.Option(None, "--set", "-s", help="override applied to every run"),
            seeds: Optional[int] = typer.Option(None, min=1, help="seeds per config (default: the preset's); "
                                                "sensitivity keeps ≤ this"),
            configs: Optional[str] = typer.Option(None, help="comma-separated subset of the preset's configs (the "
                                                  "baseline always runs)"),
            max_concurrent: Optional[int] = typer.Option(None, min=1, help="at most this many runs at once "
                                                         "(default: as many as the cluster's resources hold; one at a "
                                                         "time when the study starts its own local Ray). A resumed "
                                                         "study keeps its first value"),
            report_only: bool = typer.Option(False, help="run nothing: summarise the finished runs already in --out "
                                             "(a study stopped part-way); without it, finished runs in --out are "
                                             "kept and only the rest run"),
            no_extend: bool = typer.Option(False, help="summarise at the preset's base budget, into "
                                           "--out/base_budget/: its longer runs neither run nor count (the report of "
                                           "a study whose extension has not run yet)")) -> None:
    """The compute-saved study, each run a Ray Tune trial. An input or a cluster that cannot run the study is one
    line on stderr and exit 2."""
    from replay_rl.driver.failures import one_line_thread_errors
    from replay_rl.study.runs import StudyStopped

    try:
        args = study_args(preset, out, task, set_, seeds, configs, max_concurrent, report_only, no_extend)
        one_line_thread_errors(Path(out).absolute())  # a library's thread that fails (Tune's, full disk): one line
        study(args)
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        sys.exit(2)
    except (StudyStopped, KeyboardInterrupt) as e:  # Ctrl-C, `ray job stop`: Tune saved the study's state
        print(str(e) or "stopped; run the same command to resume the study", file=sys.stderr, flush=True)
        sys.exit(130)


def main(argv: list[str] | None = None) -> None:
    """`replay-rl study`'s command outside the CLI (benchmarks/compute_saved.py; the suite's report-only calls pass
    argv in-process): the same options, parsed by the same typer command."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(command)
    hook = threading.excepthook  # the command's one-line hook is its run's: an in-process caller gets its own back
    try:  # not standalone: a run that ends well returns here instead of exiting the caller's process
        typer.main.get_command(app).main(args=argv, prog_name="replay-rl study", standalone_mode=False)
    except click.ClickException as e:  # a usage mistake: click's own lines and exit 2, as on the command line
        e.show()
        sys.exit(e.exit_code)
    finally:
        threading.excepthook = hook


def study(args: StudyArgs) -> None:
    from replay_rl.study.markdown import tasks_markdown
    from replay_rl.study.progress import Progress
    from replay_rl.study.report import front_page, kept_wall, report_one, strict_json
    from replay_rl.study.runs import committed_runs, finished

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


"""A task's report from its finished runs: results.json, summary.md and the PNGs (the analysis the study always
ran, whoever trained the runs), and the study's front page over its tasks."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from replay_rl.study.markdown import markdown
from replay_rl.study.progress import Progress
from replay_rl.study.runs import check_one_model, committed_run, extension_specs, finished, load_run
from replay_rl.study.specs import TASKS, capacity_notes
from replay_rl.study.table import BASELINE, buffer_frontier, fidelity, n_grid, summarise


def collect(specs: list, progress: Progress, task: str, kept: dict | None = None) -> dict[str, list[dict]]:
    """{row: runs} of the specs' finished runs, in spec order. kept (--report-only): the committed runs of the
    task's results.json, standing in for folders not here, each at its own budget."""
    results: dict[str, list[dict]] = {}
    for name, seed, cfg in specs:
        if finished(cfg):
            run = load_run(cfg)
            if kept is not None:
                progress.done(task, name, seed, cfg, run, "finished earlier")
        elif kept is not None and (run := committed_run(kept, name, cfg)) is not None:
            progress.i += 1
        else:  # not run (a trial that failed): the report covers the runs that finished
            continue
        results.setdefault(name, []).append(run)
    return results


def merge(results: dict[str, list[dict]], extended: dict[str, list[dict]]) -> None:
    """The extended runs replace their shorter selves."""
    for name, runs in extended.items():
        lrs = {r["lr"] for r in runs}
        results[name] = [r for r in results[name] if r["lr"] not in lrs] + runs


def report_one(task: str, plan: tuple, progress: Progress, dest: Path, kept: dict | None = None) -> dict:
    """A task's report from its finished runs (and, with kept, its committed ones), the extension included."""
    preset, base, specs = plan
    results = collect(specs, progress, task, kept)
    longer = extension_specs(preset, specs, results) if BASELINE in results else []
    if kept is not None:
        progress.n += len(longer)
    extended = collect(longer, progress, task, kept)
    merge(results, extended)
    return report_task(task, preset, base, specs, results, extended, dest)


def report_task(task: str, preset: dict, base: list[str], specs: list, results: dict, extended: dict,
                dest: Path) -> dict:
    """Write the task's results.json, summary.md and PNGs into `dest` from its runs; returns its report ({} when
    no baseline run finished)."""
    from replay_rl.study.plots import plot_all

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


def front_page(reports: dict[str, dict], preset: str, wall_min: float | None) -> dict:
    """The study's results.json over its tasks: each task's headline, pooled frontier, fidelity, N grid, plots."""
    head = {task: {key: r.get(key) for key in ("headline", "pooled_buffer_frontier", "fidelity", "n_grid", "plots")}
            for task, r in reports.items()}
    return {"benchmark": "compute_saved", "preset": preset, "tasks": head, "wall_min": wall_min}


def kept_wall(path: Path) -> float | None:
    return json.loads(path.read_text()).get("wall_min") if path.is_file() else None


def strict_json(obj) -> str:
    """JSON with ±inf (a side that never reached) and NaN written as null, which every reader accepts."""
    clean = lambda x: (None if isinstance(x, float) and not math.isfinite(x) else  # noqa: E731
                       {k: clean(v) for k, v in x.items()} if isinstance(x, dict) else
                       [clean(v) for v in x] if isinstance(x, (list, tuple)) else x)
    return json.dumps(clean(obj), indent=1)

"""The study's driver on Ray: one line for an input or a cluster that cannot run it, the warm models, then the two
phases as Tune experiments (the base runs, then the best LRs extended, which the base results choose), then the
reports. One driver per --out (a flock on --out/_tune/.lock; --out/_tune/driver.json names it)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
from pathlib import Path

from replay_rl.config import ConfigError
from replay_rl.study.progress import Progress, Watch
from replay_rl.study.report import collect, report_one
from replay_rl.study.runs import StudyStopped, extension_specs, finished, wait_for_locks
from replay_rl.study.trials import quiet_trials, run_phase


def run_study(plans: dict, out: Path, max_concurrent: int | None, progress: Progress,
              dest: Path) -> tuple[dict, list[str]]:
    """Train every unfinished run of `plans` (task -> (preset, base, specs)), then report each task into dest/TASK.
    Returns (task -> report, one line per failed run)."""
    import ray

    from replay_rl.driver.preflight import check_model, check_placeable, check_task, check_trackers
    from replay_rl.driver.session import bound_shutdown, connect, disconnect
    from replay_rl.evaluation.warmstart import ensure_model

    tune_dir = out / "_tune"
    lock = hold(tune_dir)
    first = next(iter(plans.values()))[2][0][2]
    quiet_trials()
    # the study's own Ray log goes to --out/ray.log; a local Ray gets every core, trials share them
    owns = connect(first.model_copy(update={"run": first.run.model_copy(update={"output_dir": str(out)})}))
    # `ray job stop` sends SIGTERM: Tune's own Ctrl-C handling stops the trials still running (the rerun resumes their
    # runs from their folders)
    signal.signal(signal.SIGTERM, lambda *_: (bound_shutdown(60), os.kill(os.getpid(), signal.SIGINT)))
    try:
        specs = [(task, *spec) for task, (_, _, task_specs) in plans.items() for spec in task_specs]
        shapes = {json.dumps(cfg.cluster.bundles()): cfg for *_, cfg in specs}
        for cfg in shapes.values():
            check_placeable(cfg, ray.nodes())
        for _, _, task_specs in plans.values():
            cfg = task_specs[0][2]
            for check in (check_model, check_task, check_trackers):
                check(cfg)
            ensure_model(cfg)  # the task's warm-started model, built once, before any trial
        cap = max_concurrent or (1 if owns else None)  # one at a time on the local box; else what the cluster holds
        progress.i = sum(finished(cfg) for *_, cfg in specs)
        failed = phase("base", specs, tune_dir, cap, progress)
        if failed:  # the extension's LRs are chosen from every base run: not from some, which a rerun would change
            return reports(plans, progress, dest), failed
        longer = []
        for task, (preset, _, task_specs) in plans.items():
            results = collect(task_specs, progress, task)
            longer += [(task, *spec) for spec in (extension_specs(preset, task_specs, results)
                                                   if "baseline" in results else [])]
        progress.n += len(longer)
        progress.left += sum(not finished(cfg) for *_, cfg in longer)
        progress.i += sum(finished(cfg) for *_, cfg in longer)
        failed += phase("extend", longer, tune_dir, cap, progress)
        return reports(plans, progress, dest), failed
    finally:
        disconnect(owns, {})
        os.close(lock)


def reports(plans: dict, progress: Progress, dest: Path) -> dict:
    progress.i = 0  # the reports count nothing
    return {task: report_one(task, plan, progress, dest / task) for task, plan in plans.items()}


def phase(name: str, specs: list, tune_dir: Path, cap: int | None, progress: Progress) -> list[str]:
    """The unfinished of `specs` ((task, row, seed, cfg) each) as one Tune experiment; the failed runs' lines.
    Stopped (Ctrl-C, `ray job stop`: Tune saves its state and returns) with runs neither finished nor failed: a
    StudyStopped."""
    todo = {f"{task}-{row}-lr{cfg.learner.lr:g}-seed{seed}": (task, row, seed, cfg)
            for task, row, seed, cfg in specs if not finished(cfg)}
    if not todo:
        return []
    wait_for_locks([cfg for *_, cfg in todo.values()])  # a killed driver's trials may still be exiting
    with Watch(progress, list(todo.values())):
        failed = run_phase(name, [(trial, spec[3]) for trial, spec in todo.items()], tune_dir, cap)
    if any(not finished(cfg) and trial not in failed for trial, (*_, cfg) in todo.items()):
        raise StudyStopped(f"stopped; the study's state is saved in {tune_dir}: run the same command to resume it")
    return [f"{trial}: {line}" for trial, line in failed.items()]



def hold(tune_dir: Path) -> int:
    """The study's lock on --out, held for the driver's life (flock: released however the driver ends), and
    driver.json naming the driver."""
    tune_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(tune_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        held = (tune_dir / "driver.json").read_text() if (tune_dir / "driver.json").is_file() else "unknown"
        raise ConfigError(f"--out {tune_dir.parent} is in use by another study driver ({held.strip()}); wait for it "
                          "to end or stop it, or use another --out") from None
    (tune_dir / "driver.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    return fd

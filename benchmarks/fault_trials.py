"""One fault-soak trial: start a short run, wait for its step (train rows in metrics.jsonl) and its window (a
checkpoint's staging folder, a publish in flight), fault one process of a role, then judge the run by what it left.

Processes are found only in this trial's process tree (the driver's descendants, or the loopback cluster's nodes):
another Ray on the box (a benchmark) runs actors of the same classes, and must never be signalled."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # Ray's own dependency

from fault_checks import check_named, check_run, left_behind
from replay_rl.config import RunConfig
from replay_rl.metrics import read_metrics

# Ray titles an actor's worker `ray::<Class>`, and `ray::<Class>.<method>` while it runs a call
ROLES = {"generator": "GeneratorImpl", "replay shard": "ReplayShardImpl", "learner rank": "LearnerRankImpl",
         "weight board": "WeightBoard", "generator reports": "GeneratorReports", "evaluator": "EvaluatorImpl"}
FAULTS = ("kill", "stop", "stop in checkpoint", "stop in publish")  # the random plan's (fault_plan.py adds more)
PUBLISH_TITLE = "ray::LearnerRankImpl.publish"  # rank 0 putting the new weights on the board
# short bounds, so a hung role is found within a trial; stall_timeout_s must still exceed the slowest step here
BOUNDS = {"run.stall_timeout_s": 20, "run.hung_probe_s": 10, "run.checkpoint_timeout_s": 30, "sync.timeout_s": 20,
          "run.eval_timeout_s": 30, "run.recovery_timeout_s": 30, "run.resume_timeout_s": 120}
# a pause outlasts the stall bound (a stall, then the probe; twice over for learner ranks, which get a second
# window) and each phase's bound but a resume's, which no fault is timed into: a role the run does not find hung by
# then is continued, and the run must still finish
HOLD_S = max(2 * (BOUNDS["run.stall_timeout_s"] + BOUNDS["run.hung_probe_s"]),
             *(v for k, v in BOUNDS.items() if k != "run.resume_timeout_s")) + 15
WINDOW_S = 120      # how long a stop waits for its checkpoint or publish before it is applied anyway
ATTEMPT_S = 900     # one run (or its resume): past this it is stopped and the trial fails


@dataclass(frozen=True)
class Trial:
    index: int
    role: str      # a key of ROLES, or "node" (a learner node of the loopback cluster)
    fault: str     # one of FAULTS
    step: int      # the fault lands once this many train rows are written (then waits for its window)
    replay: str    # replay.type: fifo, or lifo_once (consume-once: each rollout trained once)
    pick: int      # which of the role's processes (sorted pids, modulo their number)


@dataclass
class Outcome:
    trial: Trial
    passed: bool = False
    path: str = ""          # finished | resumed | failed
    landed_at: int = 0      # train rows written when the signal was sent
    target: str = ""        # the process signalled
    window: str = ""        # where the fault landed: after a row, in .step_N.partial, in a publish
    lines: list[str] = field(default_factory=list)     # restart lines and the one-line failure, as printed
    problems: list[str] = field(default_factory=list)  # why the trial failed
    wall_s: float = 0.0


def title(p: psutil.Process) -> str:
    """A process's title: Ray writes it over argv[0] and blanks the other arguments."""
    with contextlib.suppress(psutil.Error, IndexError):
        return p.cmdline()[0]
    return ""


def titled(procs: list[psutil.Process], cls: str) -> list[psutil.Process]:
    """The processes among procs whose title is Ray's for an actor of class `cls` (idle or in a call)."""
    found = [p for p in procs if (t := title(p)) == f"ray::{cls}" or t.startswith(f"ray::{cls}.")]
    return sorted(found, key=lambda p: p.pid)


def tree(roots: list[int]) -> list[psutil.Process]:
    """roots and every process below them (this trial's driver, or the loopback cluster's nodes)."""
    out = []
    for pid in roots:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            out += [root, *root.children(recursive=True)]
    return out


def trained(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(read_metrics(path, "train")) if path.is_file() else 0


def wait_window(trial: Trial, out: Path, procs: list[psutil.Process], running) -> str:
    """Block until the trial's window opens: a checkpoint being staged, or learner rank 0 in its publish call."""
    end = time.monotonic() + WINDOW_S
    while running() and time.monotonic() < end:
        if trial.fault.endswith("in checkpoint"):
            if staged := sorted((out / "checkpoints").glob(".step_*.partial")):
                return f"in {staged[0].name}"
            time.sleep(0.02)
        elif trial.fault.endswith("in publish"):
            if any(title(p) == PUBLISH_TITLE for p in procs):
                return "in a publish"
            time.sleep(0.002)  # a tiny model's publish lasts milliseconds
        else:
            return "after a row"
    return "window missed: after a row"


def inject(trial: Trial, out: Path, proc: subprocess.Popen, runtime, outcome: Outcome, log: Path
           ) -> list[psutil.Process]:
    """Fault the trial's role once its step is reached; returns the processes stopped (to be continued).
    runtime.targets(trial) -> (the role's candidate processes, the learner ranks), from this trial's tree only."""
    running = lambda: proc.poll() is None  # noqa: E731
    while running() and trained(out) < trial.step:
        time.sleep(0.2)
    if not running():
        outcome.problems.append(f"the run ended before step {trial.step}; no fault was applied")
        return []
    candidates, ranks = runtime.targets(trial)
    if not candidates:
        outcome.problems.append(f"no process of role {trial.role} found in this run's tree")
        return []
    outcome.window = wait_window(trial, out, ranks, running)
    victims = candidates[trial.pick % len(candidates)]
    victims = victims if isinstance(victims, list) else [victims]  # a node: every process of it
    sig = signal.SIGKILL if trial.fault.startswith("kill") else signal.SIGSTOP
    for p in victims:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)
    outcome.landed_at, outcome.target = trained(out), f"pid {victims[0].pid} ({trial.role})"
    return [] if sig == signal.SIGKILL else victims


def alive(p: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return p.status() != psutil.STATUS_ZOMBIE  # killed by the run, not yet reaped by its raylet
    return False


def hold_then_continue(stopped: list[psutil.Process], proc: subprocess.Popen) -> None:
    """Keep the stopped processes stopped for HOLD_S (past every bound) or until they are gone, then SIGCONT."""
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end and proc.poll() is None and any(map(alive, stopped)):
        time.sleep(0.5)
    for p in stopped:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGCONT)


def finish(proc: subprocess.Popen) -> int:
    """The run's exit code; one past ATTEMPT_S is stopped (SIGTERM: the driver stops its own Ray) and counts 124."""
    try:
        return proc.wait(timeout=ATTEMPT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 124


def run_trial(trial: Trial, out: Path, overrides: list[str], runtime) -> Outcome:
    """runtime (fault_soak.Local or .Loopback): launch(settings, log) -> (Popen, its output file); targets(trial) as
    in inject; after_fault(trial); roots() -> the pids whose trees hold the run's processes ([]: a cluster's nodes,
    which outlive a run); failed_prefix, how its one-line failure starts ("run failed: ", or "submit: job failed: "
    through ray job submit). A special fault (fault_special.py) brings its own injector and setting."""
    from fault_special import SPECIALS  # its injectors use this module's helpers

    special = SPECIALS.get((trial.role, trial.fault))
    outcome, t0, failed_prefix = Outcome(trial), time.monotonic(), runtime.failed_prefix
    settings = [*overrides, f"replay.type={trial.replay}", f"run.seed={trial.index}", f"run.output_dir={out}"]
    with special.around(out) if special and special.around else contextlib.nullcontext():
        rc, err = attempt(trial, out, settings, runtime, outcome, special.inject if special else inject, ".log")
        outcome.lines = [ln for ln in err.read_text().splitlines() if recovery_line(ln, failed_prefix)]
        if special and special.expect and special.expect not in err.read_text():
            outcome.problems.append(f"the run did not say: {special.expect[:80]}…")
        outcome.path = "finished" if rc == 0 else "failed"
        if rc != 0:
            one_line = rc == 1 and sum(ln.startswith(failed_prefix) for ln in outcome.lines) == 1
            if not (one_line or (special and special.resume_after_any_exit)):
                outcome.problems.append(f"exit {rc} without one '{failed_prefix.strip()}' line (see {err})")
            else:  # stopped in one line (or its driver killed): run.resume_from=auto must finish it
                if special and special.before_resume:
                    special.before_resume(out)
                rc, err = attempt(trial, out, [*settings, "run.resume_from=auto"], runtime, outcome, None,
                                  ".resume.log")
                outcome.path = "resumed" if rc == 0 else "failed"
                if rc != 0:
                    tail = (err.read_text().strip().splitlines() or ["no output"])[-1]
                    outcome.problems.append(f"the resume exited {rc}: {tail[-300:]}")
        if rc == 0:
            outcome.problems += check_run(RunConfig.load(None, settings), out)
    if special is None:
        outcome.problems += check_named(trial.role, outcome.lines)
    outcome.passed, outcome.wall_s = not outcome.problems, round(time.monotonic() - t0, 1)
    return outcome


def attempt(trial: Trial, out: Path, settings: list[str], runtime, outcome: Outcome, fault, suffix: str):
    """One run of the trial (fault: its injector, None for a resume): (exit code, its output file). The run's
    processes, sampled every second while it runs, must be gone within fault_checks.LEFT_BEHIND_S after it ends."""
    proc, err = runtime.launch(settings, out.with_name(out.name + suffix))
    seen, done = set(), threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            for p in tree(runtime.roots()):
                with contextlib.suppress(psutil.Error):
                    if p.pid != proc.pid:
                        seen.add((p.pid, p.create_time()))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    stopped: list[psutil.Process] = []
    try:
        if fault is not None:
            stopped = fault(trial, out, proc, runtime, outcome, err)
            if outcome.target:
                runtime.after_fault(trial)
        hold_then_continue(stopped, proc)
        rc = finish(proc)
    finally:
        done.set()
        if proc.poll() is None:  # a trial cut short (an error, pytest's timeout) leaves no run behind on 2 cores
            proc.terminate()
        for p in stopped:  # a trial that raised leaves nothing stopped
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)
    watcher.join()
    outcome.problems += left_behind(seen)
    return rc, err


def recovery_line(line: str, failed_prefix: str) -> bool:
    """A line the run printed about a fault: a role recovered in place, a restart, or the one-line failure."""
    in_place = (": replaced", ": restored in place", ": killed, ")
    return line.startswith(("restart ", failed_prefix)) or any(s in line for s in in_place)

"""Soak v2's faults beyond one signal to one role (fault_plan.SPECIAL), each an injector with inject's signature
(fault_trials.inject) and what its trial needs around it: the driver SIGKILLed (the run then ends with no line, and
the same command with run.resume_from=auto, as a scheduler's retry runs it, must finish it); the run folder's disk
filled (a tmpfs of the trial's own; the ballast is removed before the resume); the newest checkpoint corrupted and a
learner rank killed (the restart must fall back to the one before); a learner rank killed and, once the run prints
its restart, a generator killed during the recovery."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from fault_trials import Outcome, Trial, titled, trained, tree

DISK_MB = 96        # the tmpfs a disk-full trial's run folder lives on
RECOVERY_S = 180    # how long a second fault waits for the first one's restart line


@dataclass(frozen=True)
class Special:
    inject: Callable  # (trial, out, proc, runtime, outcome, log) -> processes stopped
    resume_after_any_exit: bool = False  # the run ends with no line of its own (its driver was killed)
    around: Callable | None = None       # a context manager around the trial, given its run folder
    before_resume: Callable | None = None
    expect: str | None = None            # what the first attempt's output must say about the fault


def reached(trial: Trial, out: Path, proc: subprocess.Popen, outcome: Outcome) -> bool:
    while proc.poll() is None and trained(out) < trial.step:
        time.sleep(0.2)
    if proc.poll() is not None:
        outcome.problems.append(f"the run ended before step {trial.step}; no fault was applied")
        return False
    return True


def kill(p: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        p.send_signal(signal.SIGKILL)


def kill_driver(trial, out, proc, runtime, outcome, log) -> list:
    if reached(trial, out, proc, outcome):
        kill(psutil.Process(proc.pid))
        outcome.landed_at, outcome.target, outcome.window = trained(out), f"pid {proc.pid} (driver)", "after a row"
    return []


def fill_disk(trial, out, proc, runtime, outcome, log) -> list:
    if reached(trial, out, proc, outcome):
        with contextlib.suppress(OSError), open(out / "ballast", "wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        outcome.landed_at, outcome.target, outcome.window = trained(out), "the run folder's disk", "after a row"
    return []


@contextlib.contextmanager
def small_disk(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(out)], check=True,
                   capture_output=True)
    try:
        yield
    finally:  # what a person would look at, kept beside the folder before the tmpfs goes
        kept = out.with_name(out.name + ".kept")
        kept.mkdir(exist_ok=True)
        for name in ("metrics.jsonl", "error.log"):
            if (out / name).is_file():
                (kept / name).write_bytes((out / name).read_bytes())
        subprocess.run(["umount", "-l", str(out)], capture_output=True)


def remove_ballast(out: Path) -> None:
    (out / "ballast").unlink(missing_ok=True)


def corrupt_then_kill_a_rank(trial, out, proc, runtime, outcome, log) -> list:
    if not reached(trial, out, proc, outcome):
        return []
    while proc.poll() is None and any((out / "checkpoints").glob(".step_*.partial")):
        time.sleep(0.01)  # a checkpoint being written would become the newest, and the one the restart loads
    newest = max((p for p in (out / "checkpoints").glob("step_*") if p.is_dir()),
                 key=lambda p: int(p.name.removeprefix("step_")))
    states = newest / newest.name / "mp_rank_00_model_states.pt"
    with open(states, "r+b") as f:  # a bit flipped in the middle: the manifest's sha256 no longer matches
        f.seek(states.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    _, ranks = runtime.targets(trial)
    kill(ranks[trial.pick % len(ranks)])
    outcome.landed_at, outcome.target = trained(out), f"{newest.name} corrupted, a learner rank killed"
    outcome.window = "after a row"
    return []


def kill_twice(trial, out, proc, runtime, outcome, log) -> list:
    """A learner rank killed; once the restart line is printed, a generator of the restarted run killed."""
    if not reached(trial, out, proc, outcome):
        return []
    _, ranks = runtime.targets(trial)
    before = {p.pid for p in tree([proc.pid])}
    kill(ranks[trial.pick % len(ranks)])
    end = time.monotonic() + RECOVERY_S
    while proc.poll() is None and time.monotonic() < end and "restart 1 of" not in log.read_text():
        time.sleep(0.05)
    while proc.poll() is None and time.monotonic() < end:  # the restarted run's first generator
        fresh = [p for p in titled(tree([proc.pid]), "GeneratorImpl") if p.pid not in before]
        if fresh:
            kill(fresh[0])
            outcome.window = "during the recovery"
            break
        time.sleep(0.05)
    else:
        outcome.problems.append("no generator of the restarted run to fault within the recovery")
    outcome.landed_at, outcome.target = trained(out), "a learner rank, then a generator in the recovery"
    return []


SPECIALS = {("driver", "kill, then the same command"): Special(kill_driver, resume_after_any_exit=True),
            ("disk", "full"): Special(fill_disk, around=small_disk, before_resume=remove_ballast),
            ("checkpoint", "corrupt, then a rank killed"): Special(
                corrupt_then_kill_a_rank, expect="does not match its sha256 in manifest.json; resume unpickles its "
                "files, which can run code: restore it from a copy you trust"),
            ("learner rank", "kill, then a generator killed in the recovery"): Special(kill_twice)}

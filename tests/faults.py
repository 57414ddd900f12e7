"""Helpers of the fault tests (test_faults.py, test_fault_lines.py): their runs' config, the processes of a role in
this session's Ray, and continuing what a test paused."""

import contextlib
import os
import signal
import subprocess

from replay_rl.config import RunConfig


# for a test whose fault is not a generator's: each generator is a process loading torch and the model, on 2 cores
ONE_GENERATOR = "cluster.generators=1"


def run_cfg(warm_path, out, *overrides):
    return RunConfig.load(None, [f"model.path={warm_path}", f"run.output_dir={out}", "run.eval_prompts=20",
                                 "run.eval_every=1000", "replay.sample_timeout_s=300", "learner.batch_size=32",
                                 "replay.capacity=64", *overrides])


def worker_pids(role: str) -> list[int]:
    """Ray titles each actor's process `ray::<Class>...`. Only children of this session's raylet count: another
    Ray cluster on the box (a benchmark) has actors of the same class."""
    import ray

    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    out = subprocess.run(["pgrep", "-P", str(raylet), "-f", f"ray::{role}"], capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


@contextlib.contextmanager
def continued_after(paused: list[int]):
    """However the run ends, nothing it paused is left stopped (most were killed with the run's actors)."""
    try:
        yield
    finally:
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

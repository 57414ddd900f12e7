"""Stops a local Ray cluster whose driver was killed with SIGKILL (no `finally` runs then).

train() starts this as a detached process beside the local cluster it started: it polls the driver's pid and, once
the driver is gone, kills the cluster's head processes (GCS, raylet, dashboard) and their children (the agents,
workers), which it learns while the driver lives.
Usage: python -m replay_rl.driver.orphan_guard DRIVER_PID PID [PID ...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with the pid it names one process, even after pid reuse."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def guard(driver: int, pids: list[int], poll_s: float = 1.0, learn_every: int = 5) -> None:
    heads = {pid: started(pid) for pid in pids}
    identity = dict(heads)
    polls = 0
    while alive(driver):
        # the heads' children too (the dashboard and runtime-env agents, which outlive a killed raylet, and
        # workers), learned while the driver lives: the raylet dies with it (Ray's parent-death signal), and by then
        # its children belong to init and can no longer be found from it. Only of heads still the same processes
        # (a pid reused by another program is not asked for its children)
        if polls % learn_every == 0:
            live = [pid for pid, start in heads.items() if start is not None and started(pid) == start]
            identity |= {child: started(child) for child in (children(*live) if live else [])}
        polls += 1
        time.sleep(poll_s)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, start in identity.items():
            if start is not None and started(pid) == start:  # still the process we were asked to watch
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(2)


def children(*pids: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", ",".join(map(str, pids))], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def start_guard(head_pids: list[int]) -> subprocess.Popen:
    """Watch this process; started in its own session, so a signal to the driver's group does not reach it."""
    return subprocess.Popen([sys.executable, "-m", "replay_rl.driver.orphan_guard", str(os.getpid()), *map(str, head_pids)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


if __name__ == "__main__":
    guard(int(sys.argv[1]), [int(p) for p in sys.argv[2:]])

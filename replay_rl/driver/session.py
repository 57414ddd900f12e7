"""The process around the loop: the Ray session a run joins or starts, where Ray's own lines go, what Ctrl-C and
SIGTERM do, and the one line a failed run prints. trainer.py calls these; the loop never sees them.

A local start is tried twice: a raylet gives its dashboard agent 15 s to write its port file and then aborts (Ray
2.60, not configurable: RAY_raylet_start_wait_time_s does not change it). On a loaded 2-core box the agent's imports took longer, the head
died at start-up, and ray.init raised "The current node timed out during startup" after about 30 s. Seen in this
project's CI under load; reproduced by delaying the agent's start by 25 s. A second start usually finds the box's
page cache warm and the agent quicker.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
from pathlib import Path

import ray

from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed, log_error, one_line
from replay_rl.driver.orphan_guard import start_guard
from replay_rl.driver.preflight import check_fits


def connect(cfg: RunConfig) -> bool:
    """Join the configured (or, under `ray job submit`, the ambient) cluster, else start a local one.
    Returns True when this process started Ray and must shut it down."""
    if ray.is_initialized():
        return False
    local = cfg.cluster.address is None and "RAY_ADDRESS" not in os.environ
    # a submitted job already carries its runtime_env (cluster/submit.py); only a local cluster gets ours
    # the hub as the user's environment says: HF_HUB_OFFLINE passes through, it is not forced (a hub id in model.path)
    env = {"env_vars": {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
                        **{k: os.environ[k] for k in ("HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE") if k in os.environ}}}
    # address="local" always starts a fresh cluster, never one that another process left running here
    log_ray_to_file(Path(cfg.run.output_dir) / "ray.log")
    if local:
        init_local(include_dashboard=False, log_to_driver=False, num_cpus=max(2, os.cpu_count() or 2), runtime_env=env)
    else:
        ray.init(address=cfg.cluster.address, include_dashboard=False, log_to_driver=False)
    check_fits(cfg, ray.cluster_resources())
    if local:  # a driver killed with SIGKILL runs no finally: a guard process stops the cluster it started
        node = ray._private.worker._global_node
        start_guard([info.process.pid for infos in node.all_processes.values() for info in infos])
    return local


def disconnect(owns_ray: bool, replaced: dict) -> None:
    """Undo connect() and stop_on_signals(): stop the Ray this process started; put back the handlers replaced."""
    if owns_ray:
        ray.shutdown()
    for sig, handler in replaced.items():
        signal.signal(sig, handler)


def log_ray_to_file(path: Path) -> None:
    """Ray's own lines go to the run folder, not into the bar: its start-up lines (token auth, "Started a local
    Ray instance"), its other loggers' warnings, and the cluster's errors its driver prints, such as
    "(raylet) Task ReplayShardImpl.sample failed ... killed by ray.kill" when a failed run stops its actors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    # "ray" and every Ray logger below it write to the file only ("ray._private" holds the start-up lines)
    for name in ("ray", "ray._private"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False
    # the driver's error thread prints to stdout through this function whatever log_to_driver says
    ray._private.worker.print_to_stdstream = _to_ray_log


def _to_ray_log(data: dict, ignore_prefix: bool = False) -> None:
    """ray._private.worker.print_to_stdstream's stand-in: each line to the "ray._private" logger (ray.log)."""
    for line in data.get("lines", []):
        logging.getLogger("ray._private").info("(%s) %s", data.get("pid"), line)


STARTUP_FAILURE = "timed out during startup"


def init_local(**kwargs) -> None:
    """ray.init(address="local", **kwargs), tried twice when the first start-up times out."""
    for attempt in (1, 2):
        try:
            ray.init(address="local", **kwargs)
            return
        except Exception as e:  # noqa: BLE001 - only Ray's start-up timeout is retried; anything else is raised
            if attempt == 2 or STARTUP_FAILURE not in str(e):
                raise
            ray.shutdown()
            print(f"Ray's local start-up failed ({str(e).splitlines()[0][:120]}); starting it once more",
                  file=sys.stderr, flush=True)


SHUTDOWN_BOUND_S = 60


def bound_shutdown(seconds: float) -> None:
    """After Ctrl-C / SIGTERM, cleanup gets `seconds`; then the process exits anyway (130) and the orphan guard
    stops the local Ray it started. A loaded CI box once saw an interrupted run not exit within 300 s."""
    def force_exit() -> None:
        print(f"stopped: cleanup did not finish in {seconds:g}s; exiting, the run's Ray is stopped by its guard",
              file=sys.stderr, flush=True)
        os._exit(130)

    timer = threading.Timer(seconds, force_exit)
    timer.daemon = True
    timer.start()


def stop_on_signals() -> dict:
    """Ctrl-C and SIGTERM (a scheduler's cancel, `kill`) stop the run: the finally in train() stops every actor and
    this run's Ray, and a timer started at the signal bounds that cleanup, wherever the signal lands (start-up
    included). Installed after ray.init, which sets a SIGTERM handler that only dumps native stacks. Returns the
    handlers it replaced, which train() puts back when it returns (it may run inside a longer process)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}


def _interrupt(signum, frame) -> None:
    bound_shutdown(SHUTDOWN_BOUND_S)
    raise KeyboardInterrupt


def describe_failure(e: BaseException, log: Path) -> str:
    """One line for the terminal (role and cause); the full traceback, with its causes, goes to `log` after the
    causes of the run's restarts (failures.log_error)."""
    line = e if isinstance(e, RunFailed) else one_line(e)
    unwritten = log_error(log, f"run failed: {line}", e)
    if full := disk_full(e):  # nothing to fix in the config: make room (a rank's, seen through RunFailed and Ray)
        where = f"{full.filename}'s disk" if full.filename else "the disk"
        line = f"{line}; free space on {where}, then resume with run.resume_from=auto"
    return f"{line} ({unwritten or f'traceback: {log}'})"


def disk_full(e: BaseException | None) -> OSError | None:
    """The ENOSPC error behind e, following Ray's .cause and Python's __cause__/__context__ chains."""
    for _ in range(16):
        if e is None:
            return None
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return e
        e = getattr(e, "cause", None) or e.__cause__ or e.__context__
    return None

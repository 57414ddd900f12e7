"""Tier 3: a CLI run stopped by SIGTERM, or its driver killed by SIGKILL, leaves none of its Ray processes behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay_rl.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]


# the agents are titled by Ray (ray::DashboardAgent): their command line no longer holds their script's path
RAY_PROCESSES = ("ray/core/src/ray/raylet/raylet|ray/core/src/ray/gcs/gcs_server|ray/dashboard/|"
                 "autoscaler/_private/monitor.py|_private/log_monitor.py|_private/runtime_env/agent|"
                 "^ray::DashboardAgent|^ray::RuntimeEnvAgent")


def raylets() -> set[int]:
    """Every Ray head process on the box: raylet, GCS, dashboard and its agents, monitors."""
    out = subprocess.run(["pgrep", "-f", RAY_PROCESSES], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def descendants(root: int) -> set[int]:
    """Every process under `root`, from /proc's parent links."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def own_ray(proc: subprocess.Popen) -> set[int]:
    """The Ray processes this run's driver started (not another cluster's: a loaded CI box may run others)."""
    return raylets() & descendants(proc.pid)


def cli_run(path, out, *sets: str) -> list[str]:
    return [sys.executable, "-m", "replay_rl.cli", "train", "-s", f"model.path={path}", "-s", f"run.output_dir={out}",
            "-s", "run.eval_prompts=40", *(a for kv in sets for a in ("-s", kv))]


def start_cli_run(path, out, *sets: str, rows: int = 2) -> subprocess.Popen:
    """A long CLI run, returned once training is under way (metrics.jsonl holds `rows` rows)."""
    proc = subprocess.Popen(cli_run(path, out, *(sets or ("run.steps=100000",))),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    for _ in range(9000):  # idle: ~20 s; a loaded CI box once took more than 300 s to reach step 1
        if (out / "metrics.jsonl").is_file() and len((out / "metrics.jsonl").read_text().splitlines()) >= rows:
            return proc
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"the run did not reach its row {rows} in 900 s: {proc.communicate()[1][-2000:]}")


def test_sigterm_stops_the_run_and_its_ray_cluster(warm_model, tmp_path):
    path, _ = warm_model
    sig = signal.SIGTERM
    proc = start_cli_run(path, tmp_path / "intr")
    own = own_ray(proc)
    assert own  # the run started its own cluster
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)  # idle: a few seconds; a loaded CI box was seen past 120 s
    assert proc.returncode == 130, err[-2000:]
    # "stopped: actors and Ray shut down", or after session.SHUTDOWN_BOUND_S "stopped: cleanup did not finish ..."
    assert "\nstopped: " in "\n" + err and "SIGTERM received" not in err and "Traceback" not in err
    print(f"{sig.name} → exit in {time.monotonic() - t0:.1f}s")
    for _ in range(30):  # the run's own local cluster is gone (by its finally, or by the orphan guard)
        if not own & raylets():
            break
        time.sleep(1)
    assert not own & raylets()


def test_a_driver_killed_with_sigkill_leaves_no_ray_behind_and_the_same_command_resumes(warm_model, tmp_path):
    """What a scheduler's retry does (Slurm --requeue, KubeRay backoffLimit): the driver is killed mid-run and the
    same command, which carries run.resume_from=auto from its first start, runs again: it resumes from the newest
    checkpoint and finishes, each step trained once."""
    path, out = warm_model[0], tmp_path / "kill9"
    sets = ("run.steps=20", "run.checkpoint_every=5", "run.eval_every=10", "run.resume_from=auto")
    proc = start_cli_run(path, out, *sets, rows=8)  # the step-0 eval and 7 train rows
    own = own_ray(proc)
    assert own  # the run started its own cluster
    proc.kill()
    proc.communicate(timeout=60)
    for _ in range(30):  # the orphan guard polls every second
        if not own & raylets():
            break
        time.sleep(1)
    assert not own & raylets()
    at = max(int(p.name.removeprefix("step_")) for p in (out / "checkpoints").glob("step_*"))
    assert at >= 5
    again = subprocess.run(cli_run(path, out, *sets), capture_output=True, text=True, timeout=900,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0, again.stderr[-2000:]
    assert (f"resumed from {out / 'checkpoints' / f'step_{at}'}: this command ran steps {at + 1}–20; the lines below "
            "cover the whole run from step 0") in again.stdout.splitlines()
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == list(range(1, 21))

"""Tier 3: the line a fault ends a run with names the faulted process: a paused learner rank with its pid (each
rank answers a probe on a thread of its own), a rank whose files cannot be read back within the checkpoint's bound.
On the warm-started tiny model, real Ray actors and DeepSpeed ranks."""

import os
import re
import signal
import threading
import time

import pytest

from replay_rl.driver.roles import RunFailed
from replay_rl.driver.trainer import train
from tests.faults import ONE_GENERATOR, continued_after, run_cfg, worker_pids

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]


def test_a_paused_learner_rank_is_named_with_its_pid(ray_cluster, warm_model, tmp_path):
    """A rank SIGSTOPped with its batch in hand holds its peer in the allreduce: every shard served, every role but
    it answering. The line names the paused rank and its pid (each rank answers a probe on a thread of its own),
    not "learner ranks ... none finished"."""
    path, _ = warm_model
    paused: list[int] = []

    def pause_a_rank_at_step_2(step, record):
        if step == 2:
            paused.append(worker_pids("LearnerRank")[-1])
            os.kill(paused[0], signal.SIGSTOP)

    with continued_after(paused), pytest.raises(RunFailed) as failed:
        train(run_cfg(path, tmp_path / "paused_rank", "run.steps=50", "run.stall_timeout_s=10", "run.max_restarts=0",
                      ONE_GENERATOR),
              pause_a_rank_at_step_2)
    message = str(failed.value)
    # the served-batch path, the one only the probe thread can name: the paused rank drew its batch ahead
    assert "\n" not in message and re.search(
        rf"learner rank [01] \(pid {paused[0]}\) gave no answer \(paused or wedged\) with step 3's batch",
        message), message
    assert "batch (hung); resume with run.resume_from=auto" in message, message


def test_a_rank_whose_files_cannot_be_read_back_is_named_within_the_checkpoints_bound(ray_cluster, warm_model,
                                                                                      tmp_path):
    """A wedged filesystem, played by a FIFO with no writer among rank 1's files: each rank hashes and fsyncs what
    it wrote inside the bounded save, so the line names that rank and the checkpoint within
    run.checkpoint_timeout_s. The driver used to hash every file at commit, with no bound: it hung, with no line."""
    from replay_rl.driver.checkpoints import staging_dir

    path, _ = warm_model
    out = tmp_path / "wedged"

    planted: list[float] = []

    def plant_a_fifo_in_step_4s_staging() -> None:
        # the driver empties the staging folder, then writes run.json, then asks the ranks to save, which takes
        # them far longer (DeepSpeed's files, a gather, the HF folder) than this 5 ms poll: rank 1 lists it
        staging = staging_dir(out, 4)
        while not (staging / "run.json").exists():
            time.sleep(0.005)
        (staging / "step_4").mkdir(exist_ok=True)
        os.mkfifo(staging / "step_4" / "zero_pp_rank_1_mp_rank_00_wedged.pt")
        planted.append(time.monotonic())

    threading.Thread(target=plant_a_fifo_in_step_4s_staging, daemon=True).start()
    with pytest.raises(RunFailed) as failed:
        train(run_cfg(path, out, "run.steps=8", "run.checkpoint_every=4", "run.checkpoint_timeout_s=15",
                      "run.max_restarts=0", ONE_GENERATOR))
    message = str(failed.value)
    assert "\n" not in message and message.startswith(
        "learner rank 1 hung in the checkpoint of step 4: not done in 15s (run.checkpoint_timeout_s)"), message
    assert time.monotonic() - planted[0] < 60

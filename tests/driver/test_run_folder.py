"""A run folder belongs to one run: another run's folder is refused in one line, run.overwrite starts over, the run id
carries across resumes, and a second driver is kept out by the folder's lock. No Ray here (the end-to-end runs that
own their final model and extend a finished run are in test_trainer_runs.py)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from replay_rl.driver.checkpoints import STATE_FILE, write_manifest
from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver.preflight import check_output_dir
from replay_rl.driver.run_folder import (LOCK_FILE, RUN_FILE, SET_ASIDE, AlreadyFinished, FolderLock,
                                         latest_own_checkpoint, prune_checkpoints, read_run_id, start_run)


def cfg_for(out, *overrides):
    return RunConfig.load(None, [f"run.output_dir={out}", *overrides])


def fake_run(out, run_id, steps=(2, 4)):
    """What a finished run leaves: run.json, its metrics, and complete checkpoints carrying its id."""
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_FILE).write_text(json.dumps({"run_id": run_id}))
    (out / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n')
    for step in steps:
        ckpt = out / "checkpoints" / f"step_{step}"
        ckpt.mkdir(parents=True)
        (ckpt / STATE_FILE).write_text(json.dumps({"step": step}))
        (ckpt / RUN_FILE).write_text(json.dumps({"run_id": run_id}))
        write_manifest(ckpt)  # as commit() writes it: resume verifies it
    (out / "final_model").symlink_to(f"checkpoints/step_{steps[-1]}/hf_model")


def test_a_fresh_run_in_another_runs_folder_is_refused_in_one_line(tmp_path):
    fake_run(tmp_path, "aaaa")
    with pytest.raises(ConfigError) as e:
        start_run(cfg_for(tmp_path), tmp_path)
    line = str(e.value)
    assert "\n" not in line and "holds another run's checkpoints and metrics.jsonl" in line
    assert "run.resume_from=auto" in line and "run.overwrite=true" in line and "another run.output_dir" in line
    assert read_run_id(tmp_path) == "aaaa" and (tmp_path / "checkpoints" / "step_4").is_dir()  # nothing touched
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "metrics.jsonl").write_text("{}\n")  # metrics alone are another run's history too
    with pytest.raises(ConfigError, match="holds another run's metrics.jsonl: continue"):
        start_run(cfg_for(tmp_path / "other"), tmp_path / "other")
    # a folder whose run stopped before its first row (config.json, ray.log) is free to use
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "config.json").write_text("{}")
    assert start_run(cfg_for(tmp_path / "early"), tmp_path / "early").resume is None


def test_overwrite_removes_the_runs_artefacts_and_nothing_else(tmp_path):
    fake_run(tmp_path, "aaaa")
    for name in ("replay_stats.json", "config.json", "ray.log", "metrics.jsonl.partial"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "replay_live" / "shard_0").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("mine")
    lock = FolderLock(tmp_path)
    try:
        start = start_run(cfg_for(tmp_path, "run.overwrite=true"), tmp_path)
    finally:
        lock.release()
    assert start.resume is None and start.run_id != "aaaa" and read_run_id(tmp_path) == start.run_id
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([LOCK_FILE, RUN_FILE, "notes.txt"])
    fake_run(tmp_path / "b", "bbbb")  # overwrite would delete the checkpoint it is asked to resume
    for src in ("auto", str(tmp_path / "b" / "checkpoints" / "step_2")):
        with pytest.raises(ConfigError, match="run.overwrite=true would delete the checkpoint"):
            start_run(cfg_for(tmp_path / "b", "run.overwrite=true", f"run.resume_from={src}"), tmp_path / "b")


def test_resume_continues_the_folders_run_and_never_adopts_another_silently(tmp_path):
    fake_run(tmp_path, "aaaa")
    start = start_run(cfg_for(tmp_path, "run.resume_from=auto"), tmp_path)
    assert start.run_id == "aaaa" and start.resume.name == "step_4"
    foreign = tmp_path / "checkpoints" / "step_6"  # a checkpoint another run left in this folder
    foreign.mkdir()
    (foreign / STATE_FILE).write_text("{}")
    (foreign / RUN_FILE).write_text(json.dumps({"run_id": "bbbb"}))
    write_manifest(foreign)
    with pytest.raises(ConfigError, match=r"step_6' was saved by run bbbb, not by this folder's run aaaa"):
        start_run(cfg_for(tmp_path, "run.resume_from=auto"), tmp_path)
    assert latest_own_checkpoint(tmp_path, "aaaa").name == "step_4"  # where a restart of run aaaa resumes
    # another folder's checkpoint starts a new run in a new folder
    fresh = start_run(cfg_for(tmp_path / "fork", f"run.resume_from={foreign}"), tmp_path / "fork")
    assert fresh.resume == foreign and fresh.run_id not in ("aaaa", "bbbb")
    (tmp_path / "fork" / "metrics.jsonl").write_text("{}\n")  # that run trained: the same start again is refused
    with pytest.raises(ConfigError, match="holds another run's metrics.jsonl"):
        start_run(cfg_for(tmp_path / "fork", f"run.resume_from={foreign}"), tmp_path / "fork")


def hold_in_child(folder):
    """A second process holding the folder's lock, as another driver would; returns it once it holds the lock."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom replay_rl.driver.run_folder import FolderLock\n"
            f"FolderLock(Path({str(folder)!r}))\nprint('held', flush=True)\ntime.sleep(300)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_the_lock_keeps_a_second_driver_out_until_the_first_one_dies(tmp_path):
    child = hold_in_child(tmp_path)
    try:
        with pytest.raises(ConfigError) as e:
            FolderLock(tmp_path)
        assert "\n" not in str(e.value) and f"is in use by another run (driver pid {child.pid} on " in str(e.value)
    finally:
        os.kill(child.pid, signal.SIGKILL)  # no cleanup runs: the kernel still drops the lock
        child.wait()
    FolderLock(tmp_path).release()


def test_a_second_cli_driver_in_a_held_folder_stops_in_one_line_before_ray(tmp_path):
    lock = FolderLock(tmp_path)
    try:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-s", f"run.output_dir={tmp_path}",
                               "-s", f"model.build_dir={tmp_path / 'model'}"], capture_output=True, text=True,
                              timeout=120)
    finally:
        lock.release()
    line = (f"run.output_dir {str(tmp_path)!r} is in use by another run (driver pid {os.getpid()} on "
            f"{os.uname().nodename}); wait for it to end or stop it, or pick another run.output_dir")
    assert proc.returncode == 2 and proc.stderr.strip() == line, proc.stderr
    assert not (tmp_path / "ray.log").exists() and time.monotonic() - t0 < 60  # stopped before Ray started


def test_a_start_from_an_earlier_step_sets_the_later_branch_aside(tmp_path):
    # resumed from step_10 while this run's step_20 exists: a restart must resume this branch, never step_20
    fake_run(tmp_path, "aaaa", steps=(10, 20))
    start = start_run(cfg_for(tmp_path, f"run.resume_from={tmp_path / 'checkpoints' / 'step_10'}"), tmp_path)
    assert start.run_id == "aaaa" and start.resume.name == "step_10"
    assert latest_own_checkpoint(tmp_path, "aaaa").name == "step_10"
    aside = list((tmp_path / SET_ASIDE).iterdir())
    assert [p.name.split(".")[0] for p in aside] == ["step_20"] and (aside[0] / STATE_FILE).is_file()  # kept


def test_a_finished_run_rerun_with_auto_says_so_in_one_line(tmp_path):
    fake_run(tmp_path, "aaaa", steps=(2, 4))
    for steps in (4, 3):
        with pytest.raises(AlreadyFinished) as e:
            check_output_dir(cfg_for(tmp_path, "run.resume_from=auto", f"run.steps={steps}"))
        assert str(e.value) == (f"run.output_dir {str(tmp_path)!r}: already finished at step 4 (run.steps={steps}); "
                                "raise run.steps to extend it")
    assert start_run(cfg_for(tmp_path, "run.resume_from=auto", "run.steps=8"), tmp_path).resume.name == "step_4"
    # the CLI: the line and exit 0 (a requeued job's rerun is done, not failed), no traceback, nothing on stdout
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-s", f"run.output_dir={tmp_path}", "-s",
                           "run.resume_from=auto", "-s", "run.steps=4"], capture_output=True, text=True, timeout=120)
    line = f"run.output_dir {str(tmp_path)!r}: already finished at step 4 (run.steps=4); raise run.steps to extend it"
    assert proc.returncode == 0 and proc.stderr.strip().splitlines() == [line], proc.stderr
    assert not proc.stdout.strip()


def test_a_folder_that_cannot_be_made_or_locked_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"cannot create .run.lock there \(Not a directory\); pick a folder"):
        check_output_dir(cfg_for(tmp_path / "file" / "run"))

    def no_locks(fd, op):
        raise OSError(37, "No locks available")  # ENOLCK: flock on some NFS mounts

    monkeypatch.setattr("replay_rl.driver.run_folder.fcntl.flock", no_locks)
    with pytest.raises(ConfigError, match=r"cannot lock .run.lock there \(No locks available\); use a local"):
        check_output_dir(cfg_for(tmp_path / "nfs"))


def test_a_run_that_died_at_its_end_before_it_ended_resumes_there(tmp_path):
    """Its final eval cut off (run.max_restarts=0, the default): final_model does not link the last checkpoint yet,
    so resume_from=auto resumes it there (the eval is made again) instead of calling it finished."""
    fake_run(tmp_path, "aaaa", steps=(2, 4))
    (tmp_path / "final_model").unlink()
    (tmp_path / "final_model").symlink_to("checkpoints/step_2/hf_model")  # an earlier end, extended since
    assert start_run(cfg_for(tmp_path, "run.resume_from=auto", "run.steps=4"), tmp_path).resume.name == "step_4"
    with pytest.raises(AlreadyFinished):
        check_output_dir(cfg_for(tmp_path, "run.resume_from=auto", "run.steps=3"))


def test_retention_keeps_the_newest_of_this_runs_checkpoints_only(tmp_path):
    """run.keep_checkpoints: this run's oldest go; the newest (a restart's and final_model's) stays; another run's
    checkpoint and a save that never completed are not this run's to delete."""
    fake_run(tmp_path, "aaaa", steps=(2, 4, 6, 8))
    foreign = tmp_path / "checkpoints" / "step_3"
    foreign.mkdir()
    (foreign / STATE_FILE).write_text("{}")
    (foreign / RUN_FILE).write_text(json.dumps({"run_id": "bbbb"}))
    partial = tmp_path / "checkpoints" / "step_1"
    partial.mkdir()  # no state file: not a complete checkpoint
    assert prune_checkpoints(tmp_path, "aaaa", None) == [] and prune_checkpoints(tmp_path, None, 1) == []
    gone = prune_checkpoints(tmp_path, "aaaa", 2)
    assert [p.name for p in gone] == ["step_2", "step_4"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_1", "step_3", "step_6", "step_8"]
    assert latest_own_checkpoint(tmp_path, "aaaa").name == "step_8" and (tmp_path / "final_model").is_symlink()
    # an extended run's final_model still names its earlier end until the run relinks it: that one stays too
    (tmp_path / "final_model").unlink()
    (tmp_path / "final_model").symlink_to("checkpoints/step_6/hf_model")
    assert prune_checkpoints(tmp_path, "aaaa", 1) == [] and (tmp_path / "checkpoints" / "step_6").is_dir()

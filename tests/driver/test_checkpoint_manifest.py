"""A checkpoint is code (resume unpickles its DeepSpeed files): commit() hashes every file into manifest.json and a
resume refuses, in one line naming the file, a checkpoint whose files differ, before anything is loaded. And commit
is crash-safe: an older checkpoint of the same step is only removed once the new one is in place."""

import json
import os
import subprocess
import sys

import pytest
import torch

from replay_rl.driver import checkpoints
from replay_rl.driver.checkpoints import (MANIFEST, STATE_FILE, CheckpointRefused, checkpoint_dir, clean_stale, commit,
                                   staging_dir, verify)
from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver.run_folder import RUN_FILE, latest_own_checkpoint, start_run
from tests.runs import Planted


def save(out, step, run_id="aaaa", weight=1.0):
    """A checkpoint as the learner writes one (torch.save pickles, as DeepSpeed's save_checkpoint does), committed."""
    staging = staging_dir(out, step)
    (staging / f"step_{step}").mkdir(parents=True)
    torch.save({"module": {"w": torch.full((2, 3), weight)}}, staging / f"step_{step}" / "mp_rank_00_model_states.pt")
    (staging / "latest").write_text(f"step_{step}")
    (staging / RUN_FILE).write_text(json.dumps({"run_id": run_id}))
    (staging / STATE_FILE).write_text(json.dumps({"step": step}))
    return commit(staging, checkpoint_dir(out, step))


def test_a_committed_checkpoint_verifies_and_a_tampered_one_is_refused_naming_the_file(tmp_path):
    ckpt = save(tmp_path, 2)
    listed = json.loads((ckpt / MANIFEST).read_text())["sha256"]
    assert sorted(listed) == sorted([RUN_FILE, "latest", "step_2/mp_rank_00_model_states.pt", STATE_FILE])
    verify(ckpt)
    states = ckpt / "step_2" / "mp_rank_00_model_states.pt"
    torch.save({"module": {"w": torch.full((2, 3), 2.0)}}, states)  # same size, other bytes
    with pytest.raises(CheckpointRefused) as e:
        verify(ckpt)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"checkpoint {ckpt} refused: step_2/mp_rank_00_model_states.pt "
                                                f"does not match its sha256 in {MANIFEST}")
    states.unlink()
    with pytest.raises(CheckpointRefused, match="model_states.pt is listed in its manifest.json but missing"):
        verify(ckpt)
    (ckpt / MANIFEST).unlink()
    with pytest.raises(CheckpointRefused, match="manifest.json is missing or unreadable"):
        verify(ckpt)


def test_an_unlisted_pickle_is_refused_before_resume_loads_anything(tmp_path):
    out = tmp_path / "run"
    ckpt = save(out, 4)
    (out / RUN_FILE).write_text(json.dumps({"run_id": "aaaa"}))
    marker = tmp_path / "code_ran"
    planted = ckpt / "step_4" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    torch.save({"optimizer": Planted(marker)}, planted)
    cfg = RunConfig.load(None, [f"run.output_dir={out}", "run.resume_from=auto"])
    with pytest.raises(ConfigError, match=r"step_4/zero_pp_rank_1_mp_rank_00_optim_states.pt is not listed in its "
                                          r"manifest.json; resume unpickles its files, which can run code"):
        start_run(cfg, out)  # the driver's start: before Ray, before any role loads the checkpoint
    with pytest.raises(CheckpointRefused, match="zero_pp_rank_1"):
        latest_own_checkpoint(out, "aaaa")  # where a restart resumes
    assert not marker.exists()
    torch.load(planted, weights_only=False)  # what DeepSpeed's load would have done: the planted code runs
    assert marker.exists()


def test_a_restart_falls_back_past_a_corrupt_newest_checkpoint_in_one_line(tmp_path, capsys):
    """A restart without a person: the newest checkpoint changed since it was saved (a torn disk write, a bit flip) is
    never loaded, and the restart resumes from the one before instead of stopping the run."""
    out = tmp_path / "run"
    save(out, 2)
    ckpt = save(out, 4)
    with open(ckpt / "step_4" / "mp_rank_00_model_states.pt", "r+b") as f:  # one byte changed in place
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert latest_own_checkpoint(out, "aaaa").name == "step_2"
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"checkpoint {ckpt} refused: step_4/mp_rank_00_model_states.pt does "
                                               "not match its sha256") and err.endswith("falling back to an earlier "
                                                                                        "checkpoint")


def test_a_link_in_a_checkpoint_is_refused(tmp_path):
    ckpt = save(tmp_path, 2)
    (ckpt / "step_2" / "extra.pt").symlink_to(ckpt / "latest")
    with pytest.raises(CheckpointRefused, match="extra.pt is not listed"):
        verify(ckpt)


def test_trust_adopts_a_checkpoint_written_before_manifests(tmp_path):
    ckpt = save(tmp_path, 2)
    (ckpt / MANIFEST).unlink()
    proc = subprocess.run([sys.executable, "-m", "replay_rl.driver.checkpoints", "trust", str(ckpt)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    verify(ckpt)


def test_commit_replaces_a_step_only_once_the_new_one_is_in_place(tmp_path, monkeypatch):
    save(tmp_path, 2, weight=1.0)
    real_rename, calls = os.rename, []

    def crash_on_second(src, dst):  # the process dies after moving the old step aside, before the new one lands
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("killed")
        real_rename(src, dst)

    monkeypatch.setattr(checkpoints.os, "rename", crash_on_second)
    with pytest.raises(OSError):
        save(tmp_path, 2, weight=2.0)
    monkeypatch.setattr(checkpoints.os, "rename", real_rename)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == [".step_2.old", ".step_2.partial"]
    assert clean_stale(tmp_path) == ["restored step_2", "removed .step_2.partial"]  # the next start
    ckpt = root / "step_2"
    verify(ckpt)
    assert torch.load(ckpt / "step_2" / "mp_rank_00_model_states.pt")["module"]["w"][0, 0] == 1.0
    save(tmp_path, 2, weight=2.0)  # uninterrupted: the new one replaces it and nothing is left aside
    assert sorted(p.name for p in root.iterdir()) == ["step_2"]
    assert torch.load(ckpt / "step_2" / "mp_rank_00_model_states.pt")["module"]["w"][0, 0] == 2.0


def test_a_start_cleans_staging_folders_of_saves_that_died(tmp_path):
    out = tmp_path / "run"
    save(out, 2)
    (out / RUN_FILE).write_text(json.dumps({"run_id": "aaaa"}))
    staging_dir(out, 4).mkdir()
    (staging_dir(out, 4) / "half.pt").write_bytes(b"\0")
    start = start_run(RunConfig.load(None, [f"run.output_dir={out}", "run.resume_from=auto"]), out)
    assert start.resume.name == "step_2" and sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_2"]


def test_learner_ranks_hash_their_own_files_and_the_driver_reads_only_the_rest(tmp_path, monkeypatch):
    """Each rank hashes (and fsyncs) what it wrote inside its bounded save, so a wedged filesystem holds that rank,
    which the save's bound names, not the driver (which used to hash every file at commit, with no bound)."""
    from replay_rl.models import digests

    staging = staging_dir(tmp_path, 4)
    tag = staging / "step_4"
    tag.mkdir(parents=True)
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                 "zero_pp_rank_1_mp_rank_00_optim_states.pt"):
        (tag / name).write_bytes(name.encode())
    (staging / "latest").write_text("step_4")
    assert digests.rank_files(staging, 0) == ["latest", "step_4/mp_rank_00_model_states.pt",
                                              "step_4/zero_pp_rank_0_mp_rank_00_optim_states.pt"]
    assert digests.rank_files(staging, 1) == ["step_4/zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    hashed = {n: d for rank in (0, 1) for n, d in digests.sha256s(staging, digests.rank_files(staging, rank)).items()}
    (staging / STATE_FILE).write_text(json.dumps({"step": 4}))  # the driver's own file, written after the save
    read = []
    real = digests.sha256
    monkeypatch.setattr(digests, "sha256", lambda path, sync=False: read.append(path.name) or real(path, sync))
    ckpt = commit(staging, checkpoint_dir(tmp_path, 4), hashed)
    assert read == [STATE_FILE]
    assert json.loads((ckpt / MANIFEST).read_text())["sha256"] == hashed | {
        STATE_FILE: real(ckpt / STATE_FILE)}
    verify(ckpt)
    # a rank's file the driver cannot see (run.output_dir not shared by every node) stops the commit in one line
    staging = staging_dir(tmp_path, 8)
    staging.mkdir(parents=True)
    (staging / STATE_FILE).write_text(json.dumps({"step": 8}))
    with pytest.raises(RuntimeError, match=r"^learner ranks wrote step_8/zero_pp_rank_1_mp_rank_00_optim_states.pt "
                                           r"in .*, which this driver cannot see: run.output_dir must be on a "
                                           r"filesystem every node shares$"):
        commit(staging, checkpoint_dir(tmp_path, 8), {"step_8/zero_pp_rank_1_mp_rank_00_optim_states.pt": "ab"})

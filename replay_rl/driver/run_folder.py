"""A run folder belongs to one run. Its run id (RUN/run.json, written at the run's first start, and copied into each
checkpoint it saves) ties the checkpoints and metrics there to it; a lock the driver holds for the run's life keeps a
second driver out (two would delete each other's replay_live/, share staging folders and interleave metrics.jsonl).

A fresh run in a folder holding another run's checkpoints or metrics is refused: it would append to their metrics,
resume their newest checkpoint on a restart and, finding their checkpoint at its final step, hand out their model
as final_model. run.resume_from=auto continues the folder's run (a restart, or a finished run extended to more
steps); run.overwrite=true removes the folder's run artefacts first.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from replay_rl.driver.checkpoints import (STATE_FILE, CheckpointRefused, clean_stale, is_checkpoint,
                                          resolve_resume, verify)
from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver.trackers import LOCAL_STORES


RUN_FILE = "run.json"
LOCK_FILE = ".run.lock"
SET_ASIDE = "checkpoints_set_aside"  # this run's checkpoints past the earlier step a start resumed from
# what a run writes into its folder: run.overwrite removes these and nothing else (output_dir may hold other files)
ARTEFACTS = ("checkpoints", "replay_live", "replay_served", "metrics.jsonl", "metrics.jsonl.partial", "tb", "plots",
             "final_model", "replay_stats.json", "replay_stats.json.partial", "weight_checks.jsonl", "samples.jsonl",
             "placement.json", "config.json", "error.log", "ray.log", RUN_FILE, SET_ASIDE, *LOCAL_STORES)


class AlreadyFinished(ConfigError):
    """run.resume_from=auto on a run already at run.steps: nothing to do (the CLI exits 0 with its line)."""


@dataclass(frozen=True)
class RunStart:
    """Which run this start continues, and from where: `resume` is a complete checkpoint or None (step 0)."""
    run_id: str
    resume: Path | None


class FolderLock:
    """The folder's lock, taken for the driver's life. flock, so the kernel releases it when the process ends,
    however it ends (SIGKILL included): there is no stale lock to clear by hand."""

    def __init__(self, out: Path) -> None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:  # no permission, a read-only mount: one line, not a traceback
            raise ConfigError(f"run.output_dir {str(out)!r}: cannot create {LOCK_FILE} there ({e.strerror or e}); "
                              "pick a folder you can write") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            raise ConfigError(f"run.output_dir {str(out)!r} is in use by another run (driver pid {holder}); wait for "
                              "it to end or stop it, or pick another run.output_dir") from None
        except OSError as e:  # flock unsupported (some NFS or FUSE mounts: ENOLCK, EOPNOTSUPP)
            os.close(self.fd)
            raise ConfigError(f"run.output_dir {str(out)!r}: cannot lock {LOCK_FILE} there ({e.strerror or e}); "
                              "use a local folder (or a mount with file locks)") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()} on {socket.gethostname()}".encode(), 0)

    def release(self) -> None:
        os.close(self.fd)  # closing the descriptor releases the lock


def start_run(cfg: RunConfig, out: Path) -> RunStart:
    """Under the folder's lock: which run this start is (check_folder), the folder cleared for run.overwrite, saves
    that died cleaned up, the checkpoint to resume verified against its manifest (before anything unpickles it),
    and run.json written at the run's first start."""
    run = check_folder(cfg, out)
    if cfg.run.overwrite:
        clear_run(out)
    clean_stale(out)
    if run.resume is not None:
        verify(run.resume)
        set_aside_later(out, run)
    if read_run_id(out) != run.run_id:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_FILE).write_text(json.dumps({"run_id": run.run_id, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    return run


def check_folder(cfg: RunConfig, out: Path) -> RunStart:
    """Which run a start in `out` is, changing nothing: the folder's own run when it resumes from the folder, else
    a new one. Refuses, in one line, a new run where another left its history, and a resume of a checkpoint that
    another run left in the folder."""
    own, src = read_run_id(out), cfg.run.resume_from
    inside = src is not None and (src == "auto" or Path(src).resolve().parent == (out / "checkpoints").resolve())
    if cfg.run.overwrite:
        if inside:
            raise ConfigError(f"run.overwrite=true would delete the checkpoint run.resume_from={src} names; drop one")
        return RunStart(new_run_id(), resolve_resume(src, out))
    resume = resolve_resume(src, out)
    if resume is not None and inside:
        theirs = read_run_id(resume)
        if own is not None and theirs is not None and theirs != own:
            raise ConfigError(f"run.resume_from: {str(resume)!r} was saved by run {theirs}, not by this folder's "
                              f"run {own} (run.json); pass one of its own checkpoints, or start over with "
                              "run.overwrite=true")
        # the loop would not run: nothing to train, nothing to log; unless the run died at its end before it ended
        # (its final eval cut off): resumed there, it makes that eval again and links its final model
        if (done := step_of(resume)) > cfg.run.steps or (done == cfg.run.steps and ended_at(out, resume)):
            raise AlreadyFinished(f"run.output_dir {str(out)!r}: already finished at step {done} "
                                  f"(run.steps={cfg.run.steps}); raise run.steps to extend it")
        return RunStart(own or theirs or new_run_id(), resume)
    if src == "auto":  # no checkpoint yet: the folder's run, again from step 0
        return RunStart(own or new_run_id(), None)
    if held := held_artefacts(out):  # a new run, from step 0 or from another folder's checkpoint
        raise ConfigError(f"run.output_dir {str(out)!r} holds another run's {' and '.join(held)}: continue that run "
                          "with run.resume_from=auto, start over there with run.overwrite=true, or pick another "
                          "run.output_dir")
    return RunStart(new_run_id(), resume)


def ended_at(out: Path, checkpoint: Path) -> bool:
    """Whether the folder's run ended at `checkpoint`: final_model links into it only after the final eval."""
    link = out / "final_model"
    return link.is_symlink() and checkpoint.resolve() in link.resolve().parents


def held_artefacts(out: Path) -> list[str]:
    """What of a run's history the folder holds: its checkpoints (complete or staged) and its metrics."""
    root = out / "checkpoints"
    held = ["checkpoints"] if root.is_dir() and any(root.iterdir()) else []
    metrics = out / "metrics.jsonl"
    return held + (["metrics.jsonl"] if metrics.is_file() and metrics.stat().st_size else [])


def clear_run(out: Path) -> None:
    for name in ARTEFACTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_symlink() or path.exists():
            path.unlink()


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def read_run_id(folder: Path) -> str | None:
    """The run id in folder/run.json (a run folder or a checkpoint); None where none was written."""
    path = folder / RUN_FILE
    return json.loads(path.read_text())["run_id"] if path.is_file() else None


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.removeprefix("step_"))


def set_aside_later(out: Path, run: RunStart) -> None:
    """Move this run's checkpoints past the step it resumes from out of checkpoints/: a branch the user abandoned,
    which a restart (latest_own_checkpoint) would otherwise resume instead of this branch's newest."""
    at, root = step_of(run.resume), out / "checkpoints"
    for p in sorted(root.glob("step_*")) if root.is_dir() else []:
        if is_checkpoint(p) and step_of(p) > at and read_run_id(p) == run.run_id:
            dest = out / SET_ASIDE / f"{p.name}.{time.strftime('%Y%m%d-%H%M%S')}"
            dest.parent.mkdir(exist_ok=True)
            p.rename(dest)
            print(f"{p} is past step {at}, which this start resumes from: moved aside to {dest}", file=sys.stderr,
                  flush=True)


def latest_own_checkpoint(out: Path, run_id: str) -> Path | None:
    """The newest complete checkpoint this run saved in `out` that verifies against its manifest (where a restart
    resumes). One changed since it was saved is never loaded: the restart falls back to the one before, in one
    line naming it, and only when none verifies is the newest's refusal raised (no person is there to choose)."""
    root = out / "checkpoints"
    own = [p for p in root.glob("step_*") if is_checkpoint(p) and read_run_id(p) == run_id] if root.is_dir() else []
    refused = None
    for p in sorted(own, key=step_of, reverse=True):
        try:
            verify(p)
        except CheckpointRefused as e:
            refused = refused or e
            print(f"{e}; falling back to an earlier checkpoint", file=sys.stderr, flush=True)
            continue
        return p
    if refused is not None:
        raise refused
    return None


def prune_checkpoints(out: Path, run_id: str | None, keep: int | None) -> list[Path]:
    """Delete this run's complete checkpoints but the newest `keep` (run.keep_checkpoints): the newest, which a
    restart resumes and final_model links, is always among them; other runs' and unfinished ones are not touched."""
    root = out / "checkpoints"
    if keep is None or run_id is None or not root.is_dir():
        return []
    linked = (out / "final_model").resolve().parent  # an extended run's earlier end, until the run relinks it
    own = sorted((p for p in root.glob("step_*") if is_checkpoint(p) and read_run_id(p) == run_id), key=step_of)
    gone = [p for p in own[:-keep] if p.resolve() != linked]
    for old in gone:
        try:
            (old / STATE_FILE).unlink()  # first: a delete cut short leaves no folder that passes for a checkpoint
            shutil.rmtree(old)
        except OSError as e:  # a busy file on a network filesystem: the run goes on, the folder stays
            print(f"run.keep_checkpoints: could not delete {old} ({e}); delete it by hand", file=sys.stderr, flush=True)
    return gone

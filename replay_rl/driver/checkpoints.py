"""Checkpoint folders: written under a hidden staging name and renamed when complete, so a crash mid-save never
leaves a folder that resume would take for a checkpoint. `trainer_state.json` marks completion.

A checkpoint is code: resume hands its DeepSpeed files to torch.load(weights_only=False), which runs whatever a
pickle says. commit() therefore lists every file with its sha256 in `manifest.json`, and verify() refuses, before
anything is loaded, a folder whose files differ from that list (a changed, added or missing file, or a link). The
manifest lives in the folder it describes: it catches corruption and a planted file, not someone who can write the
folder and rewrites the manifest too (README "What a checkpoint folder is trusted for")."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from replay_rl.config_errors import ConfigError
from replay_rl.models.digests import files_below, sha256s

STATE_FILE = "trainer_state.json"
MANIFEST = "manifest.json"
_STEP = re.compile(r"step_(\d+)")
_STALE = re.compile(r"\.step_(\d+)\.(partial|old)")


class CheckpointRefused(ConfigError):
    """A checkpoint whose files are not the ones its manifest lists: nothing of it is loaded."""


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step_{step}"


def staging_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f".step_{step}.partial"


def is_checkpoint(path: Path) -> bool:
    return (path / STATE_FILE).is_file() and _STEP.fullmatch(path.name) is not None


def _files(folder: Path) -> list[str]:
    """Every entry below folder but directories and the manifest, as posix paths relative to it."""
    return [f for f in files_below(folder) if f != MANIFEST]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(folder: Path, sync: bool = False, hashed: dict[str, str] | None = None) -> Path:
    """folder/manifest.json: the sha256 of every file below folder (sync: each file fsynced as it is read).
    hashed: digests already taken (and files fsynced) where the files were written, by the learner ranks."""
    names = _files(folder)
    if links := [n for n in names if (folder / n).is_symlink()]:
        raise RuntimeError(f"checkpoint {folder} holds a link ({links[0]}); a checkpoint holds plain files only")
    if unseen := sorted(set(hashed or {}) - set(names)):  # a rank wrote it where the driver cannot read it
        raise RuntimeError(f"learner ranks wrote {unseen[0]} in {folder}, which this driver cannot see: "
                           "run.output_dir must be on a filesystem every node shares")
    known = hashed or {}
    manifest = folder / MANIFEST
    digests = known | sha256s(folder, [n for n in names if n not in known], sync)
    manifest.write_text(json.dumps({"sha256": dict(sorted(digests.items()))}, indent=0))
    if sync:
        with open(manifest, "rb") as f:
            os.fsync(f.fileno())
    return manifest


def verify(folder: Path) -> None:
    """Refuse, in one line naming the file, a checkpoint whose files are not exactly those its manifest hashes."""
    folder = Path(folder)

    def refused(why: str) -> CheckpointRefused:
        return CheckpointRefused(
            f"checkpoint {folder} refused: {why}; resume unpickles its files, which can run code: restore it from a "
            f"copy you trust, or if you trust it as it is, run `python -m replay_rl.driver.checkpoints trust {folder}`")

    try:
        listed = json.loads((folder / MANIFEST).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        raise refused(f"{MANIFEST} is missing or unreadable") from None
    present = _files(folder)
    for name in present:
        if name not in listed:
            raise refused(f"{name} is not listed in its {MANIFEST}")
        if (folder / name).is_symlink():
            raise refused(f"{name} is a link")
    for name in sorted(set(listed) - set(present)):
        raise refused(f"{name} is listed in its {MANIFEST} but missing")
    for name, digest in sha256s(folder, present).items():
        if digest != listed[name]:
            raise refused(f"{name} does not match its sha256 in {MANIFEST}")


def commit(staging: Path, final: Path, hashed: dict[str, str] | None = None) -> Path:
    """Make the staged checkpoint visible in one rename, crash-safe: its files and manifest are fsynced first; an
    older checkpoint of the same step is moved aside (not deleted) until the new one is in place and the rename is
    on disk. A crash between the two renames leaves `.step_N.old`, which clean_stale() puts back. hashed: the
    learner ranks' digests of their own files (write_manifest)."""
    if not (staging / STATE_FILE).is_file():
        raise RuntimeError(f"checkpoint {staging} is incomplete (no {STATE_FILE}); not committing it")
    write_manifest(staging, sync=True, hashed=hashed)
    for root, _, _ in os.walk(staging):
        _fsync_dir(Path(root))
    old = final.with_name(f".{final.name}.old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(staging, final)
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)
    return final


def clean_stale(output_dir: str | Path) -> list[str]:
    """At a start (under the run folder's lock): remove staging folders of saves that died, and put back an older
    checkpoint that a commit moved aside and died before replacing. Returns what it did, one entry each."""
    root, done = Path(output_dir) / "checkpoints", []
    for path in sorted(root.glob(".step_*.*")) if root.is_dir() else []:
        if not (m := _STALE.fullmatch(path.name)):
            continue
        final = root / f"step_{m.group(1)}"
        if m.group(2) == "old" and not final.exists():
            os.rename(path, final)
            done.append(f"restored {final.name}")
        else:
            shutil.rmtree(path)
            done.append(f"removed {path.name}")
    if done:
        _fsync_dir(root)
    return done


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run folder, or None; staging folders and stray files are ignored."""
    root = Path(output_dir) / "checkpoints"
    done = [p for p in root.glob("step_*") if is_checkpoint(p)] if root.is_dir() else []
    return max(done, key=lambda p: int(_STEP.fullmatch(p.name).group(1)), default=None)


def resolve_resume(resume_from: str | None, output_dir: str | Path) -> Path | None:
    """run.resume_from as a folder: 'auto' is the run folder's newest complete checkpoint (None: start fresh)."""
    if resume_from == "auto":
        return latest_checkpoint(output_dir)
    return Path(resume_from) if resume_from else None


def link_final_model(output_dir: str | Path, checkpoint: Path) -> Path:
    """`<output_dir>/final_model`: a relative link to the last checkpoint's HF folder (no second copy of a big model)."""
    link = Path(output_dir) / "final_model"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(os.path.relpath(checkpoint / "hf_model", link.parent)), target_is_directory=True)
    return link


if __name__ == "__main__":  # python -m replay_rl.driver.checkpoints trust FOLDER: adopt a checkpoint you trust
    if len(sys.argv) != 3 or sys.argv[1] != "trust" or not is_checkpoint(Path(sys.argv[2])):
        sys.exit("usage: python -m replay_rl.driver.checkpoints trust RUN/checkpoints/step_N (a complete checkpoint you "
                 "trust: its files are hashed into its manifest.json as they are now)")
    print(write_manifest(Path(sys.argv[2]), sync=True))

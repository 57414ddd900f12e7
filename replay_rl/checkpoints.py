"""Checkpoint folders: written under a hidden staging name and renamed when complete, so a crash mid-save never
leaves a folder that resume would take for a checkpoint. `trainer_state.json` is written last and marks completion."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.json"
_STEP = re.compile(r"step_(\d+)")


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step_{step}"


def staging_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f".step_{step}.partial"


def is_checkpoint(path: Path) -> bool:
    return (path / STATE_FILE).is_file() and _STEP.fullmatch(path.name) is not None


def commit(staging: Path, final: Path) -> Path:
    """Make the staged checkpoint visible in one rename (replacing an older one of the same step)."""
    if not (staging / STATE_FILE).is_file():
        raise RuntimeError(f"checkpoint {staging} is incomplete (no {STATE_FILE}); not committing it")
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    return final


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

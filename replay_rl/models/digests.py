"""sha256 of saved files, fsynced as they are read: a checkpoint's manifest (driver/checkpoints.py) lists them, and
each learner rank hashes the files it wrote inside its own bounded save (learner/engine.py), so the driver never
reads a rank's bytes: a wedged filesystem holds that rank, which the save's bound names, not the driver."""

from __future__ import annotations

import hashlib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# DeepSpeed names each data-parallel rank's partition (optimizer states, ZeRO-3 weights) after the rank
_RANK_PARTITION = re.compile(r"zero_pp_rank_(\d+)_")


def sha256(path: Path, sync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)  # hashlib drops the GIL on large blocks: the thread pool hashes files in parallel
        if sync:
            os.fsync(f.fileno())  # the staged bytes reach the disk before the rename makes them a checkpoint
    return digest.hexdigest()


def sha256s(folder: Path, names: list[str], sync: bool = False) -> dict[str, str]:
    """name -> sha256 of folder/name, for each of names (posix paths relative to folder)."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return dict(zip(names, pool.map(lambda n: sha256(folder / n, sync), names)))


def files_below(folder: Path) -> list[str]:
    """Every entry below folder but directories, as sorted posix paths relative to it; links to directories are
    listed (and not followed)."""
    out = []
    for root, dirs, files in os.walk(folder):
        names = files + [d for d in dirs if (Path(root) / d).is_symlink()]
        out += [(Path(root) / n).relative_to(folder).as_posix() for n in names]
    return sorted(out)


def rank_files(folder: Path, rank: int) -> list[str]:
    """The files below folder that this learner rank wrote in its save: its own partition's, and on rank 0 every
    other one (model states, DeepSpeed's `latest`, the HF model folder). A peer's partition may not be there yet."""
    def owner(name: str) -> int:
        found = _RANK_PARTITION.search(Path(name).name)
        return int(found.group(1)) if found else 0
    return [n for n in files_below(folder) if owner(n) == rank]

"""Shard snapshots: safetensors arrays + a JSON manifest. No pickle, so a snapshot is safe to load and portable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "replay-rl/shard-snapshot/v1"


def write_snapshot(path: str | Path, arrays: dict[str, np.ndarray], counters: dict[str, Any],
                   settings: dict[str, Any]) -> Path:
    """Written beside `path`, then swapped in: a reader (or a crash) never sees new items with an old manifest.
    The previous snapshot is kept as PATH.old until the swap is done; read_snapshot falls back to it."""
    import shutil

    from safetensors.numpy import save_file

    path = Path(path)
    partial, old = path.with_name(path.name + ".partial"), previous(path)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(partial / "items.safetensors"))
    manifest = {"format": FORMAT, "settings": settings, "counters": counters}
    (partial / "manifest.json").write_text(json.dumps(manifest, default=_json_default))
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    partial.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def previous(path: str | Path) -> Path:
    """Where write_snapshot keeps the snapshot it is replacing until the new one is in place."""
    path = Path(path)
    return path.with_name(path.name + ".old")


def readable_snapshot(path: str | Path) -> Path | None:
    """The complete snapshot at `path`, else the previous one (a crash between write_snapshot's two renames)."""
    for candidate in (Path(path), previous(path)):
        if (candidate / "manifest.json").is_file():
            return candidate
    return None


def read_snapshot(path: str | Path, settings: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from safetensors.numpy import load_file

    path = readable_snapshot(path) or Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{path}: no manifest.json; not a (complete) shard snapshot")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    if manifest["settings"] != settings:
        raise ValueError(f"{path}: snapshot taken with replay settings {manifest['settings']}, this shard has "
                         f"{settings}; restore with the config it was taken with")
    return load_file(str(path / "items.safetensors")), manifest["counters"]


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"not JSON-able: {type(o)}")

"""Shard snapshots: safetensors arrays + a JSON manifest. No pickle, so a snapshot is safe to load and portable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "replay-rl/shard-snapshot/v1"


def write_snapshot(path: str | Path, arrays: dict[str, np.ndarray], counters: dict[str, Any],
                   settings: dict[str, Any]) -> Path:
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / "items.safetensors.tmp"
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp))
    tmp.replace(path / "items.safetensors")  # the manifest is written last: a snapshot without one is incomplete
    manifest = {"format": FORMAT, "settings": settings, "counters": counters}
    (path / "manifest.json").write_text(json.dumps(manifest, default=_json_default))
    return path


def read_snapshot(path: str | Path, settings: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from safetensors.numpy import load_file

    path = Path(path)
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

"""The reference warm models, shipped in the package (replay_rl/models/warm/<name>/): one per task the CPU testbed
has, each an HF folder with its manifest (warmstart.json: the settings it was built from, its step-0 accuracy and
its sha256). A run whose settings are a shipped model's copies that model to model.build_dir instead of warm-
starting, because a warm start rebuilt on another CPU is another model (same settings and torch: sha256
449972866ecd… and step-0 pass@1 0.413 on an Intel Xeon, f9378cc86b72… and 0.519 on an AMD EPYC): CPU kernels
dispatch by instruction set, and 330 steps at lr 1e-3 amplify the last bit."""

from __future__ import annotations

import json
from pathlib import Path

WARM = Path(__file__).parent / "warm"
MANIFEST = "warmstart.json"


def shipped_models() -> list[Path]:
    """Every shipped warm model folder, in name order."""
    return sorted(p for p in WARM.iterdir() if (p / MANIFEST).is_file()) if WARM.is_dir() else []


def read_manifest(path: str | Path) -> dict | None:
    """A warm model folder's manifest; None for a folder without one (a pretrained model, a run's final_model)."""
    f = Path(path) / MANIFEST
    return json.loads(f.read_text()) if f.is_file() else None

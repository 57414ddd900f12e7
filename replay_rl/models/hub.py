"""The model a user names in model.path: a local folder, or a hub id (`org/name`) resolved through the HF cache as
the user's environment says (online: downloaded once into the cache; HF_HUB_OFFLINE=1: the cache alone). Never
built: a tiny model is built only at model.build_dir when model.path is unset, so `-s
model.path=Qwen/Qwen2.5-1.5B-Instruct` loads Qwen or stops in one line, and never trains a toy in a folder of that
name (which it did), nor does a mistyped folder."""

from __future__ import annotations

import os
from pathlib import Path

from replay_rl.config import ConfigError
from replay_rl.config.model import HUB_ID

# what a run reads of a model repository: configs, weights, tokenizer, chat template (not other formats' weights)
MODEL_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.jinja", "*.model", "*.tiktoken", "merges.txt", "vocab.*"]


def is_hub_id(path: str) -> bool:
    """`org/name` with no such local folder: a hub id (a local relative folder of that shape wins)."""
    return bool(HUB_ID.fullmatch(path)) and not Path(path).exists()


def resolve_hub_model(repo_id: str, field: str = "model.path") -> Path:
    """The cached snapshot folder of `repo_id`, downloaded first when the environment allows; one line if not."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=MODEL_FILES))
    except Exception as e:  # noqa: BLE001 - offline, not found, gated, no network: each is the same one line
        why = ("not in the local HF cache and HF_HUB_OFFLINE=1" if os.environ.get("HF_HUB_OFFLINE") == "1"
               else f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
        raise ConfigError(f"{field} {repo_id!r} is not a local folder and the hub could not provide it ({why}); "
                          f"download it where the run starts (`hf download {repo_id}`), or point {field} at a local "
                          "HF model folder") from None


def local_or_hub_model(path: str, field: str = "model.path") -> Path:
    """The model folder `path` names: a local HF folder, or a hub id's cached snapshot; one line naming `field` if
    it is neither (nothing is built there)."""
    if is_hub_id(path):
        return resolve_hub_model(path, field)
    folder = Path(path)
    if not folder.exists():
        raise ConfigError(f"{field} {path!r}: no such folder, and not a hub id (org/name); point it at an HF model "
                          "folder (config.json + weights + tokenizer) or a hub id. Nothing is built at a path you "
                          "name: leave model.path unset to build model.build at model.build_dir")
    return folder

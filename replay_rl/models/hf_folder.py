"""Tiny random-init causal LM + an offline character tokenizer, saved as a standard HF model folder.

The folder (config.json, model.safetensors, tokenizer.json, ...) loads with AutoModelForCausalLM / AutoTokenizer
under HF_HUB_OFFLINE=1 and is laid out as vLLM expects, so the same code path serves real checkpoints.
"""

from __future__ import annotations

import functools
import shutil
import string
from pathlib import Path
from typing import Callable

import torch

from replay_rl.config import TinyModelSpec

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
# every printable ASCII character is one token: arithmetic and expressions tokenize digit by digit
CHARSET = "".join(ch for ch in string.printable if ch not in "\t\r\x0b\x0c")


def quiet_transformers() -> None:
    """No per-file progress bars or info chatter from transformers in logs of long runs."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def build_tokenizer():
    """A character-level fast tokenizer, built with the `tokenizers` library (no download)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(CHARSET))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
        clean_up_tokenization_spaces=False, padding_side="left",
    )


def build_tiny_model(spec: TinyModelSpec, vocab_size: int, pad_id: int, eos_id: int):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    config_cls = Qwen2Config if spec.family == "qwen2" else LlamaConfig
    config = config_cls(
        vocab_size=vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads, max_position_embeddings=spec.max_position,
        tie_word_embeddings=False,  # the paper trains Qwen3-0.6B untied; keeps weight sync name-for-name
        pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=eos_id, torch_dtype="float32",
    )
    torch.manual_seed(spec.seed)
    return AutoModelForCausalLM.from_config(config)


def init_tiny_model_folder(spec: TinyModelSpec, path: str | Path) -> Path:
    """Write a random-init tiny model and its tokenizer to `path`; deterministic given spec.seed."""
    path = Path(path)
    tokenizer = build_tokenizer()
    model = build_tiny_model(spec, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    save_model_folder(model, tokenizer, path)
    return path


def write_whole(path: str | Path, write: Callable[[Path], object]) -> Path:
    """A folder written by `write(folder)` into `<path>.partial`, then renamed to `path` (replacing an empty folder
    there): a write cut off never looks like a model folder."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    write(partial)
    partial.replace(path)
    return path


def save_model_folder(model, tokenizer, path: str | Path) -> None:
    quiet_transformers()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


@functools.cache
def usable_attention(asked: str) -> str:
    """`asked`, or sdpa where flash_attention_2 cannot run here; said once per process."""
    from transformers.utils import is_flash_attn_2_available

    if asked != "flash_attention_2" or is_flash_attn_2_available():
        return asked
    print(f"model.attn_implementation={asked} is not available here (needs the flash_attn package and a GPU); "
          "using sdpa", flush=True)
    return "sdpa"


def load_model(path: str | Path, dtype: str = "float32", attn_implementation: str = "sdpa"):
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    p = Path(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"model.path {str(p)!r} is not an HF model folder (no config.json); run "
                                "`replay-rl init-model` / `replay-rl warmstart`, or leave model.path unset to build "
                                "model.build")
    return AutoModelForCausalLM.from_pretrained(str(p), dtype=getattr(torch, dtype),
                                                attn_implementation=usable_attention(attn_implementation))


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())

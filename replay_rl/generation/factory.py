"""The one place that picks a generation backend by the config's type: backend.py stays the protocol that hf.py and
vllm.py implement, and neither it nor they import the other (as sync/factory.py does for weight sync)."""

from __future__ import annotations

from replay_rl.config import GenerationConfig, ModelConfig
from replay_rl.generation.backend import GenerationBackend


def make_backend(gen: GenerationConfig, model: ModelConfig, model_path: str, device: str = "cpu", *,
                 bucket_mb: float, seed: int = 0) -> GenerationBackend:
    """bucket_mb: sync.bucket_mb, the most weight bytes a backend that serialises weights handles at once. seed: the
    sampler's (transformers draws from torch's global generator, which the generator seeds itself)."""
    match gen.backend.type:
        case "transformers":
            from replay_rl.generation.hf import HFBackend
            return HFBackend(model_path, model.dtype, device)
        case "vllm":
            from replay_rl.generation.vllm import VLLMBackend
            return VLLMBackend(model_path, model.dtype, gen.backend, int(bucket_mb * 2**20), seed)

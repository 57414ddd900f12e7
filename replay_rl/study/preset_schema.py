"""What a study preset (replay_rl/study/preset_files/NAME.yaml) may say, validated when it is read: a typo or a wrong type
is one line naming the file and the field, before any run starts."""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from replay_rl.config import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Row(_Section):
    w: int = Field(ge=1)
    """W: the emulated cluster's generators."""
    t: int = Field(ge=1)
    """T: its trainers; replay runs get (1 + μ) / (1 + W/T) times the baseline's steps, the same compute."""
    mu: float = Field(gt=0)
    """μ: the cost of generating a batch over the cost of training on it."""
    n: str = Field(pattern=r"^(horizon|probe|B\+R|\d*\.?\d*B|once)$")
    """The buffer size rule (study/specs.capacity_for): horizon, probe, B, B+R, or kB (k batches, e.g. 10B); or
    once: no buffer, the baseline's consume-once queue at the baseline's steps, for a rule on the on-policy side
    (e.g. learner.drop_zero_advantage), compared with the baseline like any row but never the headline's buffer."""
    overrides: list[str] = []
    """Dotted config overrides of this row (the rule it tests)."""
    lrs: list[float] | None = None
    """Its learning rates (null: the preset's `lrs`)."""
    seeds: int | None = Field(None, ge=1)
    """Its seeds per LR, at most the preset's (null: the preset's)."""
    steps_scale: float = Field(1.0, ge=1.0)
    """Run this many times the row's same-compute steps: a row that charges less per step than planned (n: once
    with learner.drop_zero_advantage: (1 − z + μ)/(1 + μ) of the baseline's, z its zero-variance share) then still
    covers the baseline's budget. The comparison reads both sides up to the shorter one's end."""


class Preset(_Section):
    description: str
    """What the preset runs and why, with the issue or page it answers."""
    steps: int = Field(ge=1)
    """The baseline's learner steps (replay rows: the same compute)."""
    budget_multiple: int = Field(1, ge=1)
    """Every run goes this many times its steps from step 0, at the same eval spacing."""
    eval_every: int = Field(ge=1)
    """The baseline's eval spacing in steps (replay rows: the same compute)."""
    seeds: int = Field(ge=1)
    """Seeds per config and LR."""
    first_seed: int = Field(0, ge=0)
    """The first seed: a check out of sample uses seeds the study it checks did not."""
    extend: int | None = Field(None, ge=1)
    """Then extend each side's `extend_best` LRs to this many times their steps, from their final checkpoints."""
    extend_best: int | None = Field(None, ge=1)
    """How many of each side's LRs (by smoothed final pass@1) are extended."""
    configs: dict[str, Row]
    """The replay rows, by name."""
    sensitivity: dict[str, Row] = {}
    """Rows at `sensitivity_seeds` seeds (a sensitivity to μ, a sampler): reported apart."""
    sensitivity_seeds: int = Field(0, ge=0)
    """Seeds of the sensitivity rows."""
    set: list[str] = []
    """Dotted overrides of every run."""
    lrs: list[float | None] = Field(min_length=1)
    """The baseline's LRs, and a row's without its own (null: the task config's)."""
    tasks: dict[Literal["arithmetic", "countdown", "smollm2"], dict[str, Any]] = {"arithmetic": {}}
    """Each task it runs (study/specs.TASKS), with the keys above that it replaces there."""

    @model_validator(mode="after")
    def _extend_whole(self) -> "Preset":
        if (self.extend is None) != (self.extend_best is None):
            raise ValueError("extend and extend_best go together: set both, or neither")
        return self


def read(path) -> dict:
    """A preset file, validated; a YAML error too is one line."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"study preset {path.name}: not YAML ({str(e).splitlines()[0]})") from None
    return validated(path.name, data if isinstance(data, dict) else {})


def validated(name: str, data: dict) -> dict:
    """The preset as the study reads it (a dict), each task's version validated too; ConfigError in one line."""
    task = None
    try:
        preset = Preset.model_validate(data).model_dump(exclude={"description"})
        for task, part in preset["tasks"].items():  # each task's keys, as complete as the preset's own
            merged = Preset.model_validate({"description": "", **preset, **part, "tasks": {}}).model_dump()
            preset["tasks"][task] = {key: merged[key] for key in part}
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in (("tasks", task) if task else ()) + tuple(err["loc"]))
        raise ConfigError(f"study preset {name}: {f'{where}: ' if where else ''}{err['msg']}") from None
    return preset

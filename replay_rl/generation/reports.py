"""What generators report to the driver: GeneratorStats, pushed to one GeneratorReports actor. A module of its own
that imports neither torch nor transformers, so the actor starts in about a second, not the ten a generator's
imports take on a loaded box (its first answers came after a short run had ended)."""

from __future__ import annotations

from dataclasses import dataclass

import ray

from replay_rl.sync.weight_check import WeightCheck


@dataclass(frozen=True)
class GeneratorStats:
    generator_id: int
    rollouts: int         # unique rollouts produced (this generator's share of K_inf)
    tokens: int           # completion tokens generated
    busy_s: float         # seconds inside backend.generate
    wall_s: float         # seconds since the loop started
    version: int          # weights version loaded now
    weight_loads: int
    weight_load_s: float  # seconds spent fetching + loading weights
    calls: int            # calls made at this position, those before this actor included: a replacement starts here
    weight_check: WeightCheck | None = None  # the newest weight-path check: this generator against the learner
    zero_variance_groups: int = 0  # groups made whose G rewards were all equal (advantage 0 for each)
    prompts_replayed: int = 0  # groups made from a prompt drawn again (generation.prompt_replay)


@ray.remote(num_cpus=0)
class GeneratorReports:
    """The newest GeneratorStats of every generator, which each pushes after its backend calls: the driver reads
    them all in one call a step, instead of asking each of W generators (W calls a step, 21 ms of a step at W=32)."""

    def __init__(self) -> None:
        self._latest: dict[int, GeneratorStats] = {}
        self._samples: dict[int, tuple] = {}

    def put(self, stats: GeneratorStats) -> None:
        self._latest[stats.generator_id] = stats

    def put_samples(self, generator_id: int, rows: tuple) -> None:
        """A generator's newest group as text (run.log_samples_every): kept apart from the stats, which the driver
        reads every step, so the text crosses to the driver only at the steps that log it."""
        self._samples[generator_id] = rows

    def samples(self) -> list[dict]:
        return [row for rows in self._samples.values() for row in rows]

    def forget(self, generator_id: int) -> None:
        """A replaced generator's numbers go; its replacement reports its own."""
        self._latest.pop(generator_id, None)
        self._samples.pop(generator_id, None)

    def all(self) -> dict[int, GeneratorStats]:
        return self._latest

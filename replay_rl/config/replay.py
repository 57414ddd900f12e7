"""Replay storage, its retention (fifo, lifo_once, positive_bias), selector and limits."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from replay_rl.config.adaptive import CapacityScheduleConfig, ReuseControllerConfig
from replay_rl.config.base import _Section


class RateLimitConfig(_Section):
    """Reverb-style samples-per-insert limiter: error = inserts·samples_per_insert − samples stays within ±tolerance."""

    samples_per_insert: float = Field(gt=0)
    """Target replay ratio: samples drawn per rollout inserted (the paper's B/R). 1 uses each rollout once on average."""
    tolerance: float | None = Field(None, gt=0)
    """Band half-width in samples. None: the smallest that cannot deadlock for this batch, insert size and capacity
    (replay/limit_check.py explores every reachable state); a value that can deadlock is rejected with that minimum."""
    min_size_to_sample: int = Field(1, ge=1)
    """Items a shard must hold before it serves any sample."""


class _ReplayCommon(_Section):
    capacity: int = Field(ge=1)
    """N: total rollouts across all shards; each shard holds capacity / learners."""
    sampler: Literal["uniform", "uniform_no_repeat", "least_recent", "fresh_anchored", "abs_advantage",
                     "effective"] = "uniform"
    """How a shard picks a batch (never an item twice in one batch). uniform: the paper, uniform over the buffer;
    uniform_no_repeat: Fig. 18's "no replacement, at least once", never-sampled items first, then uniform over the
    used; least_recent: Fig. 18's "without replacement across steps", never-sampled first, then least recently
    returned, ties at random, so no item repeats before every other has been used since; fresh_anchored: every
    rollout inserted since the shard's previous batch (a uniform subset if more than fit), the rest uniform over
    older items; abs_advantage: priority ∝ |A|; effective: uniform over the rollouts whose frozen advantage is not 0
    (a group with equal rewards carries no GRPO gradient and never takes a slot while enough others are held).
    lifo_once ignores it: it takes the freshest."""
    max_staleness: int | None = Field(None, ge=0)
    """Never return (and evict) items with age = consumer_version − policy_version above this. None: off (paper)."""
    max_reuse: int | None = Field(None, ge=1)
    """Evict an item once it has been sampled this many times. None: off (paper)."""
    rate_limit: RateLimitConfig | None = None
    """Bound samples per insert without cluster.emulate (which derives it). None: no limit."""
    snapshot_every_steps: int | None = Field(25, ge=1)
    """Each shard snapshots itself every k learner steps into RUN/replay_live/, so a shard that dies is restored in
    place (run.max_shard_restarts), losing at most the inserts of k steps. Costs one write of the shard per k steps,
    one at a start from a checkpoint and, before its first sample, one each time an insert doubles what it holds
    or first gives it its rank's batch (a restart then loses at most half of it; one short of a batch that waits
    goes to run.max_restarts). None: no live snapshots, and a shard that dies ends the run (resume from a
    checkpoint)."""
    sample_timeout_s: float = Field(300.0, gt=0)
    """A learner waiting longer than this for enough data fails with the reason it waited."""
    capacity_schedule: CapacityScheduleConfig | None = None
    """Shrink the window each shard samples from over the run, toward the freshest final_capacity (reuse fades).
    None: off (paper)."""
    reuse_controller: ReuseControllerConfig | None = None
    """Scale the window each shard samples from by a per-step signal (a gradient-norm spike shrinks it). None: off."""

    @model_validator(mode="after")
    def _window_needs_a_buffer(self) -> "_ReplayCommon":
        if self.type == "lifo_once" and (self.capacity_schedule or self.reuse_controller):
            raise ValueError("capacity_schedule and reuse_controller narrow what a buffer samples from; lifo_once "
                             "takes the freshest rollouts anyway")
        return self


class FifoReplayConfig(_ReplayCommon):
    type: Literal["fifo"] = "fifo"
    """The paper's buffer: oldest out first, sampling does not remove."""
    capacity: int = Field(1280, ge=1)
    """N: total rollouts across all shards; each shard holds capacity / learners. Ten batches by default: in the
    frontier study (benchmarks/results/frontier) N = B lost at every learning rate, because every batch is then the
    whole buffer and most of it repeats the previous batch (buffer/overlap_prev); N = 10B won."""


class LifoOnceReplayConfig(_ReplayCommon):
    """The paper's no-buffer baseline: freshest first, each rollout used once. capacity bounds the backlog."""

    type: Literal["lifo_once"] = "lifo_once"
    """The paper's baseline: freshest first, every rollout used once."""
    capacity: int = Field(1024, ge=1)
    """Most rollouts waiting to be consumed; beyond it the oldest unconsumed are dropped."""


class PositiveBiasReplayConfig(_ReplayCommon):
    type: Literal["positive_bias"] = "positive_bias"
    """FIFO plus a reserve of δN for correct rollouts that age out of the main FIFO."""
    capacity: int = Field(2560, ge=1)
    """N: total rollouts across all shards, reserve included; each shard holds capacity / learners. 20 batches by
    default: at the default δ = ½ its FIFO part holds the fifo buffer's default, 10B."""
    delta: float = Field(0.5, ge=0, lt=1)
    """δ: share of capacity kept for the freshest correct rollouts that aged out of the main FIFO."""


ReplayConfig = Annotated[
    Union[FifoReplayConfig, LifoOnceReplayConfig, PositiveBiasReplayConfig], Field(discriminator="type")
]

"""Adaptive reuse rules (issue 29), each off by default: a capacity schedule and a signal-driven controller on the
replay shard's sampling window (replay/reuse_window.py), and a trust region on each rollout's importance ratios in
the loss (learner/trust_region.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from replay_rl.config.base import _Section


class CapacityScheduleConfig(_Section):
    """Reuse fades as the run progresses: each shard samples only from its freshest items, a window that shrinks
    linearly from replay.capacity to final_capacity between the fractions start and end of run.steps. Items
    outside the window stay stored (the buffer's contents and snapshots do not change) but are not sampled, so
    late batches are the freshest rollouts: at final_capacity = B a batch is the B newest, consume-once in reach.
    Under cluster.emulate the pace still sets the replay ratio; what fades is how old a reused rollout may be.
    With positive_bias, the δN reserve (older than the main FIFO) is the first to fall outside the window."""

    final_capacity: int | None = Field(None, ge=1)
    """The window at the end of the anneal, total over shards. None: learner.batch_size (N anneals to B). Never
    below a rank's batch per shard, never above replay.capacity."""
    start: float = Field(0.0, ge=0, lt=1)
    """Fraction of run.steps at which the window starts to shrink (before it: replay.capacity)."""
    end: float = Field(1.0, gt=0, le=1)
    """Fraction of run.steps at which the window reaches final_capacity (and stays)."""

    @model_validator(mode="after")
    def _ordered(self) -> "CapacityScheduleConfig":
        if self.end <= self.start:
            raise ValueError(f"end={self.end} must be after start={self.start}")
        return self


class ReuseControllerConfig(_Section):
    """A measured per-step signal scales each shard's sampling window (replay.capacity × scale): a spike shrinks
    it (less reuse of old rollouts), a calm stretch grows it back. A spike is a z-score above z_high against the
    signal's recent calm values (as DGG's lm_head gradient-norm spike); the scale grows after `patience` steps in a
    row below z_low (hysteresis), within [min_scale, 1]. The learner ranks send the signal with their next sample
    call. Composes with capacity_schedule (the window is their product). A shard restored in place (or a resumed
    run) starts its controller afresh, at scale 1."""

    signal: Literal["grad_norm", "entropy_drop"] = "grad_norm"
    """grad_norm: the step's global gradient norm before clipping (DGG). entropy_drop: the batch entropy's fall
    since the previous step (replayed data sharpening the policy faster than usual)."""
    window: int = Field(20, ge=2)
    """Calm values (non-spikes) the z-score's mean and standard deviation are taken over."""
    warmup: int = Field(5, ge=2)
    """Values needed before any decision; before that the scale holds at 1."""
    z_high: float = Field(3.0, gt=0)
    """A z-score above this is a spike: the scale is multiplied by `down`."""
    z_low: float = 1.0
    """A z-score below this counts as calm; `patience` calm steps in a row multiply the scale by `up`."""
    patience: int = Field(5, ge=1)
    """Calm steps in a row before the scale grows."""
    down: float = Field(0.5, gt=0, lt=1)
    """Factor on the scale at a spike."""
    up: float = Field(1.25, gt=1)
    """Factor on the scale after `patience` calm steps."""
    min_scale: float = Field(0.1, gt=0, le=1)
    """Smallest scale; the window also never falls below a rank's batch."""

    @model_validator(mode="after")
    def _hysteresis(self) -> "ReuseControllerConfig":
        if self.z_low >= self.z_high:
            raise ValueError(f"z_low={self.z_low} must be below z_high={self.z_high}")
        if self.warmup > self.window:
            raise ValueError(f"warmup={self.warmup} must be at most window={self.window}")
        return self


class TrustRegionConfig(_Section):
    """Mask from the loss every rollout whose current importance ratios ρ = π_θ/π_behaviour left a trust region,
    so staleness is measured in policy distance, not in steps. Per rollout: M2 = mean over its tokens of (log ρ)²
    (M2PO's second moment, per rollout) and ESS = (Σρ)²/(n·Σρ²) over its n tokens. A masked rollout's tokens get
    weight 0 but still count in the loss's normaliser (as correction=mis). Set one bound or both."""

    max_m2: float | None = Field(None, gt=0)
    """Mask a rollout whose M2 exceeds this. M2PO bounds the batch's M2 at 0.04. None: no M2 bound."""
    min_ess: float | None = Field(None, gt=0, le=1)
    """Mask a rollout whose token ESS falls below this (1: all ratios equal). None: no ESS bound."""

    @model_validator(mode="after")
    def _a_bound(self) -> "TrustRegionConfig":
        if self.max_m2 is None and self.min_ess is None:
            raise ValueError("set max_m2, min_ess or both (or leave trust_region null)")
        return self

"""The window a shard samples from: its freshest `size` eligible items, set each learner version by the adaptive
reuse rules (replay.capacity_schedule, replay.reuse_controller). Items outside it stay stored, so the Table's
contents, counters and snapshots are those of the buffer without the rules; only what a batch may contain narrows.
No Ray: the shard actor calls `observe` with each sample call's consumer version and the learner's feedback."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from replay_rl.replay.reuse_controller import SpikeController
from replay_rl.replay.selectors import Selector, SlotMeta
from replay_rl.replay.table import Table


def scheduled_capacity(initial: float, final: float, start: float, end: float, progress: float) -> float:
    """The schedule's capacity at `progress` (fraction of the run): `initial` until start, linear to `final` at
    end, `final` after."""
    t = min(max((progress - start) / (end - start), 0.0), 1.0)
    return initial + (final - initial) * t


@dataclass(frozen=True)
class ScheduleSpec:
    """replay.capacity_schedule for one shard: the window shrinks from its capacity to `final` between the
    fractions start and end of the run."""
    start: float
    end: float
    final: float  # a shard's share of final_capacity (learner.batch_size when that is None)


@dataclass(frozen=True)
class ControllerSpec:
    """replay.reuse_controller: the signal it reads and SpikeController's settings."""
    signal: str
    window: int
    warmup: int
    z_high: float
    z_low: float
    patience: int
    down: float
    up: float
    min_scale: float


@dataclass(frozen=True)
class WindowSpec:
    """One shard's window as plain numbers (config/replay_specs.py makes it from a RunConfig): at least one rule."""
    shards: int     # cluster.learners, to report totals over shards
    steps: int      # run.steps: the schedule's progress is consumer_version / steps
    capacity: int   # the shard's share of replay.capacity: the window before the rules narrow it
    floor: int      # a rank's batch: a sample never waits on the window
    schedule: ScheduleSpec | None = None
    controller: ControllerSpec | None = None


class ReuseWindow:
    """One shard's window, set by the rules `spec` holds."""

    def __init__(self, spec: WindowSpec) -> None:
        self.shards, self.steps, self.capacity, self.floor = spec.shards, spec.steps, spec.capacity, spec.floor
        self.schedule, c = spec.schedule, spec.controller
        self.signal = c.signal if c else None
        self.controller = (SpikeController(c.window, c.warmup, c.z_high, c.z_low, c.patience, c.down, c.up,
                                           c.min_scale) if c else None)
        self.size, self.version, self.metrics = self.capacity, -1, {}
        self.last_entropy = math.nan

    def observe(self, consumer_version: int, feedback: dict[str, float]) -> dict[str, float]:
        """Set the window for `consumer_version` from the learner's feedback on its previous step (its grad_norm
        and entropy); returns the rules' signals and actions (reuse/*). Once per version: a call made again
        (draw-ahead, a restarted shard's replayed call) gets the same answer."""
        if consumer_version <= self.version:
            return self.metrics
        self.version, out = consumer_version, {}
        size = float(self.capacity)
        if s := self.schedule:
            progress = consumer_version / self.steps
            size = scheduled_capacity(self.capacity, s.final, s.start, s.end, progress)
            out |= {"reuse/progress": progress, "reuse/schedule_capacity": size * self.shards}
        if self.controller:
            value = self._signal(feedback)
            decision = self.controller.update(value)
            size *= decision.scale
            out |= {f"reuse/{self.signal}": value, "reuse/signal_z": decision.z,
                    "reuse/controller_scale": decision.scale, "reuse/controller_action": float(decision.action)}
        self.size = int(min(max(round(size), self.floor), self.capacity))
        self.metrics = out | {"reuse/capacity": float(self.size * self.shards)}
        return self.metrics

    def _signal(self, feedback: dict[str, float]) -> float:
        if self.signal == "grad_norm":
            return feedback.get("grad_norm", math.nan)  # the first sample call has no step behind it
        entropy = feedback.get("entropy", math.nan)
        drop, self.last_entropy = self.last_entropy - entropy, entropy
        return drop


class WindowedSelector:
    """A selector that picks from the window's freshest eligible items only (eligible comes oldest first)."""

    def __init__(self, inner: Selector, window: ReuseWindow) -> None:
        self.inner, self.window = inner, window

    def select(self, meta: SlotMeta, eligible: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.inner.select(meta, eligible[-self.window.size:], n, rng)


def with_window(table: Table, window: ReuseWindow | None) -> Table:
    """`table`, sampling through `window` when a rule sets one (None: the rules are off)."""
    if window is not None:
        table.selector = WindowedSelector(table.selector, window)
    return table


"""The window a shard samples from: its freshest `size` eligible items, set each learner version by the adaptive
reuse rules (replay.capacity_schedule, replay.reuse_controller). Items outside it stay stored, so the Table's
contents, counters and snapshots are those of the buffer without the rules; only what a batch may contain narrows.
No Ray: the shard actor calls `observe` with each sample call's consumer version and the learner's feedback."""

from __future__ import annotations

import math

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.replay.reuse_controller import SpikeController
from replay_rl.replay.selectors import Selector, SlotMeta
from replay_rl.replay.table import Table


def scheduled_capacity(initial: float, final: float, start: float, end: float, progress: float) -> float:
    """The schedule's capacity at `progress` (fraction of the run): `initial` until start, linear to `final` at
    end, `final` after."""
    t = min(max((progress - start) / (end - start), 0.0), 1.0)
    return initial + (final - initial) * t


class ReuseWindow:
    """One shard's window. shard_capacity: its share of replay.capacity; floor: a rank's batch (a sample never
    waits on the window); shards: cluster.learners, to report totals over shards."""

    def __init__(self, cfg: RunConfig) -> None:
        self.shards, self.steps = cfg.cluster.learners, cfg.run.steps
        self.capacity, self.floor = cfg.shard_capacity, cfg.rank_batch_size
        self.schedule, c = cfg.replay.capacity_schedule, cfg.replay.reuse_controller
        self.final = (self.schedule.final_capacity or cfg.learner.batch_size) / self.shards if self.schedule else 0
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
        if self.schedule:
            progress = consumer_version / self.steps
            size = scheduled_capacity(self.capacity, self.final, self.schedule.start, self.schedule.end, progress)
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
    """`table`, sampling through `window` when the config has a rule that sets one."""
    if window is not None:
        table.selector = WindowedSelector(table.selector, window)
    return table


def window_for(cfg: RunConfig) -> ReuseWindow | None:
    r = cfg.replay
    return ReuseWindow(cfg) if r.capacity_schedule or r.reuse_controller else None

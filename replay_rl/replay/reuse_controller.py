"""SpikeController: a pure policy that turns a per-step signal into a reuse scale (replay.reuse_controller).

No Ray, no config objects: it sees one number a step and answers a Decision, so a hand-made sequence tests it.
A value whose z-score against the recent calm values exceeds z_high is a spike: the scale shrinks by `down` and
the spike stays out of the reference (it would widen the band that detects the next one). `patience` steps in a
row below z_low grow the scale by `up`; values in between hold it (the hysteresis band).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

SHRINK, HOLD, GROW = -1, 0, 1


@dataclass(frozen=True)
class Decision:
    z: float      # the value's z-score against the calm reference; 0 before `warmup` values
    scale: float  # the reuse scale after this step, in [min_scale, max_scale]
    action: int   # SHRINK, HOLD or GROW


class SpikeController:
    def __init__(self, window: int, warmup: int, z_high: float, z_low: float, patience: int, down: float, up: float,
                 min_scale: float, max_scale: float = 1.0) -> None:
        self.calm_values: deque[float] = deque(maxlen=window)
        self.warmup, self.z_high, self.z_low, self.patience = warmup, z_high, z_low, patience
        self.down, self.up, self.min_scale, self.max_scale = down, up, min_scale, max_scale
        self.scale, self.calm_steps = max_scale, 0

    def update(self, value: float) -> Decision:
        if not math.isfinite(value):  # no signal this step (a NaN grad norm, the first step's entropy drop)
            return Decision(0.0, self.scale, HOLD)
        if len(self.calm_values) < self.warmup:
            self.calm_values.append(value)
            return Decision(0.0, self.scale, HOLD)
        z = self.z_score(value)
        if z > self.z_high:  # at min_scale already, a spike is only seen in z
            scale, self.calm_steps = max(self.min_scale, self.scale * self.down), 0
            action, self.scale = SHRINK if scale < self.scale else HOLD, scale
            return Decision(z, self.scale, action)
        self.calm_values.append(value)
        self.calm_steps = self.calm_steps + 1 if z < self.z_low else 0
        if self.calm_steps >= self.patience and self.scale < self.max_scale:
            self.scale, self.calm_steps = min(self.max_scale, self.scale * self.up), 0
            return Decision(z, self.scale, GROW)
        return Decision(z, self.scale, HOLD)

    def z_score(self, value: float) -> float:
        n = len(self.calm_values)
        mean = sum(self.calm_values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in self.calm_values) / n)
        # a flat history (std 0) would make any change infinite: floor the spread at 1e-3 of the mean's size
        return (value - mean) / max(std, 1e-3 * abs(mean), 1e-12)

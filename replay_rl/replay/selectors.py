"""Selectors: which eligible slots a sample returns. Pure functions of the slot metadata, called under the Table's
lock. Every selector returns n distinct slots (no replacement within one batch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class SlotMeta:
    """Per-slot metadata arrays of one Table (length = shard capacity). policy_version and advantage are views of
    the Table's per-row scalar arrays, not copies."""

    alive: np.ndarray           # bool: slot holds an item
    seq: np.ndarray             # int64: insertion order (larger = fresher)
    policy_version: np.ndarray  # int64: oldest weights version that produced the rollout
    times_sampled: np.ndarray   # int32: reuse so far
    advantage: np.ndarray       # float32
    last_sampled: np.ndarray    # int64: consumer_version of the last sample that returned it, −1 if never


class Selector(Protocol):
    def select(self, meta: SlotMeta, eligible: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray: ...


class Uniform:
    """The paper's sampler: uniform over the buffer, without replacement within a batch, items stay."""

    def select(self, meta, eligible, n, rng):
        return rng.choice(eligible, size=n, replace=False)


class Freshest:
    """LIFO: the n most recently inserted items (the paper's no-buffer baseline consumes this way)."""

    def select(self, meta, eligible, n, rng):
        return eligible[np.argsort(-meta.seq[eligible], kind="stable")[:n]]


class UniformNoRepeat:
    """Fig. 18's "no replacement, at least once": never-sampled items first, the rest uniform among the used."""

    def select(self, meta, eligible, n, rng):
        fresh = eligible[meta.times_sampled[eligible] == 0]
        if len(fresh) >= n:
            return rng.choice(fresh, size=n, replace=False)
        used = eligible[meta.times_sampled[eligible] > 0]
        return np.concatenate([rng.permutation(fresh), rng.choice(used, size=n - len(fresh), replace=False)])


class AbsAdvantage:
    """Priority ∝ |advantage| + floor, without replacement; zero-advantage items keep a small chance."""

    def __init__(self, floor: float = 1e-2) -> None:
        self.floor = floor

    def select(self, meta, eligible, n, rng):
        w = np.abs(meta.advantage[eligible]).astype(np.float64) + self.floor
        return rng.choice(eligible, size=n, replace=False, p=w / w.sum())


def make_selector(name: str) -> Selector:
    match name:
        case "uniform":
            return Uniform()
        case "uniform_no_repeat":
            return UniformNoRepeat()
        case "abs_advantage":
            return AbsAdvantage()
        case "freshest":
            return Freshest()
    raise ValueError(f"replay.sampler: unknown sampler {name!r}")

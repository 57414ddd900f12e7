"""Selectors: which eligible slots a sample returns. Pure functions of the slot metadata, called under the Table's
lock. Every selector returns n distinct slots (no replacement within one batch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class SlotMeta:
    """Per-slot metadata arrays of one Table (length = shard capacity), plus one scalar. policy_version and
    advantage are views of the Table's per-row scalar arrays, not copies."""

    alive: np.ndarray           # bool: slot holds an item
    seq: np.ndarray             # int64: insertion order (larger = fresher)
    policy_version: np.ndarray  # int64: oldest weights version that produced the rollout
    times_sampled: np.ndarray   # int32: reuse so far
    advantage: np.ndarray       # float32
    last_sampled: np.ndarray    # int64: consumer_version of the last sample that returned it, −1 if never
    fresh_from_seq: int = 0     # items with seq ≥ this were inserted after the Table's previous sample call


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


def _all_then_uniform(first: np.ndarray, rest: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Every slot of `first` (a uniform n-subset if it has more), then uniform over `rest` for what is left."""
    if len(first) >= n:
        return rng.choice(first, size=n, replace=False)
    return np.concatenate([rng.permutation(first), rng.choice(rest, size=n - len(first), replace=False)])


class UniformNoRepeat:
    """Fig. 18's "no replacement, at least once": never-sampled items first, the rest uniform among the used."""

    def select(self, meta, eligible, n, rng):
        used = meta.times_sampled[eligible] > 0
        return _all_then_uniform(eligible[~used], eligible[used], n, rng)


class LeastRecent:
    """Fig. 18's "without replacement across steps": the n eligible items returned least recently, i.e. never
    returned first (last_sampled = −1), then by smallest last_sampled, ties broken uniformly at random. With no
    inserts, an item is not returned again until every other eligible item has been returned since: the buffer is
    walked in cycles. Recency is the consumer_version, so this is exact when each call has its own version (the
    trainer samples each shard once per learner step); calls that share a version tie."""

    def select(self, meta, eligible, n, rng):
        order = np.lexsort((rng.random(len(eligible)), meta.last_sampled[eligible]))  # random keys break ties
        return eligible[order[:n]]


class FreshAnchored:
    """Every eligible item inserted since the previous sample call (seq ≥ fresh_from_seq; a uniform n-subset if
    there are more than n), the rest of the batch uniform over the other eligible items."""

    def select(self, meta, eligible, n, rng):
        fresh = meta.seq[eligible] >= meta.fresh_from_seq
        return _all_then_uniform(eligible[fresh], eligible[~fresh], n, rng)


class AbsAdvantage:
    """Priority ∝ |advantage| + floor, without replacement; zero-advantage items keep a small chance."""

    def __init__(self, floor: float = 1e-2) -> None:
        self.floor = floor

    def select(self, meta, eligible, n, rng):
        w = np.abs(meta.advantage[eligible]).astype(np.float64) + self.floor
        return rng.choice(eligible, size=n, replace=False, p=w / w.sum())


class Effective:
    """Effective-group replay: uniform over the items that carry a gradient (frozen advantage ≠ 0), so a group whose
    rewards were all equal never takes a batch slot while the buffer holds enough that teach; when it holds fewer
    than n, all of those and the rest uniform over the others (batch/zero_variance_share then reads the shortfall)."""

    def select(self, meta, eligible, n, rng):
        teaches = meta.advantage[eligible] != 0
        return _all_then_uniform(eligible[teaches], eligible[~teaches], n, rng)


def make_selector(name: str) -> Selector:
    match name:
        case "uniform":
            return Uniform()
        case "uniform_no_repeat":
            return UniformNoRepeat()
        case "least_recent":
            return LeastRecent()
        case "fresh_anchored":
            return FreshAnchored()
        case "abs_advantage":
            return AbsAdvantage()
        case "effective":
            return Effective()
        case "freshest":
            return Freshest()
    raise ValueError(f"replay.sampler: unknown sampler {name!r}")

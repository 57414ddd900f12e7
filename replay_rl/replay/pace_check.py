"""Can the emulated pace stall? Decided by walking the states the real rules reach: limits.Pace (budget, may_start,
owed) and limits.route, imported, never re-implemented here. Pure numpy; no Ray.

At learner version v (the step that updates weights of v waits to sample), generators hold the newest published
weights p = v − v mod k (sync.every_steps = k) and, once they catch up, have made every call Pace.may_start allows
at p: a prefix of the call numbering, each call dealt over the shards by route. The learner steps once every shard
holds its Pace.owed(v) and n = B/T eligible items; if one does not, both sides wait for ever: a stall. Making every
allowed call before the learner samples is the worst order: inserts only add to what a shard holds, except in a
consume-once queue, where an early insert can push out (FIFO eviction) a rollout the pace counted as delivered.

Modelled: fifo and positive_bias (sampling keeps items: a shard holds min(inserted, capacity)) and lifo_once
(sampling removes n; a full queue evicts its oldest). Not modelled: max_staleness and max_reuse (as limit_check),
restarts and resumes (a restored shard forgives what it lost: PacedLimiter.recover).

Why finite work decides it. route deals any W generators' calls in a pattern that repeats every P = W·T·rpc
rollouts. A keep-all shard has no history: its state at v is (⌈required(v)⌉, calls made at p), so besides walking
the setting's own versions, the check sweeps every whole number of owed rollouts over one period P, each with the
least budget a version owed it can have (its publish k − 1 versions before): every state any μ (any R) reaches.
A consume-once queue carries its item count over, but R = B is whole there, so its state repeats every
P / gcd(P, B) versions, and walking two such periods covers it. Under the shipped rules no owed count can go
unpaid: may_start makes the calls cover ⌈budget⌉ ≥ ⌈required⌉ rollouts of one stream, and a shard's deal of a
prefix only grows with it. The check holds the code to that argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from replay_rl.replay.limits import Pace, route

MAX_VERSIONS = 4096  # beyond this horizon a setting is accepted, and the stall watchdog is the backstop


@dataclass(frozen=True)
class PaceSetting:
    generators: int            # W: generator actors; calls are numbered round-robin over them
    shards: int                # T: learner ranks, one replay shard each
    batch_size: int            # B, over all ranks
    capacity: int              # N, over all shards
    rollouts_per_call: int
    replay_ratio: float        # μ·T/W of the emulated cluster; 1 for a consume-once queue
    lead_steps: int
    consumes_once: bool        # lifo_once: sampling removes items
    publish_every: int = 1     # sync.every_steps

    def pace(self) -> Pace:
        return Pace(self.batch_size, self.replay_ratio, self.lead_steps, self.consumes_once, self.capacity,
                    self.publish_every)


@dataclass(frozen=True)
class Stall:
    version: float  # the learner waits to update weights of this version (step version + 1); fractional from
                    # the sweep: a version some other μ reaches
    shard: int
    inserted: int   # rollouts dealt to the shard so far
    owed: int       # Pace.owed for this shard and version
    holds: int      # eligible items it holds (a rank samples batch_size / shards)


def pace_setting(cfg) -> PaceSetting | None:
    """What the pace of a RunConfig is made of; None when generators run free (no cluster.emulate)."""
    e, c = cfg.cluster.emulate, cfg.cluster
    if e is None:
        return None
    return PaceSetting(c.generators, c.learners, cfg.learner.batch_size, cfg.replay.capacity,
                       cfg.generation.rollouts_per_call, cfg.target_replay_ratio, e.lead_steps, cfg.consumes_once,
                       cfg.sync.every_steps)


def horizon(s: PaceSetting, pace: Pace) -> int:
    """Versions to walk: two periods of the state (see the module docstring), capped at MAX_VERSIONS."""
    period, r = s.generators * s.shards * s.rollouts_per_call, pace.rollouts_per_step  # rollouts; per step
    versions = period // math.gcd(period, int(r)) if r == int(r) else math.ceil(period / r)
    return min(MAX_VERSIONS, 2 * versions + s.publish_every + s.lead_steps + 2)


def calls_made(pace: Pace, rollouts_per_call: int, published: np.ndarray) -> np.ndarray:
    """Per published version, how many calls may_start allows (they form a prefix: bisect on it)."""
    lo = np.zeros(len(published), np.int64)
    hi = np.full(len(published), int(np.max(pace.budget(published))) // rollouts_per_call + 2, np.int64)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        ok = pace.may_start(mid, rollouts_per_call, published)
        lo, hi = np.where(ok, mid + 1, lo), np.where(ok, hi, mid)
    return lo


def find_stall(s: PaceSetting) -> Stall | None:
    """A version at which some shard cannot serve its rank however long it waits, or None."""
    pace, k = s.pace(), s.publish_every
    versions = np.arange(horizon(s, pace), dtype=float)
    stall = _first_stall(s, pace, versions, versions - versions % k)
    if stall is not None or s.consumes_once:
        return stall
    # every whole number of owed rollouts over a period (just above it: the fewest calls), k − 1 versions after
    # its publish; owed() rounds required up past 1e-9, so 2e-9 above m − 1 is owed m
    period = min(s.generators * s.shards * s.rollouts_per_call, MAX_VERSIONS * 4)
    owed = np.ceil(pace.required(0)) + np.arange(period)
    versions = (owed - 1 + 2e-9 - pace.fill) / pace.rollouts_per_step - 1
    return _first_stall(s, pace, versions, versions - (k - 1))


def _first_stall(s: PaceSetting, pace: Pace, versions: np.ndarray, published: np.ndarray) -> Stall | None:
    t, n = s.shards, s.batch_size // s.shards
    made = calls_made(pace, s.rollouts_per_call, published)
    call = np.arange(int(made.max()))
    owners = route(call % s.generators, call // s.generators, s.generators, s.rollouts_per_call, t)  # (calls, rpc)
    per_call = (owners[:, :, None] == np.arange(t)).sum(axis=1)  # (calls, T) rollouts each call deals each shard
    inserted = np.vstack([np.zeros((1, t), np.int64), np.cumsum(per_call, axis=0)])[made]  # (versions, T)
    owed = pace.owed(np.arange(t), t, versions[:, None])
    holds = _holds(inserted, s.capacity // t, n) if s.consumes_once else np.minimum(inserted, s.capacity // t)
    bad = (inserted < owed) | (holds < n)
    if not bad.any():
        return None
    v, shard = np.argwhere(bad)[0]
    return Stall(float(versions[v]), int(shard), int(inserted[v, shard]), int(owed[v, shard]), int(holds[v, shard]))


def _holds(inserted: np.ndarray, capacity: int, n: int) -> np.ndarray:
    """A consume-once queue's items before each version's sample: what arrived, capped (the oldest evicted),
    less the n the previous samples removed."""
    holds, alive, before = np.zeros_like(inserted), np.zeros(inserted.shape[1], np.int64), inserted[0] * 0
    for v, now in enumerate(inserted):
        alive = np.minimum(capacity, alive + now - before)
        holds[v], before = alive, now
        if (alive < n).any():
            return holds  # the rest is never reached
        alive = alive - n
    return holds


def smallest_safe_capacity(s: PaceSetting) -> int | None:
    """The smallest replay.capacity (a multiple of T, above s.capacity) at which the pace cannot stall, if one
    exists below B·(lead_steps + publish_every) + 2·rpc: room for every lead, one publish's steps and a call."""
    ceiling = s.batch_size * (s.lead_steps + s.publish_every) + 2 * s.rollouts_per_call + s.shards
    for capacity in range((s.capacity // s.shards + 1) * s.shards, ceiling + 1, s.shards):
        if find_stall(PaceSetting(**{**s.__dict__, "capacity": capacity})) is None:
            return capacity
    return None


def pace_problem(cfg) -> str | None:
    """One line naming the field and the fix when the emulated pace can stall, else None."""
    s = pace_setting(cfg)
    stall = find_stall(s) if s is not None else None
    if stall is None:
        return None
    fix, v = smallest_safe_capacity(s), stall.version
    where = f"step {int(v) + 1}" if v == int(v) else f"a step another μ reaches (version {v:.2f})"
    return (f"replay.capacity: {s.capacity} stalls the emulated pace at {where} (shard "
            f"{stall.shard}: {stall.inserted} inserted, {stall.owed} owed, {stall.holds} eligible of the "
            f"{s.batch_size // s.shards} its rank samples"
            + ("; a consume-once queue this small evicts rollouts the pace counts as delivered" if s.consumes_once
               else "") + ")" + (f"; use capacity ≥ {fix}" if fix else "; no capacity up to B·(lead_steps + "
                                 "sync.every_steps) avoids it: lower cluster.emulate.lead_steps or sync.every_steps"))

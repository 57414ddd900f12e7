"""Can the emulated pace stall? Decided by walking the states the real rules reach: limits.Pace (budget, may_start,
owed) and limits.route, imported, never re-implemented here. Pure numpy; no Ray.

At learner version v (the step that updates weights of v waits to sample), generators hold the newest published
weights p = v − v mod k (sync.every_steps = k) and, once they catch up, have made every call Pace.may_start allows
at p: a prefix of the call numbering, each call dealt over the shards by route. The learner steps once every shard
holds its Pace.owed(v) and n = B/T eligible items; if one does not, both sides wait for ever: a stall. Making every
allowed call before the learner samples is the worst order: inserts only add to what a shard holds, except in a
consume-once queue, where an early insert can push out (FIFO eviction) a rollout the pace counted as delivered.

Modelled: fifo and positive_bias (sampling keeps items: a shard holds min(inserted, capacity)) and lifo_once
(sampling removes n; a full queue evicts its oldest). Not modelled: max_staleness and max_reuse (as limit_check).
An in-place restore (PacedLimiter.recover) is checked apart, by random runs (restore_run): a keep-all shard
cannot stall after one; a consume-once queue can (it lost rollouts that are made once), and the stall watchdog
sends that to run.max_restarts (health.hung_roles). Each run also measures the restored shard's surplus: what
its limiter counts beyond the rollouts dealt to it by the calls started, which loosens the pace for the rest of
the run.

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
from pathlib import Path
from typing import Callable

import numpy as np

from replay_rl.replay.limits import Pace, PacedLimiter, call_number, route
from replay_rl.replay.live import LiveSnapshots

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
                    self.publish_every, self.rollouts_per_call)


@dataclass(frozen=True)
class Stall:
    version: float  # the learner waits to update weights of this version (step version + 1); fractional from
                    # the sweep: a version some other μ reaches
    shard: int
    inserted: int   # rollouts dealt to the shard so far
    owed: int       # Pace.owed for this shard and version
    holds: int      # eligible items it holds (a rank samples batch_size / shards)


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


def pace_problem(s: PaceSetting | None) -> str | None:
    """One line naming the field and the fix when the emulated pace can stall, else None (also without a pace)."""
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


@dataclass(frozen=True)
class RestoreRun:
    stall: int | None  # the version where nothing can move, or None
    surplus: int       # the restored shard's count past its deal of the calls started (PacedLimiter.inserts)
    in_flight: int     # of its rollouts, those in flight at the restore (resent to the restart)


def calls_credit(limiter: PacedLimiter, version: int, calls: list[int]) -> None:
    """The shipped credit: the driver sends the calls started at the restore (Supervisor.recover_shard)."""
    limiter.recover(None, calls)


def restore_run(s: PaceSetting, versions: int, restore_at: int, rng: np.random.Generator, snapshot_every: int = 25,
                resumed_at: int | None = None, snapshot_on_resume: bool = True,
                credit: Callable[[PacedLimiter, int, list[int]], None] = calls_credit) -> RestoreRun:
    """One in-place restore under a random interleaving, on the real PacedLimiter (recover included): generators
    start the calls may_start allows and insert each shard's piece later (in flight meanwhile; Ray resends a
    dead shard's pieces to its restart); the learner samples once every shard is paid and holds n items; while the
    learner is at `restore_at`, a random shard restarts from its live snapshot (taken before the sample of every
    multiple of snapshot_every, at the inserts LiveSnapshots.due_on_insert asks for until the first, and, the run
    resumed at `resumed_at`, then
    (snapshot_on_resume; else a resume clears them); a consume-once queue drops the keys it served since, as
    LiveSnapshots does). The restore comes at a random moment or, in half the runs, once the generators made every
    call allowed (the most lost). credit(limiter, version, calls) credits the restored shard at its first sample
    for `version`, with the calls each generator had started at the restore."""

    t, n, cap, pace, rpc = s.shards, s.batch_size // s.shards, s.capacity // s.shards, s.pace(), s.rollouts_per_call
    limiters, items = [PacedLimiter(pace, i, t) for i in range(t)], [[] for _ in range(t)]
    snaps: list = [None] * t           # (items, inserts) of each live snapshot
    early = [True] * t                 # no snapshot at a sample or resume yet: inserts are (due_on_insert)
    live = [LiveSnapshots(1, Path("unused"), batch=n) for _ in range(t)]  # its insert rule only: it writes nothing
    served: list[set] = [set() for _ in range(t)]
    recovering, pending, made, next_id, v, restored = [False] * t, [], [0] * s.generators, 0, 0, False
    dealt, calls_then, in_flight = [0] * t, [], 0  # rollouts each shard was dealt by the calls started
    resumed, late = False, rng.random() < 0.5
    while v < versions:
        published = v - v % s.publish_every
        ready = [g for g in range(s.generators) if pace.may_start(call_number(g, made[g], s.generators), rpc,
                                                                  published)]
        if v == resumed_at and not resumed:  # a resume: a fresh shard clears the old snapshots, its restore writes
            resumed, served, early = True, [set() for _ in items], [False] * t
            snaps = [(list(it), lim.inserts) if snapshot_on_resume else None for it, lim in zip(items, limiters)]
        if v == restore_at and not restored and ((not late and rng.random() < 0.2) or not (pending or ready)):
            i, restored = int(rng.integers(t)), True
            held, inserts = snaps[i] or ([], 0)
            items[i] = [x for x in held if x not in served[i]]
            limiters[i], recovering[i], early[i] = PacedLimiter(pace, i, t), True, True
            live[i] = LiveSnapshots(1, Path("unused"), batch=n)
            limiters[i].inserts = inserts
            limiters[i].restored()
            calls_then, in_flight, back = list(made), sum(len(p) for j, p, _ in pending if j == i), i
        for i in range(t):  # the learner asks every shard for v; a restored one learns v then
            if recovering[i]:
                credit(limiters[i], v, calls_then)
                recovering[i] = False
        learner = all(lim.can_sample(n, v) and len(it) >= n for lim, it in zip(limiters, items))
        learner = learner and (v != restore_at or restored)
        moves = [m for m, ok in (("start", ready), ("insert", pending), ("sample", learner)) if ok]
        if not moves:
            return RestoreRun(v, limiters[back].inserts - dealt[back] if restored else 0, in_flight)
        move = moves[rng.integers(len(moves))]
        if move == "start":
            g = ready[rng.integers(len(ready))]
            owner, call = route(g, made[g], s.generators, rpc, t), call_number(g, made[g], s.generators)
            for i in range(t):
                if k := int((owner == i).sum()):
                    pending.append((i, list(range(next_id, next_id + k)), call))
                    next_id, dealt[i] = next_id + k, dealt[i] + k
            made[g] += 1
        elif move == "insert":
            i, new, call = pending.pop(int(rng.integers(len(pending))))
            items[i] = (items[i] + new)[-cap:]  # FIFO eviction of the oldest
            limiters[i].record(inserts=len(new))
            limiters[i].inserted(call, len(new))
            if early[i] and live[i].due_on_insert(len(items[i])):
                snaps[i], served[i] = (list(items[i]), limiters[i].inserts), set()
        else:
            for i in range(t):
                if v % snapshot_every == 0 or early[i]:  # a restored shard writes again at its first sample
                    snaps[i], served[i], early[i] = (list(items[i]), limiters[i].inserts), set(), False
                if s.consumes_once:  # lifo_once serves the freshest n and removes them
                    served[i] |= set(items[i][-n:])
                    items[i] = items[i][:-n]
            v += 1
    return RestoreRun(None, limiters[back].inserts - dealt[back] if restored else 0, in_flight)


def restore_stalls(s: PaceSetting, cases: int, versions: int, seed: int = 0, **kw) -> list[tuple[int, int, int]]:
    """(case, restore version, stall version) of each of `cases` random runs (restore_run, the restore at a
    random version below `versions`) that stalls."""
    rng = np.random.default_rng(seed)
    out = []
    for case in range(cases):
        at = int(rng.integers(versions))
        if (stall := restore_run(s, versions, at, rng, **kw).stall) is not None:
            out.append((case, at, stall))
    return out

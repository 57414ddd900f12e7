"""Table = storage + selector + retention + limits, for one shard. Owns no thread or lock: the shard actor
serialises calls. Paper modes are presets: `Table.fifo`, `Table.lifo_once`, `Table.positive_bias`.

Storage keeps each inserted RolloutBatch whole (a "chunk") and maps slots to (chunk, row), so inserts are O(1)
array work and a sample is a few vectorised gathers; a chunk is freed when its last row leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from replay_rl.replay.limits import Pace, PacedLimiter, RateLimiter, Unlimited
from replay_rl.replay.retention import FifoRetention, PositiveBiasRetention, Retention
from replay_rl.replay.selectors import Freshest, Selector, SlotMeta, make_selector
from replay_rl.replay.table_stats import HIST_BINS, SampleInfo, TableStats, bump
from replay_rl.rollout import ROW_FIELDS, RolloutBatch, pack_ragged

class Table:
    def __init__(self, capacity: int, selector: Selector, retention: Retention, *, remove_on_sample: bool = False,
                 max_staleness: int | None = None, max_reuse: int | None = None,
                 limiter: RateLimiter | PacedLimiter | Unlimited | None = None, seed: int = 0, key_offset: int = 0,
                 key_stride: int = 1) -> None:
        self.capacity, self.selector, self.retention = capacity, selector, retention
        self.remove_on_sample, self.max_staleness, self.max_reuse = remove_on_sample, max_staleness, max_reuse
        self.limiter = limiter or Unlimited()
        self.rng = np.random.default_rng(seed)
        # keys are unique across shards: shard i of T issues i, i+T, i+2T, ...
        self._next_key, self._key_stride, self._next_seq = key_offset, key_stride, 0
        # one spare slot: a new item is placed first, then the retention policy evicts back down to capacity
        slots = capacity + 1
        z = lambda dt: np.zeros(slots, dt)  # noqa: E731
        # per-row scalars live slot-wise, so a sample gathers them with one fancy index per field
        self._scalars = {k: z(dt) for k, dt in ROW_FIELDS.items() if k != "times_sampled"}
        self.meta = SlotMeta(z(bool), z(np.int64), self._scalars["policy_version"], z(np.int32),
                             self._scalars["advantage"], np.full(slots, -1, np.int64))
        self.keys, self._chunk, self._row = z(np.int64), z(np.int64), z(np.int64)
        self._free = list(range(slots - 1, -1, -1))
        self._chunks: dict[int, RolloutBatch] = {}
        self._refs: dict[int, int] = {}
        self._next_chunk = 0
        self.stats_ = TableStats(capacity=capacity)

    # ------------------------------------------------------------------ presets (the paper's modes)
    @classmethod
    def fifo(cls, capacity: int, sampler: str = "uniform", **kw: Any) -> "Table":
        return cls(capacity, make_selector(sampler), FifoRetention(capacity), **kw)

    @classmethod
    def lifo_once(cls, capacity: int, **kw: Any) -> "Table":
        return cls(capacity, Freshest(), FifoRetention(capacity), remove_on_sample=True, **kw)

    @classmethod
    def positive_bias(cls, capacity: int, delta: float, sampler: str = "uniform", **kw: Any) -> "Table":
        return cls(capacity, make_selector(sampler), PositiveBiasRetention(capacity, delta), **kw)

    # ------------------------------------------------------------------ operations
    def __len__(self) -> int:
        return int(self.meta.alive.sum())

    def can_insert(self, n: int) -> bool:
        return self.limiter.can_insert(n)

    def insert(self, batch: RolloutBatch) -> np.ndarray:
        """Store every row (evicting per the retention policy); returns the new keys."""
        n = len(batch)
        keys = self._next_key + self._key_stride * np.arange(n, dtype=np.int64)
        self._next_key += self._key_stride * n
        if n == 0:
            return keys
        cid = self._next_chunk
        self._next_chunk += 1
        self._chunks[cid], self._refs[cid] = batch, 0
        placed: dict[int, int] = {}
        rows = zip(range(n), keys.tolist(), batch.times_sampled.tolist(), batch.correct.tolist())
        for i, key, times, correct in rows:
            slot = self._free.pop()
            self._place(slot, cid, i, key, times)
            placed[slot] = i
            for victim in self.retention.on_insert(slot, correct):
                self._remove(victim, "capacity")
        self._copy_scalars(batch, placed)
        if self._refs[cid] == 0:
            self._drop_chunk(cid)
        self.stats_.inserts += n
        self.limiter.record(inserts=n)
        return keys

    def _place(self, slot: int, cid: int, row: int, key: int, times: int) -> None:
        """Row `row` of chunk `cid` into `slot`; its per-row scalars follow with _copy_scalars."""
        m = self.meta
        m.alive[slot], m.seq[slot] = True, self._next_seq
        m.times_sampled[slot], m.last_sampled[slot] = times, -1
        self._next_seq += 1
        self.keys[slot], self._chunk[slot], self._row[slot] = key, cid, row
        self._refs[cid] += 1

    def _copy_scalars(self, batch: RolloutBatch, placed: dict[int, int]) -> None:
        """Each placed slot's scalars from its row of `batch`, one gather per field (copying them row by row was
        most of an insert's cost). A slot evicted and filled again within one insert holds its last row; the
        scalars of a slot evicted for good are never read (it is not alive)."""
        slots = np.fromiter(placed.keys(), np.int64, len(placed))
        rows = np.fromiter(placed.values(), np.int64, len(placed))
        for k, arr in self._scalars.items():
            arr[slots] = getattr(batch, k)[rows]

    def _remove(self, slot: int, reason: str) -> None:
        m = self.meta
        m.alive[slot] = False
        self.stats_.evictions[reason] += 1
        self.stats_.reuse_hist[min(int(m.times_sampled[slot]), HIST_BINS - 1)] += 1  # one item: no array round trip
        cid = int(self._chunk[slot])
        self._refs[cid] -= 1
        if self._refs[cid] == 0:
            self._drop_chunk(cid)
        self._free.append(slot)

    def _drop_chunk(self, cid: int) -> None:
        del self._chunks[cid], self._refs[cid]

    def _purge_and_eligible(self, consumer_version: int) -> np.ndarray:
        """Evict items that can never be returned again (too stale; max_staleness only grows stricter with
        time since consumer_version never decreases) and return the eligible slots."""
        m = self.meta
        alive = np.flatnonzero(m.alive)
        if self.max_staleness is not None:
            stale = alive[consumer_version - m.policy_version[alive] > self.max_staleness]
            for s in stale:
                self.retention.on_delete(int(s))
                self._remove(int(s), "stale")
            alive = np.flatnonzero(m.alive)
        return alive[np.argsort(m.seq[alive])]  # insertion order, so a restored table samples exactly the same

    def can_sample(self, n: int, consumer_version: int) -> bool:
        return len(self._purge_and_eligible(consumer_version)) >= n and self.limiter.can_sample(n, consumer_version)

    def why_blocked(self, n: int, consumer_version: int) -> str:
        eligible = len(self._purge_and_eligible(consumer_version))
        if eligible < n:
            return (f"{eligible} eligible items < {n} requested (size {len(self)}/{self.capacity}, "
                    f"max_staleness={self.max_staleness}, consumer_version={consumer_version}); "
                    "generators may be too slow, dead, or throttled by the rate limiter")
        return self.limiter.why_blocked(consumer_version)

    def sample(self, n: int, consumer_version: int) -> tuple[RolloutBatch, SampleInfo]:
        eligible = self._purge_and_eligible(consumer_version)
        if len(eligible) < n or not self.limiter.can_sample(n, consumer_version):
            raise RuntimeError(f"cannot sample now: {self.why_blocked(n, consumer_version)}")
        slots = np.asarray(self.selector.select(self.meta, eligible, n, self.rng), np.int64)
        m = self.meta
        m.times_sampled[slots] += 1
        ages = consumer_version - m.policy_version[slots]
        since = np.where(m.last_sampled[slots] >= 0, consumer_version - m.last_sampled[slots], -1)
        m.last_sampled[slots] = consumer_version
        info = SampleInfo(self.keys[slots].copy(), ages, m.times_sampled[slots].copy(), since)
        batch = self._gather(slots)
        st = self.stats_
        st.samples += n
        st.sample_calls += 1
        bump(st.age_hist, ages)
        bump(st.since_last_use_hist, since[since >= 0])
        st.age_max = max(st.age_max, int(ages.max(initial=0)))
        st.overlap_prev = np.count_nonzero(since == 1) / max(n, 1)
        m.fresh_from_seq = self._next_seq  # what the next call counts as inserted since this one
        self.limiter.record(samples=n)
        for s in slots:
            if self.remove_on_sample or (self.max_reuse is not None and m.times_sampled[s] >= self.max_reuse):
                self.retention.on_delete(int(s))
                self._remove(int(s), "consumed" if self.remove_on_sample else "reuse")
        return batch, info

    def _gather(self, slots: np.ndarray) -> RolloutBatch:
        """The items in `slots`, in that order: token slices from their chunks, scalars from the slot arrays."""
        ragged: dict[str, list[np.ndarray]] = {"p": [], "c": [], "l": []}
        for c, r in zip(self._chunk[slots].tolist(), self._row[slots].tolist()):
            b = self._chunks[c]
            ps, pe = b.prompt_offsets[r], b.prompt_offsets[r + 1]
            cs, ce = b.completion_offsets[r], b.completion_offsets[r + 1]
            ragged["p"].append(b.prompt_tokens[ps:pe])
            ragged["c"].append(b.completion_tokens[cs:ce])
            ragged["l"].append(b.behavior_logprobs[cs:ce])
        (pt, po), (ct, co) = pack_ragged(ragged["p"], np.int32), pack_ragged(ragged["c"], np.int32)
        lp, _ = pack_ragged(ragged["l"], np.float32)
        scalars = {k: arr[slots] for k, arr in self._scalars.items()}
        return RolloutBatch(pt, po, ct, co, lp, **scalars, times_sampled=self.meta.times_sampled[slots].copy())

    def stats(self) -> TableStats:
        self.stats_.size = len(self)
        return self.stats_

    # ------------------------------------------------------------------ snapshot state
    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, json-able counters) of every live item, oldest first."""
        live = np.flatnonzero(self.meta.alive)
        live = live[np.argsort(self.meta.seq[live])]
        arrays = {f"batch.{k}": v for k, v in self._gather(live).arrays().items()}
        arrays |= {"meta.keys": self.keys[live], "meta.last_sampled": self.meta.last_sampled[live],
                   "meta.region": np.array([self.retention.region_of(int(s)) for s in live], np.int8)}
        st = self.stats()
        # load_state renumbers the live items' seq 0..k−1, oldest first: keep fresh_from_seq as the count of live
        # items older than it, which is the same boundary in that numbering
        fresh_from = int(np.searchsorted(self.meta.seq[live], self.meta.fresh_from_seq))
        counters = {"next_key": self._next_key, "next_seq": self._next_seq, "fresh_from": fresh_from,
                    "limiter": [self.limiter.inserts, self.limiter.samples],
                    "rng": self.rng.bit_generator.state, "stats": {**st.__dict__}}
        return arrays, counters

    def load_state(self, arrays: dict[str, np.ndarray], counters: dict[str, Any]) -> None:
        """Inverse of state() on an empty Table built with the same settings."""
        if len(self):
            raise RuntimeError("load_state needs an empty table")
        batch = RolloutBatch(**{k.removeprefix("batch."): v for k, v in arrays.items() if k.startswith("batch.")})
        if len(batch) > self.capacity:
            raise ValueError(f"snapshot holds {len(batch)} items but the shard capacity is {self.capacity}; "
                             "restore with the replay.capacity and cluster.learners it was taken with")
        cid = self._next_chunk
        self._next_chunk += 1
        self._chunks[cid], self._refs[cid] = batch, 0
        placed: dict[int, int] = {}
        for i in range(len(batch)):
            slot = self._free.pop()
            self._place(slot, cid, i, int(arrays["meta.keys"][i]), int(batch.times_sampled[i]))
            placed[slot] = i
            self.meta.last_sampled[slot] = arrays["meta.last_sampled"][i]
            self.retention.restore(slot, int(arrays["meta.region"][i]), bool(batch.correct[i]))
        self._copy_scalars(batch, placed)
        if self._refs[cid] == 0:
            self._drop_chunk(cid)
        self._next_key, self._next_seq = counters["next_key"], counters["next_seq"]
        self.meta.fresh_from_seq = counters.get("fresh_from", 0)  # snapshots older than it: no previous sample
        self.limiter.inserts, self.limiter.samples = counters["limiter"]
        self.rng.bit_generator.state = counters["rng"]
        self.stats_ = TableStats(**counters["stats"])

    def skip_keys_past(self, key: int) -> None:
        """Issue no key at or below `key` again (one this table served after the snapshot it was restored from):
        keys name rollouts in the consume-once journal and the served audit, so a key is never given twice."""
        if key >= self._next_key:
            self._next_key = key + self._key_stride  # key is this table's own: offset + stride·j


@dataclass(frozen=True)
class RateLimit:
    """A samples-per-insert band: RateLimiter's arguments, with the tolerance the config settled on."""
    samples_per_insert: float
    tolerance: float
    min_size_to_sample: int


@dataclass(frozen=True)
class TableSpec:
    """One shard's Table as plain numbers and choices (config/replay_specs.py makes it from a RunConfig, which
    validated them). `pace` and `rate_limit` exclude each other; the config enforces it."""
    type: Literal["fifo", "lifo_once", "positive_bias"]  # the preset, as replay.type names it
    capacity: int                      # items this shard holds: its share of replay.capacity
    sampler: str = "uniform"           # make_selector's name; lifo_once always takes the freshest
    delta: float = 0.0                 # positive_bias: the reserve's share δ of capacity
    max_staleness: int | None = None
    max_reuse: int | None = None
    rate_limit: RateLimit | None = None
    pace: Pace | None = None           # an emulated cluster's schedule (cluster.emulate)


def table_from_spec(spec: TableSpec, *, seed: int, key_offset: int = 0, key_stride: int = 1) -> Table:
    """The Table preset `spec` names, for shard key_offset of key_stride shards."""
    limiter = None
    if spec.pace is not None:
        limiter = PacedLimiter(spec.pace, key_offset, key_stride)
    elif (r := spec.rate_limit) is not None:
        limiter = RateLimiter(r.samples_per_insert, r.tolerance, r.min_size_to_sample)
    kw = dict(max_staleness=spec.max_staleness, max_reuse=spec.max_reuse, limiter=limiter, seed=seed,
              key_offset=key_offset, key_stride=key_stride)
    match spec.type:
        case "fifo":
            return Table.fifo(spec.capacity, spec.sampler, **kw)
        case "lifo_once":
            return Table.lifo_once(spec.capacity, **kw)
        case "positive_bias":
            return Table.positive_bias(spec.capacity, spec.delta, spec.sampler, **kw)

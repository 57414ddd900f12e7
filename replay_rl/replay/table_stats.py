"""What a table reports: the per-row SampleInfo of a sample, and a shard's TableStats (counters and histograms),
summed over shards by `merge`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HIST_BINS = 64  # histograms of age / reuse / steps-since-last-use: bins 0..63, the last also counts everything above
EVICT_REASONS = ("capacity", "stale", "reuse", "consumed")


@dataclass(frozen=True)
class SampleInfo:
    """Per returned row: its key, age = consumer_version − policy_version, reuse = times returned including this
    one, and steps since it was last returned (−1 the first time)."""

    keys: np.ndarray
    ages: np.ndarray
    reuse: np.ndarray
    since_last_use: np.ndarray
    rules: dict[str, float] = field(default_factory=dict)  # the adaptive reuse rules' signals and actions (shard)


@dataclass
class TableStats:
    """Counters of one shard, or the sum over shards (`merge`). inserts = K_inf, samples = the rows served (K_train
    unless learner.drop_zero_advantage leaves some out of the loss: the ledger's K_forward)."""

    size: int = 0
    capacity: int = 0
    inserts: int = 0
    samples: int = 0
    sample_calls: int = 0
    evictions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EVICT_REASONS, 0))
    age_hist: list[int] = field(default_factory=lambda: [0] * HIST_BINS)
    reuse_hist: list[int] = field(default_factory=lambda: [0] * HIST_BINS)      # reuse of items when evicted
    since_last_use_hist: list[int] = field(default_factory=lambda: [0] * HIST_BINS)
    age_max: int = 0
    # share of the latest batch returned one learner step earlier too (since_last_use = 1): the trainer samples
    # each shard once per consumer_version, which grows by 1 a step, so that step's batch is the previous batch
    overlap_prev: float = 0.0
    # set by the shard actor, not the table: times it was restored in place, and the insert count it restored
    shard_restarts: int = 0
    restored_inserts: int = 0
    # a shard restored in place that lost rollouts made once (a consume-once queue, or one restored with less than
    # its rank's batch) and has served no batch since
    restored_waiting: bool = False
    rollouts_lost: int = 0  # set by the driver's ReplayClient: inserts a shard lost between snapshot and death

    @property
    def replay_ratio(self) -> float:
        return self.samples / self.inserts if self.inserts else 0.0

    @property
    def age_mean(self) -> float:
        n = sum(self.age_hist)
        return float(np.dot(self.age_hist, np.arange(HIST_BINS)) / n) if n else 0.0

    @property
    def since_last_use_mean(self) -> float:
        """Local diversity: mean learner steps between two returns of the same item."""
        n = sum(self.since_last_use_hist)
        return float(np.dot(self.since_last_use_hist, np.arange(HIST_BINS)) / n) if n else 0.0

    @property
    def overlap_prev_mean(self) -> float:
        """overlap_prev over the run: share of every sample so far that was in its shard's previous batch."""
        return self.since_last_use_hist[1] / self.samples if self.samples else 0.0

    @classmethod
    def merge(cls, parts: list["TableStats"]) -> "TableStats":
        out = cls()
        for p in parts:
            for k in ("size", "capacity", "inserts", "samples", "sample_calls", "shard_restarts", "rollouts_lost"):
                setattr(out, k, getattr(out, k) + getattr(p, k))
            for r in EVICT_REASONS:
                out.evictions[r] += p.evictions[r]
            for k in ("age_hist", "reuse_hist", "since_last_use_hist"):
                setattr(out, k, [a + b for a, b in zip(getattr(out, k), getattr(p, k))])
            out.age_max = max(out.age_max, p.age_max)
        out.overlap_prev = float(np.mean([p.overlap_prev for p in parts])) if parts else 0.0
        return out

    def summary(self) -> dict[str, float]:
        # inserts and samples are K_inf and K_forward, which the ledger reports (k_inf, k_forward): one name each.
        # The driver logs these as buffer/*: buffer/age_mean is over every sample so far, batch/age_mean this step's;
        # buffer/overlap_prev is this step's (overlap_prev_mean, the run's, is derived from the histogram)
        return {"size": self.size,
                "replay_ratio": self.replay_ratio, "age_mean": self.age_mean, "age_max": self.age_max,
                "since_last_use_mean": self.since_last_use_mean, "overlap_prev": self.overlap_prev,
                "shard_restarts": self.shard_restarts, "rollouts_lost": self.rollouts_lost,
                **{f"evicted_{r}": v for r, v in self.evictions.items()}}


def bump(hist: list[int], values: np.ndarray) -> None:
    # bincount, not np.unique: a sample bumps two histograms, and unique's sort was most of a small sample's cost
    counts = np.bincount(np.clip(values, 0, HIST_BINS - 1).astype(np.intp, copy=False), minlength=HIST_BINS)
    for v in np.flatnonzero(counts).tolist():
        hist[v] += int(counts[v])

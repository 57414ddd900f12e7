"""Limits: pure counters that decide whether a sample or an insert may proceed now. No locks, no Ray."""

from __future__ import annotations


class RateLimiter:
    """Reverb's SampleToInsertRatio. error = inserts·samples_per_insert − samples must stay within ±tolerance:
    a sample of n waits while error − n < −tolerance (learners ahead), an insert of k waits while
    error + k·spi > tolerance (generators ahead). Sampling also waits until min_size_to_sample items were inserted.
    """

    def __init__(self, samples_per_insert: float, tolerance: float, min_size_to_sample: int = 1) -> None:
        # whether a band can deadlock depends on sample/insert sizes, capacity and the start state: the config
        # checks that once, by exploring every reachable state (limit_check.py)
        self.spi, self.tolerance, self.min_size = samples_per_insert, tolerance, min_size_to_sample
        self.inserts = 0
        self.samples = 0

    @property
    def error(self) -> float:
        return self.inserts * self.spi - self.samples

    def can_sample(self, n: int, consumer_version: int = 0) -> bool:
        return self.inserts >= self.min_size and self.error - n >= -self.tolerance

    def can_insert(self, k: int) -> bool:
        return self.error + k * self.spi <= self.tolerance

    def record(self, inserts: int = 0, samples: int = 0) -> None:
        self.inserts += inserts
        self.samples += samples

    def recover(self, consumer_version: int) -> None:
        """After a restore from a snapshot: inserts and samples rolled back together, so the band still holds."""

    def why_blocked(self, consumer_version: int = 0) -> str:
        ratio = self.samples / self.inserts if self.inserts else float("inf")
        return (f"samples/insert {ratio:.2f} vs target {self.spi:g} ± {self.tolerance:g} samples "
                f"(inserts={self.inserts}, samples={self.samples}, min_size_to_sample={self.min_size})")


class Unlimited:
    """No rate limit (the paper): inserts never wait; samples wait only for enough eligible items."""

    inserts = samples = 0

    def can_sample(self, n: int, consumer_version: int = 0) -> bool:
        return True

    def can_insert(self, k: int) -> bool:
        return True

    def record(self, inserts: int = 0, samples: int = 0) -> None:
        pass

    def recover(self, consumer_version: int) -> None:
        pass

    def why_blocked(self, consumer_version: int = 0) -> str:
        return "no rate limit"


class Pace:
    """The emulated cluster's schedule (cluster.emulate): generation runs at R = B / replay_ratio rollouts per
    learner step, never more than `lead_steps` steps ahead of the learner, and the learner takes no step before
    that step's R rollouts exist (so, like a GPU cluster at steady state, every step sees R fresh ones). Both
    sides read the same two functions of the learner version, so they cannot wait on each other:
    budget(v) − required(v) = min(R·(lead_steps − 1), N − B) ≥ 0: generators may always produce what is required.

    fill: rollouts needed before the first step can sample a batch: B − R for a buffer that keeps what it
    returns (so budget(0) with lead 1 is exactly B), 0 for a consume-once queue (R = B there anyway).
    """

    def __init__(self, batch_size: int, replay_ratio: float, lead_steps: int, consumes_once: bool,
                 capacity: int) -> None:
        self.rollouts_per_step = batch_size / replay_ratio
        self.fill = 0.0 if consumes_once else max(0.0, batch_size - self.rollouts_per_step)
        # the lead must fit in the buffer beside one batch, or FIFO evicts rollouts before their first use and the
        # learner, owed nothing new, samples the same ones again: a buffer of N = B runs in strict turns
        self.lead = min(self.rollouts_per_step * (lead_steps - 1), float(capacity - batch_size))

    def budget(self, version: int) -> float:
        """Rollouts all generators together may have started once the learner published `version`."""
        return self.required(version) + self.lead

    def required(self, version: int) -> float:
        """Rollouts that must have been inserted before the learner updates weights of `version`."""
        return self.fill + self.rollouts_per_step * (version + 1)


class PacedLimiter:
    """A shard's side of a Pace: sampling for consumer_version v waits until this shard holds its share of
    Pace.required(v); inserts never wait (generators are paced before they generate, so nothing stale queues)."""

    def __init__(self, pace: Pace, shards: int) -> None:
        self.pace, self.shards = pace, shards
        self.inserts = 0
        self.samples = 0

    def owed(self, consumer_version: int) -> int:
        """This shard's share of the rollouts the schedule owes the learner before it updates `consumer_version`."""
        return int(self.pace.required(consumer_version) / self.shards)

    def can_sample(self, n: int, consumer_version: int = 0) -> bool:
        return self.inserts >= self.owed(consumer_version)

    def can_insert(self, k: int) -> bool:
        return True

    def record(self, inserts: int = 0, samples: int = 0) -> None:
        self.inserts += inserts
        self.samples += samples

    def recover(self, consumer_version: int) -> None:
        """After a restore from a snapshot: the rollouts lost since it were generated on schedule and will not be
        generated again (generators pace on the learner version), so this shard counts them as delivered."""
        self.inserts = max(self.inserts, self.owed(consumer_version))

    def why_blocked(self, consumer_version: int = 0) -> str:
        return (f"emulated cluster pace: {self.inserts} inserted < {self.owed(consumer_version)} owed to this shard by "
                f"learner version {consumer_version} (R={self.pace.rollouts_per_step:.1f}/step)")

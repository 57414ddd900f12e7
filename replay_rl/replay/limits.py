"""Limits: pure counters that decide whether a sample or an insert may proceed now. No locks, no Ray."""

from __future__ import annotations


class RateLimiter:
    """Reverb's SampleToInsertRatio. error = inserts·samples_per_insert − samples must stay within ±tolerance:
    a sample of n waits while error − n < −tolerance (learners ahead), an insert of k waits while
    error + k·spi > tolerance (generators ahead). Sampling also waits until min_size_to_sample items were inserted.
    """

    def __init__(self, samples_per_insert: float, tolerance: float, min_size_to_sample: int = 1,
                 max_sample: int = 1, max_insert: int = 1) -> None:
        # both sides blocked at once needs error − n < −tol and error + k·spi > tol, i.e. 2·tol < n + k·spi
        if 2 * tolerance < max_sample + max_insert * samples_per_insert:
            raise ValueError(
                f"replay.rate_limit.tolerance: {tolerance} can deadlock with sample batches of {max_sample} and "
                f"inserts of {max_insert} at samples_per_insert={samples_per_insert}; use tolerance ≥ "
                f"{(max_sample + max_insert * samples_per_insert) / 2:g}")
        self.spi, self.tolerance, self.min_size = samples_per_insert, tolerance, min_size_to_sample
        self.inserts = 0
        self.samples = 0

    @property
    def error(self) -> float:
        return self.inserts * self.spi - self.samples

    def can_sample(self, n: int) -> bool:
        return self.inserts >= self.min_size and self.error - n >= -self.tolerance

    def can_insert(self, k: int) -> bool:
        return self.error + k * self.spi <= self.tolerance

    def record(self, inserts: int = 0, samples: int = 0) -> None:
        self.inserts += inserts
        self.samples += samples

    def why_blocked(self) -> str:
        ratio = self.samples / self.inserts if self.inserts else float("inf")
        return (f"samples/insert {ratio:.2f} vs target {self.spi:g} ± {self.tolerance:g} samples "
                f"(inserts={self.inserts}, samples={self.samples}, min_size_to_sample={self.min_size})")


class Unlimited:
    """No rate limit (the paper): inserts never wait; samples wait only for enough eligible items."""

    inserts = samples = 0

    def can_sample(self, n: int) -> bool:
        return True

    def can_insert(self, k: int) -> bool:
        return True

    def record(self, inserts: int = 0, samples: int = 0) -> None:
        pass

    def why_blocked(self) -> str:
        return "no rate limit"

"""Limits: pure counters that decide whether a sample or an insert may proceed now. No locks, no Ray."""

from __future__ import annotations

import numpy as np


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

    def restored(self) -> None:
        pass

    def inserted(self, call: int | None, n: int) -> None:
        pass

    def recover(self, consumer_version: int | None, calls: list[int] | None = None) -> None:
        """After a restore from a snapshot: inserts and samples rolled back together, so the band still holds."""

    def resume_stream(self, rollouts: int) -> None:
        """The same after a resume: the band holds on the counts the snapshot kept."""

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

    def restored(self) -> None:
        pass

    def inserted(self, call: int | None, n: int) -> None:
        pass

    def recover(self, consumer_version: int | None, calls: list[int] | None = None) -> None:
        pass

    def resume_stream(self, rollouts: int) -> None:
        pass

    def why_blocked(self, consumer_version: int = 0) -> str:
        return "no rate limit"


class Pace:
    """The emulated cluster's schedule (cluster.emulate): generation runs at R = B / replay_ratio rollouts per
    learner step, never more than `lead_steps` steps ahead of the learner, and the learner takes no step before
    that step's R rollouts exist (so, like a GPU cluster at steady state, every step sees R fresh ones). Both
    sides read the same functions of the learner version, so they cannot wait on each other:
    budget(v) ≥ required(v') for every v' the learner reaches before it next publishes, and every shard's owed
    count is its deal of those required rollouts (see owed; pace_check.py explores the states this reaches).

    fill: rollouts needed before the first step can sample a batch: B − R for a buffer that keeps what it
    returns (so budget(0) with lead 1 is exactly B), 0 for a consume-once queue (R = B there anyway).
    publish_every: sync.every_steps; generators see the learner's progress only through published weights.
    rollouts_per_call: generation.rollouts_per_call, which only `started` (a restore's credit) needs.
    """

    def __init__(self, batch_size: int, replay_ratio: float, lead_steps: int, consumes_once: bool,
                 capacity: int, publish_every: int = 1, rollouts_per_call: int = 1) -> None:
        self.rollouts_per_step = batch_size / replay_ratio
        self.fill = 0.0 if consumes_once else max(0.0, batch_size - self.rollouts_per_step)
        self.publish_every, self.rollouts_per_call = publish_every, rollouts_per_call
        # the lead must fit in the buffer beside one batch, or FIFO evicts rollouts before their first use and the
        # learner, owed nothing new, samples the same ones again: a buffer of N = B runs in strict turns
        self.lead = min(self.rollouts_per_step * (lead_steps - 1), float(capacity - batch_size))

    def budget(self, version):
        """Rollouts all generators together may have started once the learner published `version`: what the
        learner needs up to its next publish (it sees no newer weights before), plus the lead."""
        return self.required(version + self.publish_every - 1) + self.lead

    def required(self, version):
        """Rollouts that must have been inserted before the learner updates weights of `version`."""
        return self.fill + self.rollouts_per_step * (version + 1)

    def may_start(self, call, rollouts_per_call: int, version):
        """Backend call number `call` (call_number) may start while its first rollout is within the budget, so
        the calls made are always a prefix 0..M−1 of the numbering, and together overshoot by < one call."""
        return call * rollouts_per_call < self.budget(version)

    def started(self, version: int) -> int:
        """Rollouts of every call may_start allows once the learner asks to sample `version`: generators hold at
        most the weights it published last (version − version mod publish_every), and a call allowed there may have
        been made, so its rollouts may have reached a shard that has since lost them."""
        rpc, budget = self.rollouts_per_call, self.budget(version - version % self.publish_every)
        calls = int(np.ceil(budget / rpc))
        calls += bool(self.may_start(calls, rpc, version - version % self.publish_every))  # ceil's float hair
        return calls * rpc

    def owed(self, shard, shards: int, version):
        """Shard `shard`'s deal (route) of the first ⌈required(version)⌉ rollouts: what it must hold before the
        learner updates `version`. The calls may_start allows cover that prefix of the stream, so each shard is
        always paid: dealt_to only grows with the prefix. (Owing ⌊required/T⌋ to every shard instead left a
        shard one short, for ever, when its calls' deal favoured the others: seen as a stall at step 15.)"""
        # − 1e-9: float sums such as (B − R) + R land a hair above B, which would owe one rollout more
        return dealt_to(shard, np.ceil(self.required(version) - 1e-9).astype(np.int64), shards)


def call_number(generator_id, calls_made, generators: int):
    """Backend calls are dealt round-robin: generator g's k-th call (k from 0) is call k·W + g of all of them."""
    return calls_made * generators + generator_id


def route(generator_id, calls_made, generators: int, rollouts_per_call: int, shards: int) -> np.ndarray:
    """The shard of each rollout of generator g's next call (arrays of g and k give one row per call): rollout j
    is rollout call_number·rpc + j of one stream of every generator's rollouts, dealt round-robin over shards.
    Any prefix of calls is then an even deal whichever generator made them, so owed can be that deal; dealing
    each generator's calls from shard 0 on its own left a shard short when T does not divide the rollouts."""
    first = np.asarray(call_number(generator_id, calls_made, generators)) * rollouts_per_call
    return (first[..., None] + np.arange(rollouts_per_call)) % shards


def dealt_to(shard, rollouts, shards: int):
    """How many of the stream's first `rollouts` route deals to `shard`: those numbered shard, shard + T, ..."""
    return np.maximum(0, (rollouts - shard + shards - 1) // shards)


def dealt_by_calls(shard: int, shards: int, calls: list[int], rollouts_per_call: int) -> int:
    """How many rollouts route deals to `shard` from the calls the generators made: calls[g] by generator g (its
    calls k < calls[g], numbered by call_number)."""
    w = len(calls)
    numbers = np.concatenate([call_number(g, np.arange(c), w) for g, c in enumerate(calls)] + [np.zeros(0, int)])
    first = numbers.astype(np.int64) * rollouts_per_call
    return int((dealt_to(shard, first + rollouts_per_call, shards) - dealt_to(shard, first, shards)).sum())


class PacedLimiter:
    """A shard's side of a Pace: sampling for consumer_version v waits until this shard holds its deal of
    Pace.required(v); inserts never wait (generators are paced before they generate, so nothing stale queues)."""

    def __init__(self, pace: Pace, shard: int, shards: int) -> None:
        self.pace, self.shard, self.shards = pace, shard, shards
        self.inserts = 0
        self.samples = 0
        self._restored: int | None = None  # inserts its snapshot held, once restored in place
        # recover's credit; the calls it covers (calls[g] of generator g; None: not known yet); each insert since the
        # restore as (call_number, rollouts) until they are
        self._credit, self._calls, self._since = 0, None, []

    def owed(self, consumer_version: int) -> int:
        """This shard's deal of the rollouts the schedule owes the learner before it updates `consumer_version`."""
        return int(self.pace.owed(self.shard, self.shards, consumer_version))

    def can_sample(self, n: int, consumer_version: int = 0) -> bool:
        return self.inserts >= self.owed(consumer_version)

    def can_insert(self, k: int) -> bool:
        return True

    def record(self, inserts: int = 0, samples: int = 0) -> None:
        self.inserts += inserts
        self.samples += samples

    def restored(self) -> None:
        """Restored in place from a live snapshot: the inserts it holds are the snapshot's; recover credits the rest."""
        self._restored, self._credit, self._calls, self._since = self.inserts, 0, None, []

    def inserted(self, call: int | None, n: int) -> None:
        """n rollouts of backend call `call` (call_number) were inserted (and recorded). A restored shard counts a
        call the credit covers once: its pieces in flight at the restore are resent to the restart."""
        if self._restored is None or call is None:
            return
        if self._calls is None:
            self._since.append((call, n))
            if len(self._since) > 4096 and self._credit:  # no calls from the driver (a restart it did not make):
                self._restored, self._since = None, []    # the pace's allowance stands, and nothing more is kept
        elif self._covers(call):
            self.inserts -= n

    def _covers(self, call: int) -> bool:
        return call // len(self._calls) < self._calls[call % len(self._calls)]

    def recover(self, consumer_version: int | None, calls: list[int] | None = None) -> None:
        """After a restore from a snapshot: the rollouts lost since it were generated on schedule and will not be
        generated again (generators pace on the learner version), so this shard counts as delivered its deal of
        every call the generators had started at the restore (`calls`, calls[g] by generator g, which the driver
        passes: Supervisor.recover_shard), and of each later call as it arrives; a piece of a credited call resent to
        the restart counts once (inserted). Its count then equals what it was dealt, never more. Until the driver's
        calls arrive (consumer_version: the shard's first sample after the restore, or a restart the driver did not
        make) it counts every call the pace may have started (Pace.started), the lead included: crediting only
        owed(v) left the lead's share owed for ever (a stall a step or two later), while this allowance, kept,
        counted calls started after the restore twice (up to 6 calls' shares seen), a looser μ for the run."""
        if self._restored is None or (self._calls is not None and calls is None):
            return
        base = self.inserts - self._credit  # the snapshot's inserts and those since: a provisional credit gives way
        if calls is not None:
            self._calls = list(calls)
            twice = sum(n for call, n in self._since if self._covers(call))
            dealt = dealt_by_calls(self.shard, self.shards, calls, self.pace.rollouts_per_call)
            target = max(dealt, self._restored) + base - self._restored - twice
        else:
            target = max(base, self.restore_credit(consumer_version))
        self._credit = target - base
        self.inserts = target

    def restore_credit(self, consumer_version: int) -> int:
        """The pace's bound on a restored shard's credit when the learner next asks it for `consumer_version`: its
        deal of every call may_start allows by then."""
        return int(dealt_to(self.shard, self.pace.started(consumer_version), self.shards))

    def resume_stream(self, rollouts: int) -> None:
        """After a resume whose generators go on from rollout `rollouts` of the stream: this shard's deal of the
        rollouts before it counts as delivered. A call the snapshot caught in part and the resume point passes
        (driver.checkpointer.resumed_calls rounds up for a buffer that keeps its rows) is not made again, and its
        missing share would otherwise be owed for ever."""
        self.inserts = max(self.inserts, int(dealt_to(self.shard, rollouts, self.shards)))

    def why_blocked(self, consumer_version: int = 0) -> str:
        return (f"emulated cluster pace: {self.inserts} inserted < {self.owed(consumer_version)} owed to this shard by "
                f"learner version {consumer_version} (R={self.pace.rollouts_per_step:.1f}/step)")

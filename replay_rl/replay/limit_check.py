"""Can a samples-per-insert rate limiter deadlock? Decided by exploring every state the real rules can reach.

A shard's state is (inserts, items it holds, error = inserts·spi − samples). Generators insert chunks of k items
(either size the client's round-robin routing produces) while error + k·spi ≤ tolerance; a learner samples n items
while inserts ≥ min_size_to_sample, error − n ≥ −tolerance and n items are eligible. Checking only the steady
state (2·tol ≥ n + k·spi) misses the start (the first insert needs k·spi ≤ tol) and eligibility (the items a full
band holds must reach n), and that is how ordinary settings deadlocked before. Pure Python; no Ray.

Modelled exactly: FIFO / positive-bias retention (sampling never removes) and lifo_once (sampling removes).
Not modelled: max_staleness and max_reuse shrink eligibility by item history; they are checked separately
(`max_reuse ≥ samples_per_insert`) and otherwise left to the stall watchdog.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction

MAX_STATES = 200_000


@dataclass(frozen=True)
class LimitSetting:
    samples_per_insert: float
    tolerance: float
    min_size_to_sample: int
    sample_size: int           # n: one learner rank's batch, sampled from its own shard
    insert_sizes: tuple[int, ...]  # the chunk sizes one insert call delivers to a shard
    capacity: int              # items a shard holds
    removes_on_sample: bool    # lifo_once


@dataclass(frozen=True)
class Deadlock:
    ops: tuple[str, ...]       # a schedule of 'i<k>' / 's' that reaches a state where both sides wait
    inserts: int
    items: int
    error: Fraction


def find_deadlock(s: LimitSetting) -> Deadlock | None:
    """A schedule that ends with generators and learners both blocked, or None if no reachable state blocks both."""
    spi, tol = Fraction(s.samples_per_insert).limit_denominator(1000), Fraction(s.tolerance).limit_denominator(1000)
    unit = math.lcm(spi.denominator, tol.denominator)  # errors in integer units of 1/unit sample: exact and fast
    n, tol_u, sample_u = s.sample_size, int(tol * unit), s.sample_size * unit
    # only what the rules compare is kept: inserts up to min_size; items up to n unless sampling removes them
    min_size, item_cap = s.min_size_to_sample, s.capacity if s.removes_on_sample else min(s.capacity, n)
    inserts_of = [(f"i{k}", k, int(k * spi * unit)) for k in s.insert_sizes]  # (op, items, error it adds)
    lowest, taken = sample_u - tol_u, n if s.removes_on_sample else 0  # a sample needs error − n ≥ −tol
    # breadth first, so a witness is a shortest schedule; the loop is the validator's cost (10k settings in the
    # tests), hence no per-state lists, min() calls or op names built in it
    start = (0, 0, 0)
    seen, queue = {start: None}, deque([start])
    while queue:
        state = queue.popleft()
        inserts, items, error = state
        moves = []
        for op, k, step in inserts_of:
            if error + step <= tol_u:
                i, m = inserts + k, items + k
                moves.append((op, (i if i < min_size else min_size, m if m < item_cap else item_cap, error + step)))
        if inserts >= min_size and error >= lowest and items >= n:
            moves.append(("s", (inserts, items - taken, error - sample_u)))
        if not moves:
            return Deadlock(_path(seen, state), inserts, items, Fraction(error, unit))
        for op, nxt in moves:
            if nxt not in seen:
                if len(seen) >= MAX_STATES:
                    return None  # not decided within MAX_STATES: accepted, and the stall watchdog is the backstop
                seen[nxt] = (state, op)
                queue.append(nxt)
    return None


def _path(seen: dict, state: tuple) -> tuple[str, ...]:
    ops = []
    while seen[state] is not None:
        state, op = seen[state]
        ops.append(op)
    return tuple(reversed(ops))


def smallest_safe_tolerance(s: LimitSetting) -> float:
    """The smallest tolerance (in steps of 1/4 sample) at which no reachable state blocks both sides."""
    # the first insert needs k·spi ≤ tol; above that, reachable errors lie on a lattice, so search upwards
    tol = max(Fraction(max(s.insert_sizes) * s.samples_per_insert).limit_denominator(4), Fraction(1, 4))
    # a band this wide holds min_size and n + one insert's worth of items at every ratio rate_limit_problem allows
    ceiling = tol + 4 * (s.sample_size + max(s.insert_sizes) * s.samples_per_insert) + s.min_size_to_sample * 4
    while find_deadlock(LimitSetting(**{**s.__dict__, "tolerance": float(tol)})) is not None:
        tol += Fraction(1, 4)
        if tol > ceiling:
            raise ValueError(f"no safe replay.rate_limit.tolerance found up to {float(ceiling):g} for {s}")
    return float(tol)


def rate_limit_problem(s: LimitSetting, max_reuse: int | None) -> str | None:
    """One line naming the field and the smallest value that works, or None when the setting cannot deadlock."""
    spi = s.samples_per_insert
    if s.removes_on_sample and spi > 1:
        return (f"replay.rate_limit.samples_per_insert: {spi:g} > 1 with replay.type=lifo_once, which uses each "
                "rollout once; learners would starve. Use samples_per_insert ≤ 1")
    if max_reuse is not None and spi > max_reuse:
        return (f"replay.rate_limit.samples_per_insert: {spi:g} > replay.max_reuse={max_reuse}: items run out of "
                f"uses before the ratio is met. Use samples_per_insert ≤ {max_reuse} or max_reuse ≥ {spi:g}")
    if not s.tolerance:
        return None  # unset: the caller derives smallest_safe_tolerance()
    dead = find_deadlock(s)
    if dead is None:
        return None
    where = "at the first insert" if not dead.ops else f"after {len(dead.ops)} operations"
    return (f"replay.rate_limit.tolerance: {s.tolerance:g} deadlocks {where} (shard holds {dead.items} items, "
            f"error {float(dead.error):g}; samples of {s.sample_size}, inserts of {max(s.insert_sizes)} at "
            f"samples_per_insert={spi:g}); use tolerance ≥ {smallest_safe_tolerance(s):g}, or leave it unset to "
            "derive it")

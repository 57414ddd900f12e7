"""Tier 0 property test: the rate-limit validator against a real Table driven by simulated producers and consumers.

Every setting it accepts must make progress under any interleaving; every setting it rejects must really stall:
its witness schedule, replayed on a real Table, leaves both generators and learners blocked."""

from functools import cache

import numpy as np
import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.replay.limit_check import LimitSetting, find_deadlock, rate_limit_problem, smallest_safe_tolerance
from replay_rl.replay.limits import RateLimiter
from replay_rl.replay.table import Table
from tests.replay.helpers import make_batch

SETTINGS = 10_000
OPS = 40  # random operations per accepted setting
batch_of = cache(make_batch)  # one batch per insert size (1..64), shared by the settings: a Table never changes one


def real_table(s: LimitSetting) -> Table:
    limiter = RateLimiter(s.samples_per_insert, s.tolerance, s.min_size_to_sample)
    return (Table.lifo_once if s.removes_on_sample else Table.fifo)(s.capacity, limiter=limiter)


def allowed(table: Table, s: LimitSetting) -> list[str]:
    ops = [f"i{k}" for k in s.insert_sizes if table.can_insert(k)]
    return ops + (["s"] if table.can_sample(s.sample_size, 0) else [])


def apply(table: Table, s: LimitSetting, op: str, batches: dict) -> None:
    if op == "s":
        table.sample(s.sample_size, 0)
    else:
        table.insert(batches[int(op[1:])])


def random_setting(rng: np.random.Generator) -> LimitSetting:
    learners, per_call, n = int(rng.integers(1, 5)), int(rng.integers(1, 65)), int(rng.integers(1, 33))
    sizes = tuple(sorted({k for k in (per_call // learners, -(-per_call // learners)) if k > 0}))
    removes = bool(rng.random() < 0.3)
    spi = float(rng.choice([0.25, 0.5, 1.0] if removes else [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]))
    return LimitSetting(spi, float(rng.integers(1, 481)) / 4, int(rng.integers(1, 41)), n, sizes,
                        int(rng.integers(n, 4 * n + 17)), removes)


def test_validator_agrees_with_a_real_table_on_10k_random_settings():
    rng = np.random.default_rng(0)
    accepted = rejected = 0
    for _ in range(SETTINGS):
        s = random_setting(rng)
        table, dead = real_table(s), find_deadlock(s)
        batches = {k: batch_of(k) for k in s.insert_sizes}
        if dead is None:
            accepted += 1
            for _ in range(OPS):
                ops = allowed(table, s)
                assert ops, f"accepted {s} but a real table stalled"
                apply(table, s, ops[rng.integers(len(ops))], batches)
        else:
            rejected += 1
            for op in dead.ops:
                assert op in allowed(table, s), (s, dead.ops)
                apply(table, s, op, batches)
            assert allowed(table, s) == [], f"rejected {s}, but its witness {dead.ops} leaves a move"
    assert accepted > 1000 and rejected > 1000  # the search covers both verdicts


@pytest.mark.parametrize("seed", range(20))
def test_the_derived_tolerance_is_safe_and_minimal(seed):
    s = random_setting(np.random.default_rng(seed))
    tol = smallest_safe_tolerance(s)
    assert find_deadlock(LimitSetting(**{**s.__dict__, "tolerance": tol})) is None
    below = tol - 0.25
    assert below < max(s.insert_sizes) * s.samples_per_insert or \
        find_deadlock(LimitSetting(**{**s.__dict__, "tolerance": below})) is not None


@pytest.mark.parametrize("overrides, message", [
    # the two settings that hung for minutes before: now one line at load, with the smallest value that works
    (["learner.batch_size=32", "generation.prompts_per_call=4", "replay.capacity=64",
      "replay.rate_limit={samples_per_insert: 3, tolerance: 64}"], "deadlocks at the first insert.*tolerance ≥ 96"),
    (["learner.batch_size=64", "replay.capacity=96", "generation.prompts_per_call=1",
      "replay.rate_limit={samples_per_insert: 3, tolerance: 64}"], "deadlocks after 2 operations.*tolerance ≥ 96"),
    (["replay.type=lifo_once", "replay.rate_limit={samples_per_insert: 2}"], "samples_per_insert: 2 > 1"),
    (["replay.max_reuse=2", "replay.rate_limit={samples_per_insert: 3}"], "samples_per_insert ≤ 2"),
])
def test_config_rejects_deadlocking_rate_limits(overrides, message):
    with pytest.raises(ConfigError, match=f"replay.rate_limit.*{message}"):
        RunConfig.load(None, ["cluster.emulate=null", *overrides])


def test_unset_tolerance_is_derived():
    cfg = RunConfig.load(None, ["cluster.emulate=null", "learner.batch_size=64", "replay.capacity=96",
                                "generation.prompts_per_call=1", "replay.rate_limit={samples_per_insert: 3}"])
    assert cfg.rate_limit_tolerance == 96.0
    assert rate_limit_problem(cfg.rate_limit_setting(cfg.rate_limit_tolerance), None) is None

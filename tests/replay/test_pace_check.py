"""Tier 0: the emulated pace cannot stall. The checker (pace_check) walks the states the real rules reach; it must
find no stall on the issue's grid, refuse a consume-once queue too small for its pace with a capacity that works,
and agree with real Tables driven by the real generator rules under random interleavings."""

import math

import numpy as np
import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.replay.limits import PacedLimiter, call_number, route
from replay_rl.replay.pace_check import (PaceSetting, find_stall, restore_run, restore_stalls,
                                         smallest_safe_capacity)
from replay_rl.replay.table import Table
from tests.replay.helpers import make_batch

RATIO = 5.28 * 3 / 5  # the default emulated cluster (μ = 5.28, W = 5, T = 3): R = B / 3.168, never whole


def grid(consumes_once: bool, generators=range(1, 9), publish_every=(1,)):
    """W, T ∈ 1..8, rollouts per call ∈ {8, 16, 32, 48}, N ∈ {B, B + 1, 2B}, every lead. B ≈ 48, a multiple of T:
    the check sweeps every whole owed count over a period of the deal, so B matters only through fill and the lead
    (N − B), and a B this size already makes calls overshoot the budget by every amount below a call."""
    for w in generators:
        for t in range(1, 9):
            b = t * round(48 / t)
            ratio = 1.0 if consumes_once else RATIO
            for rpc in (8, 16, 32, 48):
                for n in (b, b + 1, 2 * b):
                    # lead_steps 1 and 2 (the default) always; then up to the first whose lead reaches N − B
                    for lead_steps in range(1, max(2, math.ceil((n - b) * ratio / b) + 1) + 1):
                        for k in publish_every:
                            yield PaceSetting(w, t, b, n, rpc, ratio, lead_steps, consumes_once, k)


def test_the_reported_split_no_longer_stalls():
    # stopped at step 15 before: "shard 2: 232 inserted < 233 owed ... by learner version 14"
    cfg = RunConfig.load(None, ["cluster.generators=5", "cluster.learners=3", "learner.batch_size=129",
                                "replay.capacity=129"])
    assert find_stall(cfg.pace_setting) is None
    assert find_stall(PaceSetting(2, 3, 129, 129, 32, RATIO, 2, False)) is None  # stalled at step 154 before


def test_no_keep_all_setting_on_the_grid_can_stall():
    settings = list(grid(consumes_once=False))
    assert len(settings) == 2304
    assert [(s, stall) for s in settings if (stall := find_stall(s))] == []


def test_publishing_every_few_steps_cannot_stall_a_keep_all_buffer():
    # generators see the learner only through published weights: their budget covers every step until the next
    settings = list(grid(consumes_once=False, generators=(1, 3, 5, 8), publish_every=(2, 3)))
    assert [(s, stall) for s in settings if (stall := find_stall(s))] == []


def test_a_consume_once_queue_too_small_for_its_pace_is_refused_with_a_capacity_that_works():
    stalls = [(s, st) for s in grid(consumes_once=True, generators=(1, 2, 5)) if (st := find_stall(s))]
    assert stalls and all(st.holds < s.batch_size // s.shards for s, st in stalls)  # eviction, never an owed count
    for s, _ in stalls[::max(1, len(stalls) // 12)]:
        fix = smallest_safe_capacity(s)
        assert fix is not None and fix % s.shards == 0
        assert find_stall(PaceSetting(**{**s.__dict__, "capacity": fix})) is None


@pytest.mark.parametrize("overrides, message", [
    (["replay.type=lifo_once", "replay.capacity=128", "sync.every_steps=2"],
     r"replay.capacity: 128 stalls the emulated pace at step 2 \(shard 0: .* 0 eligible of the 64 .*capacity ≥ 256"),
    (["replay.type=lifo_once", "learner.batch_size=32", "replay.capacity=32", "cluster.learners=1",
      "generation.prompts_per_call=3"], r"stalls the emulated pace at step 3 .*evicts rollouts.*capacity ≥ "),
])
def test_config_refuses_a_pace_that_stalls_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as e:
        RunConfig.load(None, overrides)
    assert "\n" not in str(e.value)
    fix = int(str(e.value).rsplit("≥ ", 1)[1])
    RunConfig.load(None, [*overrides, f"replay.capacity={fix}"])  # the capacity it names is accepted


def real_run(s: PaceSetting, versions: int, rng: np.random.Generator | None) -> int | None:
    """Drive real Tables with the real generator rules (may_start, call_number, route): generators make the calls
    the budget of the published version allows, in a random order with the learner's samples (rng), or all before
    each sample (rng None: the checker's worst order). Returns the version where both sides wait, or None."""
    t, n, pace = s.shards, s.batch_size // s.shards, s.pace()
    make = Table.lifo_once if s.consumes_once else Table.fifo
    tables = [make(s.capacity // t, limiter=PacedLimiter(pace, i, t)) for i in range(t)]
    chunks = {k: make_batch(k) for k in range(1, s.rollouts_per_call + 1)}
    made, v = [0] * s.generators, 0
    while v < versions:
        published = v - v % s.publish_every
        ready = [g for g in range(s.generators) if pace.may_start(call_number(g, made[g], s.generators),
                                                                  s.rollouts_per_call, published)]
        learner = all(tb.can_sample(n, v) for tb in tables)
        if not ready and not learner:
            return v
        if ready and (rng is None or not learner or rng.random() < 0.5):
            g = ready[0] if rng is None else ready[rng.integers(len(ready))]
            owner = route(g, made[g], s.generators, s.rollouts_per_call, t)
            for i, tb in enumerate(tables):
                if (k := int((owner == i).sum())):
                    tb.insert(chunks[k])
            made[g] += 1
        else:
            for tb in tables:
                tb.sample(n, v)
            v += 1
    return None


def test_the_checker_agrees_with_real_tables():
    rng = np.random.default_rng(0)
    pool = [*grid(False, generators=(2, 5)), *grid(True, generators=(2, 5), publish_every=(1, 2))]
    seen = {True: 0, False: 0}
    for i in rng.choice(len(pool), 40, replace=False):
        s = pool[i]
        stall = find_stall(s)
        if stall is None:
            assert real_run(s, 30, rng) is None, s
        elif stall.version == int(stall.version):  # a stall of this very setting: the worst order reaches it
            assert real_run(s, int(stall.version) + 1, None) == stall.version, s
        seen[stall is None] += 1
    assert seen[True] and seen[False]  # both verdicts were cross-checked


def test_a_restored_shard_is_credited_its_deal_of_the_calls_started_and_no_more():
    from replay_rl.replay.limits import Pace

    # tiny_cpu's shape at μ·T/W = 3.2: R = 40 per step, fill 88, lead 40; 32 rollouts a call, 2 shards, W = 2
    pace = Pace(batch_size=128, replay_ratio=3.2, lead_steps=2, consumes_once=False, capacity=1280,
                rollouts_per_call=32)
    # sampling version 10, the learner published 10: budget 88 + 11·40 + 40 = 568, calls 0..17 (17·32 = 544 < 568)
    assert pace.budget(10) == 568 and pace.started(10) == 18 * 32

    def restored_at(inserts):
        shard = PacedLimiter(pace, 0, 2)
        shard.record(inserts=inserts)  # its snapshot's count; rollouts after it were lost
        shard.restored()
        return shard

    # the generators had started calls 0..16 (generator 0: 9 calls, numbers 0, 2, .., 16; generator 1: 8): 544
    # rollouts, 272 of them dealt to shard 0, which counts those as delivered
    shard = restored_at(200)
    shard.recover(None, [9, 8])
    assert shard.inserts == 272
    shard.record(inserts=16)
    shard.inserted(15, 16)   # call 15's piece, in flight at the restore and resent: counted once, in the credit
    assert shard.inserts == 272
    shard.record(inserts=16)
    shard.inserted(17, 16)   # call 17, started after the restore: counted as it arrives
    assert shard.inserts == 288 and shard.owed(11) == 284 and shard.can_sample(64, 11)  # calls 0..17: paid
    # before the driver's calls arrive, its first sample counts the pace's allowance: every call may_start allows at
    # 10 (0..17), the lead included; the calls then replace it, and what arrived meanwhile is not counted twice
    shard = restored_at(200)
    shard.recover(10)
    assert shard.inserts == 288 and shard.can_sample(64, 10)  # half of 576, not half of the 528 owed
    shard.record(inserts=16)
    shard.inserted(16, 16)   # call 16's piece, resent
    shard.recover(11)        # a later sample changes nothing
    assert shard.inserts == 304
    shard.recover(None, [9, 8])
    assert shard.inserts == 272
    # a restart the driver did not make gets no calls: the allowance stands, and the inserts since are not kept
    shard = restored_at(200)
    shard.recover(10)
    for call in range(18, 18 + 4097):
        shard.record(inserts=16)
        shard.inserted(call, 16)
    assert shard.inserts == 288 + 4097 * 16 and not shard._since
    # crediting owed(10) only (the oldest rule): call 18 is the first made again and pays shard 0 its 16 of it, and
    # version 11 waits for 284 with 264 + 16 = 280, for ever (no further call is allowed before that step)
    assert 264 + 16 < shard.owed(11) and not pace.may_start(19, 32, 10)
    # publishing every 2 steps: version 11 is sampled with weights of 10, so no more is allowed than at 10
    every2 = Pace(128, 3.2, 2, False, 1280, publish_every=2, rollouts_per_call=32)
    # budget(10) = required(11) + lead = 88 + 12·40 + 40 = 608 = 19·32: calls 0..18, call 19 would start at 608
    assert every2.started(11) == every2.started(10) == 19 * 32
    assert PacedLimiter(every2, 1, 2).restore_credit(11) == 304


def tiny() -> PaceSetting:
    return RunConfig.load(None, []).pace_setting  # the embedded default: configs/tiny_cpu.yaml


def test_an_in_place_restore_at_any_step_cannot_stall_the_pace_nor_loosen_it():
    # the tiny_cpu numbers, a random shard restored from its live snapshot at each of 60 steps, twice, in random
    # orders of calls, inserts in flight and samples: 120 runs; the oldest credit (owed(v) only) stalled 68 of 100
    s = tiny()
    assert (s.generators, s.shards, s.batch_size, s.capacity, s.rollouts_per_call) == (2, 2, 128, 1280, 32)
    share = s.rollouts_per_call // s.shards  # one call's share of a shard
    rng = np.random.default_rng(0)
    runs = [restore_run(s, 62, at, rng) for at in range(60) for _ in range(2)]
    assert [r.stall for r in runs if r.stall is not None] == []
    # the restored shard counts no more than it was dealt (the pace's allowance counted up to 6 shares more)
    assert max(r.surplus for r in runs) <= share and max(r.in_flight for r in runs) > share
    assert restore_stalls(s, 100, 60, seed=1) == []
    assert restore_stalls(s, 100, 60, seed=2, snapshot_every=1) == []
    # resumed at step 30, the restore writes a live snapshot: a restart before step 50 finds that, not nothing
    assert restore_stalls(s, 100, 60, seed=3, resumed_at=30) == []
    assert restore_stalls(s, 100, 60, seed=3, resumed_at=30, snapshot_on_resume=False)  # the old gap stalls


def test_the_restore_check_finds_the_old_credits_stall_and_surplus():
    def owed_only(limiter, version, calls):  # the first rule: forgive what the version owes
        limiter.inserts = max(limiter.inserts, limiter.owed(version))

    def allowance(limiter, version, calls):  # the second: every call the pace allows, kept for the run
        limiter.recover(version)

    assert len(restore_stalls(tiny(), 100, 60, credit=owed_only)) > 30
    rng, share = np.random.default_rng(1), tiny().rollouts_per_call // tiny().shards
    runs = [restore_run(tiny(), 60, int(rng.integers(60)), rng, credit=allowance) for _ in range(100)]
    assert all(r.stall is None for r in runs) and max(r.surplus for r in runs) >= 4 * share

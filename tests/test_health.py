"""Tier 0: what a stalled step means. Roles that do not answer are hung (recovered as if dead); with every role
answering, ranks that took their batch or never asked for it hold the step; a shard waiting on a rule stops the run."""

import asyncio

import pytest

from replay_rl.config import RunConfig
from replay_rl.health import Hung, NoAnswer, hung_roles
from replay_rl.replay.shard import NOT_ASKED, SERVED, ReplayShardImpl
from tests.replay.helpers import make_batch

SILENT = NoAnswer(10)
RULE = "0 eligible items < 4 requested"


@pytest.mark.parametrize("shards, generators, verdict", [
    ([SILENT, RULE], ["stats", SILENT], Hung(shards=(0,), generators=(1,))),
    ([RULE, SERVED], ["stats", SILENT], Hung(generators=(1,))),  # the pace waits on the paused generator
    ([RULE, SERVED], ["stats", "stats"], None),  # a rule: killing an actor would not change it
    (["ready", SERVED], ["stats", "stats"], None),  # a batch being handed over is not a hang
    ([NOT_ASKED, SERVED], ["stats", "stats"], Hung(learners="learner rank 0 did not ask for step 5's batch (hung)")),
    ([SERVED, SERVED], ["stats"], Hung(learners="learner ranks took step 5's batches but none finished the step (hung)")),
], ids=["shard-and-generator", "generator", "rule", "handing-over", "rank-not-asking", "ranks-after-sampling"])
def test_a_stall_names_what_hangs_or_leaves_it_to_the_rules(shards, generators, verdict):
    assert hung_roles(shards, generators, step=5) == verdict
    assert str(SILENT) == "no answer in 10s (paused or busy)"


def test_a_dead_role_or_a_restored_shard_that_waits_is_a_death_for_run_max_restarts():
    from replay_rl.replay.table import TableStats

    restored, fresh = TableStats(shard_restarts=1), TableStats()
    assert hung_roles(["dead", SERVED], ["stats"], step=5) == Hung(death="replay shard 0 died")
    assert hung_roles([RULE, SERVED], ["stats", "dead"], step=5) == Hung(death="generator 1 died")
    # a restored shard that waits lost what it waits for (a consume-once queue's rollouts are made once)
    assert hung_roles([SERVED, RULE], ["stats"], 5, [fresh, restored]) == Hung(
        death="replay shard 1 waits since its in-place restore (restart 1)")
    assert hung_roles([RULE, SERVED], ["stats"], 5, [fresh, restored]) is None  # the rule holds a fresh shard
    assert hung_roles([SILENT, RULE], ["stats"], 5, [SILENT, restored]) == Hung(shards=(0,))  # hung comes first


def test_a_shard_says_whether_its_rank_took_its_batch_or_has_not_asked(tmp_path):
    cfg = RunConfig.load(None, ["cluster.learners=1", "learner.batch_size=4", "replay.capacity=16",
                                "cluster.emulate=null", f"run.output_dir={tmp_path}"])
    shard = ReplayShardImpl(cfg, 0)

    async def scenario():
        assert shard.blocked_reason(4, 0) == NOT_ASKED
        waiting = asyncio.create_task(shard.sample(4, 0))
        await asyncio.sleep(0.05)
        assert "eligible items" in shard.blocked_reason(4, 0)  # the rank waits on a rule
        await shard.insert(make_batch(8))
        await waiting
        assert shard.blocked_reason(4, 0) == SERVED and shard.blocked_reason(4, 1) == NOT_ASKED
        await shard.sample(4, 1)  # its rank drew the next batch ahead: the one before was served all the same
        assert shard.blocked_reason(4, 0) == SERVED == shard.blocked_reason(4, 1)

    asyncio.run(scenario())

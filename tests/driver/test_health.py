"""Tier 0: what a stalled step means. Roles that do not answer are hung (recovered as if dead); with every role
answering, ranks that took their batch or never asked for it hold the step; a shard waiting on a rule stops the run."""

import asyncio
from types import SimpleNamespace

import pytest

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.driver.health import Hung, NoAnswer, hung_roles
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


def test_a_rank_that_gives_no_answer_while_all_took_their_batches_is_named_with_its_pid():
    # ranks answer pid() on a thread of their own, a step waiting in the allreduce included: the silent one is paused
    verdict = hung_roles([SERVED, SERVED], ["stats"], step=5, ranks=[(101, 101), (SILENT, 102)])
    assert verdict == Hung(learners="learner rank 1 (pid 102) gave no answer (paused or wedged) with step 5's "
                                    "batch (hung)")
    both = hung_roles([SERVED, SERVED], ["stats"], step=5, ranks=[(SILENT, 101), (SILENT, 102)])
    assert both.learners.startswith("learner ranks 0 (pid 101), 1 (pid 102) gave no answer")
    dead = hung_roles([SERVED, SERVED], ["stats"], step=5, ranks=[("dead", 101), (SILENT, 102)])
    assert dead.learners == "learner rank 0 (pid 101) died with step 5's batch (hung)"
    # every rank answering: a slow step or a collective that hangs, which no probe tells apart
    assert hung_roles([SERVED, SERVED], ["stats"], step=5, ranks=[(101, 101), (102, 102)]).learners == (
        "learner ranks took step 5's batches but none finished the step (hung)")


def test_a_dead_role_goes_through_its_own_restarts_and_a_restored_queue_that_waits_is_a_death():
    from replay_rl.replay.table_stats import TableStats

    # a dead shard or generator is recovered as supervision recovers a death: max_shard_restarts, and
    # max_generator_restarts, first (a Hung(death=...) restarted every role, or ended a run with max_restarts=0)
    assert hung_roles(["dead", SERVED], ["stats"], step=5) == Hung(shards=(0,), how="died")
    assert hung_roles([RULE, SERVED], ["stats", "dead"], step=5) == Hung(generators=(1,), how="died")
    # a consume-once queue restored in place that waits before its first batch since lost what it waits for
    waiting, fresh = TableStats(shard_restarts=1, restored_waiting=True), TableStats()
    assert hung_roles([SERVED, RULE], ["stats"], 5, [fresh, waiting]) == Hung(
        death="replay shard 1 waits since its in-place restore (restart 1)")
    assert hung_roles([RULE, SERVED], ["stats"], 5, [fresh, waiting]) is None  # the rule holds a fresh shard
    assert hung_roles([SILENT, RULE], ["stats"], 5, [SILENT, waiting]) == Hung(shards=(0,))  # hung comes first
    # restored once, served since (or a keep-all buffer): a later stall is the rule's, not the restore's
    served_since = TableStats(shard_restarts=1)
    assert hung_roles([SERVED, RULE], ["stats"], 5, [fresh, served_since]) is None


@pytest.mark.parametrize("replay_type, flagged", [("lifo_once", True), ("fifo", False)])
def test_a_restore_is_blamed_only_until_the_queue_serves_a_batch(tmp_path, replay_type, flagged):
    spec = shard_spec(RunConfig.load(None, ["cluster.learners=1", "learner.batch_size=4", "replay.capacity=16",
                                            "cluster.emulate=null", f"run.output_dir={tmp_path}",
                                            f"replay.type={replay_type}", "replay.snapshot_every_steps=1"]))

    async def scenario():
        first = ReplayShardImpl(spec, 0)
        await first.insert(make_batch(8))
        await first.sample(4, 0)
        assert not first.stats().restored_waiting
        back = ReplayShardImpl(spec, 0, reconstructed=True)  # Ray restarts it in place
        assert back.stats().restored_waiting is flagged and back.stats().shard_restarts == 1
        await back.insert(make_batch(8))
        await back.sample(4, 1)
        st = back.stats()
        assert not st.restored_waiting and st.shard_restarts == 1  # the count stays; the blame goes

    asyncio.run(scenario())


def test_a_dead_role_in_a_stall_is_recovered_by_its_own_restarts():
    from replay_rl.driver.supervisor import Supervisor

    class Recording(Supervisor):
        def diagnose(self, consumer_version):
            return "stalled", self.verdict

        def recover_shard(self, i, cause):
            self.calls.append(("shard", i, cause))

        def recover_generator(self, i, cause):
            self.calls.append(("generator", i, cause))

    supervisor = Recording(SimpleNamespace(cfg=RunConfig.load(None, [])), spawn=None)
    supervisor.calls, supervisor.verdict = [], Hung((1,), (0,), how="died")
    supervisor.recover_hung(3)
    assert supervisor.calls == [("shard", 1, "died"), ("generator", 0, "died")]


def test_learner_ranks_that_hold_a_step_are_hung_only_after_a_second_window(capsys):
    """A step a loaded box slowed gets one more run.stall_timeout_s before every role restarts from a checkpoint;
    a second stall of the same step is the ranks' death, and a later step's stall starts its own first window."""
    from replay_rl.driver.failures import RunFailed
    from replay_rl.driver.supervisor import Supervisor

    class Stalled(Supervisor):
        def diagnose(self, consumer_version):
            return "stalled", Hung(learners=f"learner ranks took step {consumer_version + 1}'s batches (hung)")

        def died(self, death, role=""):
            return RunFailed(death, death)

    supervisor = Stalled(SimpleNamespace(cfg=RunConfig.load(None, ["run.stall_timeout_s=20"])), spawn=None)
    supervisor.recover_hung(3)
    assert "learner ranks took step 4's batches yet: waiting run.stall_timeout_s=20s more" in capsys.readouterr().err
    with pytest.raises(RunFailed, match="step 4's batches"):
        supervisor.recover_hung(3)
    supervisor.recover_hung(4)  # the next step's first window
    with pytest.raises(RunFailed, match="step 5's batches"):
        supervisor.recover_hung(4)


def test_a_shard_says_whether_its_rank_took_its_batch_or_has_not_asked(tmp_path):
    spec = shard_spec(RunConfig.load(None, ["cluster.learners=1", "learner.batch_size=4", "replay.capacity=16",
                                            "cluster.emulate=null", f"run.output_dir={tmp_path}"]))
    shard = ReplayShardImpl(spec, 0)

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


def test_a_shard_dead_for_good_runs_out_of_its_restarts(monkeypatch):
    # a shard Ray will not restart answers no stats, so the restarts its stats report stop short: the driver's
    # own kills count too, or each stall would "restart" it again, for ever
    from replay_rl.driver.failures import RunFailed
    from replay_rl.replay.client import ReplayClient
    from replay_rl.driver.supervisor import Supervisor

    class NoCluster(Supervisor):
        def died(self, death, role=""):
            return RunFailed(death, death)

    monkeypatch.setattr("replay_rl.replay.client.ray.kill", lambda actor, no_restart: None)
    monkeypatch.setattr(NoCluster, "credit_restart", lambda self, i: None)
    handles = SimpleNamespace(cfg=RunConfig.load(None, ["run.max_shard_restarts=2"]), replay=ReplayClient([None]))
    supervisor = NoCluster(handles, spawn=None)
    supervisor.recover_shard(0, "died")
    supervisor.recover_shard(0, "died")
    with pytest.raises(RunFailed, match="replay shard 0 died and run.max_shard_restarts=2 restarts are used up"):
        supervisor.recover_shard(0, "died")

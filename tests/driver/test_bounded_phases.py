"""Tier 1: every phase of the driver outside the learner step is bounded by its config field. Stand-in actors that
sleep in a call are roles hung in a checkpoint, a publish, an eval, a resume or a recovery: the run stops waiting
after the bound, in one line naming the role and the phase, as a death (every role restarts: run.max_restarts)."""

import json
import re
import time

import pytest
import ray

from replay_rl.driver.checkpointer import Checkpointer
from replay_rl.driver.checkpoints import STATE_FILE
from replay_rl.driver.failures import RunFailed
from replay_rl.driver.supervision import publish
from replay_rl.driver.trainer import ledger_for
from tests.stand_ins import StandIn, stand_in_roles, stand_ins  # noqa: F401 - fixtures

pytestmark = pytest.mark.ray


def assert_named_death(failed: pytest.ExceptionInfo, line: str, started: float) -> None:
    """One line naming the role and the phase, a death (train() restarts every role on it), within the bound."""
    message = str(failed.value)
    assert "\n" not in message and message.startswith(line), message
    assert failed.value.death == line, failed.value.death
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("hang, line", [
    (("rank1",), "learner rank 1 hung in the checkpoint of step 3: not done in 2.5s (run.checkpoint_timeout_s)"),
    (("shard0",), "replay shard 0 hung in the checkpoint of step 3: not done in 2.5s "
                                "(run.checkpoint_timeout_s)"),
], ids=["learner-rank", "replay-shard"])
def test_a_role_hung_in_a_checkpoint_is_named_and_restarts_the_run(stand_in_roles, tmp_path, hang, line):
    roles = stand_in_roles(hang=hang)
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        Checkpointer(roles.handles, tmp_path, None).save(3, ledger_for(roles.handles.cfg))
    assert_named_death(failed, line, started)


def test_a_publish_hung_on_its_rank_is_named(stand_in_roles):
    roles = stand_in_roles(hang=("rank0",))
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.publish(4)
    assert_named_death(failed, "learner rank 0 hung in the weight publish of version 4: not done in 2.5s "
                               "(sync.timeout_s)", started)


@pytest.mark.parametrize("board, for_eval, sync", [("board", False, "object_store"), ("eval_board", True, "object_store"),
                                                   ("board", False, "nccl")], ids=["board", "eval-board", "nccl"])
def test_a_publish_held_by_a_paused_board_names_the_board(stand_in_roles, board, for_eval, sync):
    """Rank 0's put waits on a paused board (the soak's trial 0 read "learner rank 0 hung"): the board is named, also
    under sync.type=nccl, whose publish sets the board before it broadcasts."""
    nccl = ("sync.type=nccl", "sync.backend=gloo") if sync == "nccl" else ()
    roles = stand_in_roles(*nccl, hang=("rank0", board))
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        publish(roles.handles, 4, for_eval=for_eval)
    name = "evaluator's weight board" if for_eval else "weight board"
    to = " to the evaluator" if for_eval else ""
    assert_named_death(failed, f"{name} hung (no answer in 2.5s) during the weight publish{to} of version 4", started)


@pytest.mark.parametrize("rank0_hangs", [("rank0",), ()], ids=["held", "failed"])
def test_a_broadcast_held_or_failed_by_a_hung_generator_names_that_generator(stand_in_roles, rank0_hangs):
    """sync.type=nccl: rank 0's send waits on a frozen generator until sync.timeout_s, or fails with a closed
    connection; either way the hung (not dead) generator is named, and the run restarts (it was not, before)."""
    roles = stand_in_roles("sync.type=nccl", "sync.backend=gloo", hang=("gen1", *rank0_hangs),
                           fail=() if rank0_hangs else ("rank0",))
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.publish(4)
    assert_named_death(failed, "generator 1 hung (no answer in 2.5s) during the weight publish of version 4", started)


def test_an_evaluator_hung_in_its_eval_is_named(stand_in_roles):
    roles = stand_in_roles(hang=("evaluator",))
    assert roles.evals.start(0, {}) == []
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.evals.finished(wait=True)
    assert_named_death(failed, "evaluator hung in the eval of step 0: not done in 2.5s (run.eval_timeout_s)", started)


def test_an_eval_whose_weights_are_gone_is_skipped_in_one_line_and_the_run_goes_on(stand_in_roles, capsys):
    """The evaluator's board lost the step's version (its bytes freed): the eval is of those weights and no other,
    so it is skipped; it used to end the run as "evaluator failed in the eval of step 3"."""
    roles = stand_in_roles()
    lost = StandIn.remote()
    try:
        ref = lost.lose_weights.remote()
        ray.wait([ref], timeout=60)  # a new actor's start is not the eval's time
        roles.evals.pending = (3, {}, ref)
        assert roles.evals.finished(wait=True) == [] and roles.evals.pending is None
    finally:
        ray.kill(lost)
    assert capsys.readouterr().err.strip() == (
        "eval of step 3 skipped: weights version 3 is gone and no newer version came within 60s (sync.timeout_s); "
        "training goes on and the next eval is made")


@pytest.mark.parametrize("hang, line", [
    (("rank0",), "learner rank 0 hung in the resume from step 2: not done in 2.5s (run.resume_timeout_s)"),
    (("gen1",), "generator 1 hung in the resume from step 2: not done in 2.5s (run.resume_timeout_s)"),
], ids=["learner-rank-load", "generator-first-weights"])
def test_a_role_hung_in_a_resume_is_named(stand_in_roles, tmp_path, hang, line):
    roles = stand_in_roles(hang=hang)
    ledger = ledger_for(roles.handles.cfg)
    (tmp_path / "step_2").mkdir()
    (tmp_path / "step_2" / STATE_FILE).write_text(json.dumps({"step": 2, "ledger": ledger.state()}))
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        Checkpointer(roles.handles, tmp_path, None).resume(tmp_path / "step_2", ledger)
    assert_named_death(failed, line, started)


def test_a_shard_still_silent_after_its_recovery_is_named(stand_in_roles):
    """The wait after a recovery: a shard killed as hung answers the stats call it missed once it has restarted
    from its live snapshot; one that does not (a wedged filesystem) is named with the recovery."""
    roles = stand_in_roles(hang=("shard1",))
    roles.supervisor.recover_shard = lambda i, cause: None  # as if killed and restarting: still silent
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.replay_stats()
    assert_named_death(failed, "replay shard 1 hung in the recovery of replay shard 1: not done in 2.5s "
                               "(run.recovery_timeout_s)", started)
    assert re.search(r"; resume with run.resume_from=auto", str(failed.value))

"""Tier 1: every phase of the driver outside the learner step is bounded by its config field. Stand-in actors that
sleep in a call are roles hung in a checkpoint, a publish, an eval, a resume or a recovery: the run stops waiting
after the bound, in one line naming the role and the phase, as a death (every role restarts: run.max_restarts)."""

import json
import os
import re
import time

import pytest
import ray

from replay_rl.driver.checkpoints import STATE_FILE
from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed
from replay_rl.learner.group import LearnerGroup
from replay_rl.replay.client import ReplayClient
from replay_rl.replay.table import TableStats
from replay_rl.driver.roles import GeneratorSlot, Roles
from replay_rl.driver.trainer import ledger_for

pytestmark = pytest.mark.ray
HANG_S = 60  # longer than any bound below: a call that sleeps this long is a role hung in it
# 2.5 s: a stand-in that answers at once can still take ~1 s to be scheduled on a loaded 2-core box (0.5 s named
# healthy roles as hung there)
FAST = [f"{field}=2.5" for field in ("run.checkpoint_timeout_s", "run.eval_timeout_s", "run.resume_timeout_s",
                                     "run.recovery_timeout_s", "sync.timeout_s", "run.hung_probe_s",
                                     "run.stall_timeout_s")] + ["cluster.learners=2", "cluster.generators=2"]


@ray.remote(num_cpus=0, max_concurrency=4)
class StandIn:
    """Any role's calls: each answered at once ("fine"), after HANG_S ("hang": a role paused in it; its calls
    queue once its threads are taken, which is no answer all the same), or raising ("fail": as a rank's send fails
    when a broadcast member is gone)."""

    def __init__(self, mode: str = "fine") -> None:
        self.mode = mode

    def _answer(self, call: str, value=None):
        if self.mode == "fail":
            raise RuntimeError(f"{call}: connection closed by peer")
        if self.mode == "hang":
            time.sleep(HANG_S)
        return value

    def save(self, path, tag): return self._answer("save")
    def load(self, path, tag): return self._answer("load")
    def snapshot(self, path): return self._answer("snapshot", path)
    def restore(self, path): return self._answer("restore", 0)
    def resume_stream(self, rollouts): return self._answer("resume_stream")
    def start_at(self, calls): return self._answer("start_at")
    def await_version(self, version): return self._answer("await_version", version)
    def stats(self): return self._answer("stats", TableStats())
    def address(self): return self._answer("address", ("127.0.0.1", 0))
    def pid(self): return self._answer("pid", os.getpid())
    def forget(self, i): return self._answer("forget")
    def all(self): return self._answer("all", {})
    def evaluate_latest(self): return self._answer("evaluate_latest", {"pass@1": 0.5})

    def publish(self, version, for_eval=False):
        return self._answer("publish", {"version": version, "publish_s": 0.0, "publish_bytes": 0})

    def watch(self, other):
        """A generator's run(): it waits in a call on another role (an insert, a board read) until that role dies."""
        return ray.get(other.stats.remote())


class StandInLearners:
    """LearnerGroup's own fan-out calls, on stand-in ranks."""

    save, load, publish = LearnerGroup.save, LearnerGroup.load, LearnerGroup.publish

    def __init__(self, cfg, ranks) -> None:
        self.cfg, self.ranks = cfg, ranks


@pytest.fixture(scope="module")
def stand_ins(ray_cluster):
    """Three stand-ins for the whole module (a worker process costs seconds on a loaded box): one plays every role
    that answers, one every role that hangs, one every role whose call fails."""
    actors = {mode: StandIn.remote(mode) for mode in ("fine", "hang", "fail")}
    ray.get([a.__ray_ready__.remote() for a in actors.values()])
    yield actors
    for actor in actors.values():
        ray.kill(actor)


@pytest.fixture
def stand_in_roles(stand_ins, tmp_path):
    """Roles of stand-ins: stand_in_roles(hang=("rank1",)) has learner rank 1 hang in every call, and so on."""

    def make(*overrides, hang: tuple = (), fail: tuple = ()) -> Roles:
        cfg = RunConfig.load(None, [f"run.output_dir={tmp_path}", *FAST, *overrides])
        a = {name: stand_ins["hang" if name in hang else "fail" if name in fail else "fine"]
             for name in ("rank0", "rank1", "shard0", "shard1", "gen0", "gen1", "board", "eval_board", "reports",
                          "evaluator")}
        slots = [GeneratorSlot(a["gen0"]), GeneratorSlot(a["gen1"])]
        return Roles(cfg, ReplayClient([a["shard0"], a["shard1"]]), a["board"], a["eval_board"],
                     StandInLearners(cfg, [a["rank0"], a["rank1"]]), slots, a["evaluator"], "", reports=a["reports"])

    return make


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
        roles.checkpoint(tmp_path, 3, ledger_for(roles.cfg))
    assert_named_death(failed, line, started)


def test_a_publish_hung_on_its_rank_is_named(stand_in_roles):
    roles = stand_in_roles(hang=("rank0",))
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.publish(4)
    assert_named_death(failed, "learner rank 0 hung in the weight publish of version 4: not done in 2.5s "
                               "(sync.timeout_s)", started)


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
    assert roles.start_eval(0, {}) == []
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.finished_evals(wait=True)
    assert_named_death(failed, "evaluator hung in the eval of step 0: not done in 2.5s (run.eval_timeout_s)", started)


@pytest.mark.parametrize("hang, line", [
    (("rank0",), "learner rank 0 hung in the resume from step 2: not done in 2.5s (run.resume_timeout_s)"),
    (("gen1",), "generator 1 hung in the resume from step 2: not done in 2.5s (run.resume_timeout_s)"),
], ids=["learner-rank-load", "generator-first-weights"])
def test_a_role_hung_in_a_resume_is_named(stand_in_roles, tmp_path, hang, line):
    roles = stand_in_roles(hang=hang)
    ledger = ledger_for(roles.cfg)
    (tmp_path / "step_2").mkdir()
    (tmp_path / "step_2" / STATE_FILE).write_text(json.dumps({"step": 2, "ledger": ledger.state()}))
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.resume(tmp_path / "step_2", ledger)
    assert_named_death(failed, line, started)


def test_a_shard_still_silent_after_its_recovery_is_named(stand_in_roles):
    """The wait after a recovery: a shard killed as hung answers the stats call it missed once it has restarted
    from its live snapshot; one that does not (a wedged filesystem) is named with the recovery."""
    roles = stand_in_roles(hang=("shard1",))
    roles.recover_shard = lambda i, cause: None  # as if killed and restarting: still silent
    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        roles.replay_stats()
    assert_named_death(failed, "replay shard 1 hung in the recovery of replay shard 1: not done in 2.5s "
                               "(run.recovery_timeout_s)", started)
    assert re.search(r"; resume with run.resume_from=auto", str(failed.value))

"""Stand-in roles for the driver's tests (tests/driver/: test_bounded_phases, test_supervision, test_checkpointer):
actors that answer every role's calls at once, late, or with an error, and Roles built of them. Fixtures: stand_ins,
stand_in_roles."""

import os
import time

import pytest
import ray

from replay_rl.config import RunConfig
from replay_rl.driver.handles import GeneratorSlot, RoleHandles
from replay_rl.driver.roles import Roles
from replay_rl.generation.backend import HalfLoaded
from replay_rl.learner.group import LearnerGroup
from replay_rl.replay.client import ReplayClient
from replay_rl.replay.table_stats import TableStats
from replay_rl.sync.base import WeightsGone

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

    def save(self, path, tag): return self._answer("save", {})  # the sha256 of the files it wrote: none
    def load(self, path, tag): return self._answer("load")
    def snapshot(self, path): return self._answer("snapshot", path)
    def restore(self, path): return self._answer("restore", 0)
    def resume_stream(self, rollouts): return self._answer("resume_stream")
    def start_at(self, calls): return self._answer("start_at")
    def await_version(self, version): return self._answer("await_version", version)
    def stats(self): return self._answer("stats", TableStats())
    def address(self): return self._answer("address", ("127.0.0.1", 0))
    def pid(self): return self._answer("pid", os.getpid())
    def version(self): return self._answer("version", 0)
    def forget(self, i): return self._answer("forget")
    def all(self): return self._answer("all", {})
    def samples(self): return self._answer("samples", [])
    def evaluate_latest(self): return self._answer("evaluate_latest", {"pass@1": 0.5})

    def publish(self, version, for_eval=False):
        return self._answer("publish", {"version": version, "publish_s": 0.0, "publish_bytes": 0})

    def run(self): return self._answer("run")

    def lose_weights(self):
        """A generator's run() that found its weights gone and no newer version within sync.timeout_s."""
        raise WeightsGone("weights version 3 is gone and no newer version came within 60s (sync.timeout_s)")

    def half_load(self):
        """A vLLM generator's run() whose weight stream broke off part way."""
        raise HalfLoaded("the stream of weights version 3 failed part way (OSError: disk): this engine holds two "
                         "versions and generates no more")

    def watch(self, other):
        """A generator's run(): it waits in a call on another role (an insert, a board read) until that role dies."""
        return ray.get(other.stats.remote())


class StandInLearners:
    """LearnerGroup's own fan-out calls, on stand-in ranks."""

    save, load, publish = LearnerGroup.save, LearnerGroup.load, LearnerGroup.publish

    def __init__(self, cfg, ranks) -> None:
        self.cfg, self.ranks = cfg, ranks
        self.pids = [None] * len(ranks)  # a stand-in's pid says nothing of a rank's


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
        return Roles(RoleHandles(cfg, ReplayClient([a["shard0"], a["shard1"]]), a["board"], a["eval_board"],
                                 StandInLearners(cfg, [a["rank0"], a["rank1"]]), slots, a["evaluator"], "",
                                 reports=a["reports"]))

    return make

"""Tier 1: the driver's per-step stats call finds hung roles, with stand-in actors (a paused shard and generator are
stand-ins whose stats calls answer late; the recoveries themselves run in tests/driver/test_faults.py)."""

import time

import pytest
import ray

from replay_rl.config import RunConfig
from replay_rl.replay.client import ReplayClient
from replay_rl.replay.table_stats import TableStats
from replay_rl.driver.handles import GeneratorSlot, RoleHandles
from replay_rl.driver.roles import Roles

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class LateStats:
    """A shard's or a generator's stats call, answered after `delay` seconds (paused, then let go)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def stats(self) -> TableStats:
        time.sleep(self.delay)
        return TableStats()


def test_a_shard_silent_on_its_stats_call_is_recovered_with_the_generators_hung_beside_it(ray_cluster):
    cfg = RunConfig.load(None, ["cluster.learners=2", "cluster.generators=3", "run.stall_timeout_s=2",
                                "run.hung_probe_s=2"])
    shards, generators = [LateStats.remote(0), LateStats.remote(8)], [LateStats.remote(d) for d in (0, 8, 0)]
    ray.get([a.__ray_ready__.remote() for a in shards + generators])  # started: only a late answer counts
    roles = Roles(RoleHandles(cfg, ReplayClient(shards), None, None, None, [GeneratorSlot(g) for g in generators], None,
                              ""))
    recovered = []
    roles.supervisor.recover_shard = lambda i, cause: recovered.append(("replay shard", i, cause))
    roles.supervisor.recover_generator = lambda i, cause: recovered.append(("generator", i, cause))
    roles.replay_stats()
    assert recovered == [("replay shard", 1, "did not answer a stats call in 2s"),
                         ("generator", 1, "did not answer in 2s beside a hung shard")]
    recovered.clear()
    shards[1], generators[1] = LateStats.remote(0), LateStats.remote(0)  # as restarted: every call answers
    ray.get([shards[1].__ray_ready__.remote(), generators[1].__ray_ready__.remote()])
    roles.handles.replay.shards, roles.handles.slots[1].actor = shards, generators[1]
    roles.replay_stats()
    assert recovered == []

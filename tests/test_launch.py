"""Tier 1: forming the sync.type=nccl broadcast group is bounded by run.start_timeout_s, with stand-in actors (a
generator that never joins is named in one line instead of holding the others in the rendezvous for 30 min)."""

import time
from types import SimpleNamespace

import pytest
import ray

from replay_rl.config import RunConfig
from replay_rl.learner.group import LearnerStartTimeout
from replay_rl.driver.launch import join_weight_group

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class Member:
    def __init__(self, hangs: bool = False):
        self.hangs = hangs

    def ready(self):
        return True

    def address(self):
        return "127.0.0.1", 1

    def join_weight_group(self, *args):
        if self.hangs:
            time.sleep(60)  # a generator whose model never loads


def test_a_member_that_never_joins_the_weight_group_is_named_within_start_timeout(ray_cluster):
    cfg = RunConfig.load(None, ["run.start_timeout_s=1"])
    learners = SimpleNamespace(ranks=[Member.remote()])  # rank 0 gives the group's address, as a LearnerRank does
    generators = [Member.remote(), Member.remote(hangs=True)]
    ray.get([a.ready.remote() for a in [*learners.ranks, *generators]])  # started: only the join is timed
    t0 = time.monotonic()
    with pytest.raises(LearnerStartTimeout, match=r"^generator 1 did not start within 1s \(run.start_timeout_s\)"):
        join_weight_group(cfg, learners, generators)
    assert time.monotonic() - t0 < 30
    for actor in [*learners.ranks, *generators]:
        ray.kill(actor)

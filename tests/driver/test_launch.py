"""Tier 1: forming the sync.type=nccl broadcast group is bounded by run.start_timeout_s, with stand-in actors (a
generator that never joins is named in one line instead of holding the others in the rendezvous for 30 min), and
waits for every member to be built before the group's store starts its sync.timeout_s (real gloo group)."""

import os
import socket
import time
from types import SimpleNamespace

import pytest
import ray

from replay_rl.config import RunConfig
from replay_rl.learner.group import LearnerStartTimeout
from replay_rl.driver.launch import join_weight_group
from replay_rl.sync.collective import BroadcastGroup

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class Member:
    def __init__(self, hangs: bool = False, build_s: float = 0.0, forms_group: bool = True):
        time.sleep(build_s)  # a generator still loading its model
        self.hangs, self.forms_group, self.group = hangs, forms_group, None

    def pid(self):
        return os.getpid()

    def address(self):
        return "127.0.0.1", free_port()

    def join_weight_group(self, host, port, *rank_world):
        if self.hangs:
            time.sleep(60)  # a generator whose model never loads
        if not self.forms_group:  # the others would wait in the store for the hung one, and be named with it
            return
        rank, world = rank_world if len(rank_world) == 2 else (0, *rank_world)  # rank 0 passes no rank
        self.group = BroadcastGroup(host, port, rank, world, "gloo", timeout_s=1.0)  # sync.timeout_s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def test_a_member_that_never_joins_the_weight_group_is_named_within_start_timeout(ray_cluster):
    cfg = RunConfig.load(None, ["run.start_timeout_s=1"])
    learners = SimpleNamespace(ranks=[Member.remote(forms_group=False)])  # rank 0 gives the group's address
    generators = [Member.remote(forms_group=False), Member.remote(hangs=True)]
    ray.get([a.pid.remote() for a in [*learners.ranks, *generators]])  # started: only the join is timed
    t0 = time.monotonic()
    with pytest.raises(LearnerStartTimeout, match=r"^generator 1 did not start within 1s \(run.start_timeout_s\)"):
        join_weight_group(cfg, learners, generators)
    assert time.monotonic() - t0 < 30
    for actor in [*learners.ranks, *generators]:
        ray.kill(actor)


def test_the_weight_group_forms_after_a_generator_slower_to_build_than_its_store_waits(ray_cluster):
    """The group's store waits sync.timeout_s (here 1 s) for its members; a generator still building for 3 s (a model
    loading on a busy node, or waiting for a restarted run's resources) joined too late and failed the run in CI."""
    cfg = RunConfig.load(None, ["run.start_timeout_s=60"])
    learners = SimpleNamespace(ranks=[Member.remote()])
    generators = [Member.remote(), Member.remote(build_s=3.0)]
    join_weight_group(cfg, learners, generators)
    for actor in [*learners.ranks, *generators]:
        ray.kill(actor)

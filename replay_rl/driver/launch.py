"""Building every role anew: the replay shards, the weight boards, the learner group, the generators (in one
broadcast group under sync.type=nccl), the generators' reports and the evaluator."""

from __future__ import annotations

import time

import ray

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.evaluation.evaluator import Evaluator
from replay_rl.generation.reports import GeneratorReports
from replay_rl.learner.group import LearnerGroup, await_start
from replay_rl.replay.client import ReplayClient, create_shards
from replay_rl.driver.placement import placement_for
from replay_rl.driver.handles import GeneratorSlot, RoleHandles, spawn_generator
from replay_rl.driver.roles import Roles
from replay_rl.sync.board import WeightBoard


def build(cfg: RunConfig, model_path: str, run_restarts: int = 0, place_by: float | None = None) -> Roles:
    """Every role, anew. place_by: a restart's monotonic deadline for the learners' placement (run.node_wait_s)."""
    c = cfg.cluster
    placement = placement_for(cfg)  # the driver's node, or each role's bundle of a reservation the run holds
    here = placement.here()
    shards = create_shards(shard_spec(cfg), here)
    board, eval_board, reports = (a.options(scheduling_strategy=here).remote()
                                  for a in (WeightBoard, WeightBoard, GeneratorReports))
    learners = LearnerGroup(cfg, model_path, shards, board, eval_board, place_by, placement.learner_bundles())
    generators = [spawn_generator(cfg, i, model_path, shards, board, reports, strategy=placement.generator(i))
                  for i in range(c.generators)]
    if cfg.sync.type == "nccl":  # rank 0 of the learners + every generator form one broadcast group
        try:
            join_weight_group(cfg, learners, generators)
        except BaseException:
            for actor in [*generators, board, eval_board, reports, *shards]:
                ray.kill(actor)
            learners.shutdown()
            raise
    evaluator = Evaluator.options(num_cpus=0, num_gpus=c.gpus_per_evaluator,
                                  scheduling_strategy=placement.evaluator()).remote(cfg, model_path, eval_board)
    slots = [GeneratorSlot(g) for g in generators]
    handles = RoleHandles(cfg, ReplayClient(shards), board, eval_board, learners, slots, evaluator, model_path,
                          reports=reports, layout=placement)
    return Roles(handles, run_restarts=run_restarts)


def join_weight_group(cfg: RunConfig, learners: LearnerGroup, generators: list) -> None:
    """Rank 0 and every generator form the broadcast group, bounded by run.start_timeout_s: a member that never
    comes (a generator whose model does not load) would leave the others in the rendezvous for NCCL's 30 min."""
    world, bound_s = len(generators) + 1, cfg.run.start_timeout_s
    deadline = time.monotonic() + bound_s
    # every member built first: the group's store waits only sync.timeout_s for its members, and a generator still
    # loading its model under load missed it (CI: 1/3 joined after 61 s)
    await_start({g.pid.remote(): f"generator {i}" for i, g in enumerate(generators)}, deadline, bound_s)
    # then a port of its own, just before the store binds it: the rendezvous' port is held by the learners' process
    # group (EADDRINUSE, seen in CI)
    address = learners.ranks[0].address.remote()
    await_start({address: "learner rank 0's address"}, deadline, bound_s)
    host, port = ray.get(address)
    joins = {learners.ranks[0].join_weight_group.remote(host, port, world): "learner rank 0's weight broadcast group"}
    joins |= {g.join_weight_group.remote(host, port, i + 1, world): f"generator {i}" for i, g in enumerate(generators)}
    await_start(joins, deadline, bound_s)

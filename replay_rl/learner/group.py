"""LearnerGroup: T LearnerRank actors in one placement group, one rendezvous, fan-out calls."""

from __future__ import annotations

import time

import numpy as np
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from replay_rl.config import RunConfig
from replay_rl.learner.worker import LearnerRank


class LearnerStartTimeout(TimeoutError):
    pass


class LearnerGroup:
    def __init__(self, cfg: RunConfig, model_path: str, shards: list, board, eval_board,
                 place_by: float | None = None, bundles: tuple | None = None) -> None:
        """Placement and start within run.start_timeout_s. place_by: a restart after a death, perhaps of a node,
        whose placement may wait for a replacement node until this monotonic deadline (run.node_wait_s, counted from
        the death); the ranks then start within run.start_timeout_s. bundles: (placement group, the ranks' bundle
        indices) of a reservation the run already holds (a study trial's, driver/placement.py), used instead of a
        group of its own, which would book the ranks' resources twice."""
        self.cfg, c = cfg, cfg.cluster
        self.owns_pg = bundles is None
        self.pg, self.indices = bundles or (placement_group(c.bundles()[-c.learners:], strategy="PACK"),
                                            list(range(c.learners)))
        self.ranks: list = []
        self.pids: list[int] = []
        bound_s = cfg.run.start_timeout_s
        try:  # bounded: a rank alone in the rendezvous would otherwise wait out gloo's or NCCL's 30 min
            deadline = time.monotonic() + bound_s
            await_start({self.pg.ready(): f"learner placement of {c.learners} ranks"}, place_by or deadline,
                        *((cfg.run.node_wait_s, "run.node_wait_s") if place_by else (bound_s, "run.start_timeout_s")))
            if place_by:  # after waiting for a node, the ranks' start has its own bound
                deadline = time.monotonic() + bound_s
            self.ranks = [
                LearnerRank.options(num_cpus=c.cpus_per_actor, num_gpus=c.gpus_per_learner,
                                    resources=c.learner_resources or None,  # drawn from the bundle, as CPUs are
                                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, self.indices[i])).remote(
                    cfg, i, model_path, shards[i], board, eval_board)
                for i in range(c.learners)]
            address = self.ranks[0].address.remote()
            await_start({address: "learner rank 0"}, deadline, bound_s)
            await_start({r.setup.remote(*ray.get(address)): f"learner rank {i}" for i, r in enumerate(self.ranks)},
                        deadline, bound_s)
            # kept for the line that names a rank that stops answering (paused, wedged): where to look at it
            self.pids = ray.get([r.pid.remote() for r in self.ranks], timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.shutdown()  # nothing is left holding its CPUs or GPUs, or waiting in the rendezvous
            raise

    def step(self, consumer_version: int, draw_ahead: bool = False) -> dict[str, float]:
        """One optimizer step of the whole group; metrics averaged over ranks (max for *_max)."""
        return self.gather_step(self.step_async(consumer_version, draw_ahead))

    def step_async(self, consumer_version: int, draw_ahead: bool = False) -> list:
        return [r.step.remote(consumer_version, draw_ahead) for r in self.ranks]

    @staticmethod
    def gather_step(refs: list) -> dict[str, float]:
        per_rank = ray.get(refs)
        return {k: combine(k, [m[k] for m in per_rank]) for k in per_rank[0]}

    def publish(self, version: int, for_eval: bool = False, receivers: tuple = (), gather=ray.get) -> dict[str, float]:
        """receivers: refs of calls that take part in this publish (generators awaiting it), waited on with it.
        Rank 0 sends; the others take part only under ZeRO-3, whose buckets they help gather. gather: how the
        calls are waited for (the driver bounds its phases: supervision.Phase)."""
        ranks = self.ranks if self.cfg.learner.zero_stage == 3 else self.ranks[:1]
        return gather([*[r.publish.remote(version, for_eval) for r in ranks], *receivers])[0]

    def full_state(self):
        return ray.get([r.full_state.remote() for r in self.ranks])

    def train_on(self, batches: list) -> list[dict[str, float]]:
        return ray.get([r.train_on.remote(b) for r, b in zip(self.ranks, batches)])

    def save(self, path: str, tag: str, gather=ray.get) -> dict[str, str]:
        """Every rank's save; the sha256 of each file the ranks wrote, relative to path (taken on the ranks)."""
        return {name: digest for part in gather([r.save.remote(path, tag) for r in self.ranks]) for name, digest in
                part.items()}

    def load(self, path: str, tag: str, gather=ray.get) -> None:
        gather([r.load.remote(path, tag) for r in self.ranks])

    def shutdown(self) -> None:
        for r in self.ranks:
            ray.kill(r)
        if self.owns_pg:  # a reservation held for the whole run is its owner's to give back
            ray.util.remove_placement_group(self.pg)


def await_start(pending: dict, deadline: float, bound_s: float, field: str = "run.start_timeout_s") -> None:
    """Wait for every ref in `pending` (ref -> the role it starts, e.g. "learner rank 1"); the first error is raised
    as soon as it comes, and what has not started by `deadline` is named in one line."""
    pending = dict(pending)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            raise LearnerStartTimeout(f"{', '.join(pending.values())} did not start within {bound_s:g}s "
                                      f"({field}); the actors' logs are in Ray's session folder "
                                      "(/tmp/ray/session_latest/logs)")
        ray.get(done[0])
        del pending[done[0]]


def combine(key: str, values: list[float]) -> float:
    """One rank-level metric over ranks: max for *_max, else the mean; NaN (a rank without fresh rollouts for the
    agreement check) is left out, and NaN only when every rank has it."""
    finite = [v for v in values if v == v]
    if not finite:
        return float("nan")
    return float(max(finite) if key.endswith("_max") else np.mean(finite))

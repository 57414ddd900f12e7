"""LearnerRank: one learner rank as a Ray actor, holding its LearnerEngine. step() = sample own shard →
engine.train_on (loss → backward → step); publish() sends the engine's weight buckets to the generators.

All ranks form one torch.distributed group (gloo on CPU, NCCL on GPU) that the actors set up themselves, so no
launcher is needed. The training itself lives in engine.py, which imports no Ray.
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import ray

from replay_rl.config import RunConfig
from replay_rl.learner.engine import LearnerEngine
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.replay.client import ShardDraws
from replay_rl.rollout import RolloutBatch
from replay_rl.sync.factory import make_weight_sync
from replay_rl.sync.object_store import ObjectStorePublisher
from replay_rl.tasks import make_task
from replay_rl.tasks.weight_probe import weight_probe


class LearnerRankImpl:
    def __init__(self, cfg: RunConfig, rank: int, model_path: str, shard, board, eval_board) -> None:
        self.cfg, self.rank = cfg, rank
        self.engine = LearnerEngine(cfg, rank, model_path)
        self.draws = ShardDraws(shard, cfg.rank_batch_size)
        self.publisher = make_weight_sync(cfg.sync, "publisher", board)
        self.eval_publisher = ObjectStorePublisher(eval_board)  # the evaluator always reads the object store
        self.probe = (weight_probe(make_task(cfg.task, cfg.task.split_seed), cfg.model.chat_template,
                                   load_tokenizer(model_path))
                      if cfg.sync.weight_check else None)

    # the engine's own calls, which LearnerGroup makes on each rank
    def setup(self, master_addr: str, master_port: int) -> None:
        self.engine.setup(master_addr, master_port)

    def train_on(self, batch: RolloutBatch, ages: np.ndarray | None = None) -> dict[str, float]:
        return self.engine.train_on(batch, ages)

    def full_state(self) -> dict:
        return self.engine.full_state()

    def save(self, path: str, tag: str) -> dict[str, str]:
        return self.engine.save(path, tag)

    def load(self, path: str, tag: str) -> None:
        self.engine.load(path, tag)

    def address(self) -> tuple[str, int]:
        """This node's IP and a free port: rank 0's becomes the group's rendezvous."""
        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    @ray.method(concurrency_group="probe")
    def pid(self) -> int:
        """Answered on a thread of its own, even while a step waits in the group's allreduce: a rank that gives no
        answer is paused or wedged as a process, not busy (health.hung_roles names it)."""
        return os.getpid()

    def step(self, consumer_version: int, draw_ahead: bool = False) -> dict[str, float]:
        """Sample this rank's sub-batch from its own shard (or take the one drawn ahead) and take one optimizer step
        (all ranks together). draw_ahead: ask for the next step's batch as this one ends, so the shard serves it
        while the weights publish."""
        batch, info, wait = self.draws.take(consumer_version)
        metrics = self.engine.train_on(batch, info.ages)
        self.draws.feedback = {"grad_norm": metrics["grad_norm"], "entropy": metrics["entropy"]}
        if draw_ahead:
            self.draws.ahead(consumer_version + 1)
        return metrics | info.rules | {
            "sample_wait_s": wait, "age_mean": float(info.ages.mean()), "age_max": float(info.ages.max()),
            "reuse_mean": float(info.reuse.mean()), "reward_mean": float(batch.reward.mean()),
            "completion_len": float(np.diff(batch.completion_offsets).mean()),
            # rollouts whose frozen advantage is 0: with 0/1 rewards, their group's rewards were all equal, and GRPO
            # takes no gradient from them though they fill batch slots
            "zero_variance_share": float((batch.advantage == 0).mean()),
            "truncated_share": batch.truncated_share()}

    def join_weight_group(self, host: str, port: int, world_size: int) -> None:
        """Rank 0 only: become rank 0 of the broadcast group to the generators (sync.type=nccl)."""
        self.publisher.connect(host, port, 0, world_size)

    def publish(self, version: int, for_eval: bool = False):
        """Rank 0 publishes bucket by bucket (to the generators, or to the evaluator's board); under ZeRO-3 every
        rank joins each bucket's gather, otherwise the other ranks do nothing. Rank 0 returns version, bytes and
        seconds: the whole publish, and its gather and send phases."""
        t0 = time.perf_counter()
        # the generators' proof that they load these weights (sync/weight_check.py); a forward: every rank under ZeRO-3
        probe = (self.engine.probe_logprobs(self.probe) if self.probe is not None and not for_eval and
                 (self.rank == 0 or self.cfg.learner.zero_stage == 3) else None)
        if self.rank != 0:
            if self.cfg.learner.zero_stage == 3:
                for _ in self.engine.bucket_tensors(self.engine.weight_plan):
                    pass
            return None
        plan = self.engine.weight_plan
        probe_s = time.perf_counter() - t0
        handle = (self.eval_publisher if for_eval else self.publisher).publish(plan, self.engine.bucket_tensors(plan),
                                                                                version, probe)
        return {"version": handle.version, "publish_bytes": handle.nbytes, "publish_s": time.perf_counter() - t0,
                "publish_gather_s": handle.gather_s, "publish_send_s": handle.send_s, "publish_probe_s": probe_s}


# a concurrency group makes the actor threaded: its other methods run on one thread of their own, not the main
# thread (Ray #54639), so code here must not install signal handlers; one default thread keeps CUDA's per-thread
# device and DeepSpeed's state on one thread
LearnerRank = ray.remote(max_restarts=0, concurrency_groups={"probe": 1})(LearnerRankImpl)

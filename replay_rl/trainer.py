"""The driver: build the roles from the config, then run the paper's loop.

    generators (W) ──insert──► replay shards (T) ──sample──► learner ranks (T) ──publish──► generators

`replay` and `on_policy` differ only in the Table preset the shards build (fifo vs lifo_once): the loop has no mode.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import ray

from replay_rl.accounting import ComputeLedger
from replay_rl.config import RunConfig
from replay_rl.evaluator import Evaluator
from replay_rl.generation.generator import Generator
from replay_rl.learner.group import LearnerGroup
from replay_rl.metrics import MetricsSink
from replay_rl.replay.client import ReplayClient, create_shards
from replay_rl.replay.table import TableStats
from replay_rl.sync.object_store import WeightBoard
from replay_rl.warmstart import ensure_model


@dataclass
class Roles:
    cfg: RunConfig
    replay: ReplayClient
    board: object
    eval_board: object
    learners: LearnerGroup
    generators: list
    evaluator: object
    runs: list | None = None

    def start_generators(self) -> None:
        self.runs = [g.run.remote() for g in self.generators]

    def learner_step(self, consumer_version: int) -> dict[str, float]:
        """learners.step, but a generator or a rank that dies meanwhile fails the run now, instead of leaving the
        other ranks waiting in the allreduce or the shard until their timeouts."""
        pending = self.learners.step_async(consumer_version)
        while True:
            ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=1.0)
            if not waiting:
                return self.learners.gather_step(pending)
            ray.get(ready)
            self.raise_if_generator_died()

    def raise_if_generator_died(self) -> None:
        done, _ = ray.wait(self.runs, num_returns=len(self.runs), timeout=0)
        if done:
            ray.get(done)  # re-raises the generator's exception in the driver
            raise RuntimeError("a generator stopped on its own; see its log")

    def evaluate(self, step: int) -> dict[str, float]:
        """Publish the current weights to the evaluator's own board, then score them on the eval split."""
        self.learners.publish(version=step, for_eval=True)
        return {f"eval/{k}": v for k, v in ray.get(self.evaluator.evaluate_latest.remote()).items()}

    def update(self, ledger: ComputeLedger, replay: TableStats, learner: dict[str, float],
               sync: dict[str, float] | None) -> None:
        gens = ray.get([g.stats.remote() for g in self.generators])
        ledger.k_inf = replay.inserts
        ledger.k_train += self.cfg.learner.batch_size
        ledger.tokens = sum(g.tokens for g in gens)
        ledger.generator_busy_s = sum(g.busy_s for g in gens)
        ledger.extra["generator_version_min"] = min(g.version for g in gens)  # how far behind the slowest one is
        ledger.learner_busy_s = learner["learner_busy_s"] * self.cfg.cluster.learners
        if sync:
            ledger.sync_s += sync["publish_s"]
            ledger.sync_bytes += sync["publish_bytes"]

    def checkpoint(self, out: Path, step: int, ledger: ComputeLedger) -> Path:
        path = out / "checkpoints" / f"step_{step}"
        self.learners.save(str(path), tag=f"step_{step}")
        self.replay.snapshot(path / "replay")  # each shard snapshots atomically under its own lock
        (path / "trainer_state.json").write_text(json.dumps({"step": step, "ledger": ledger.__dict__}))
        return path

    def resume(self, path: str, ledger: ComputeLedger) -> int:
        state = json.loads((Path(path) / "trainer_state.json").read_text())
        step = state["step"]
        self.learners.load(path, tag=f"step_{step}")
        self.replay.restore(Path(path) / "replay")
        ledger.__dict__.update(state["ledger"])
        self.learners.publish(version=step)
        return step

    def shutdown(self) -> None:
        for g in self.generators:
            g.stop.remote()
        if self.runs:
            ray.wait(self.runs, num_returns=len(self.runs), timeout=30)
        for actor in [*self.generators, self.evaluator, self.board, self.eval_board, *self.replay.shards]:
            ray.kill(actor)
        self.learners.shutdown()


def connect(cfg: RunConfig) -> bool:
    """Join the configured (or, under `ray job submit`, the ambient) cluster, else start a local one.
    Returns True when this process started Ray and must shut it down."""
    if ray.is_initialized():
        return False
    local = cfg.cluster.address is None and "RAY_ADDRESS" not in os.environ
    # a submitted job already carries its runtime_env (cluster/submit.py); only a local cluster gets ours
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"}}
    # address="local" always starts a fresh cluster, never one that another process left running here
    ray.init(address="local" if local else cfg.cluster.address, include_dashboard=False, log_to_driver=False,
             **({"num_cpus": max(2, os.cpu_count() or 2), "runtime_env": env} if local else {}))
    check_fits(cfg, ray.cluster_resources())
    return local


def check_fits(cfg: RunConfig, resources: dict[str, float]) -> None:
    c = cfg.cluster
    gpus = c.generators * c.gpus_per_generator + c.learners * c.gpus_per_learner
    cpus = (c.generators + c.learners + 1) * c.cpus_per_actor
    if gpus > resources.get("GPU", 0) or cpus > resources.get("CPU", 0):
        raise RuntimeError(f"cluster too small for W={c.generators}, T={c.learners}: needs {gpus:g} GPUs and {cpus:g} "
                           f"CPUs, the Ray cluster has {resources.get('GPU', 0):g} GPUs and {resources.get('CPU', 0):g}"
                           " CPUs; lower cluster.generators / cluster.learners or add nodes")


def build(cfg: RunConfig, model_path: str) -> Roles:
    c = cfg.cluster
    shards = create_shards(cfg)
    board, eval_board = WeightBoard.remote(), WeightBoard.remote()
    learners = LearnerGroup(cfg, model_path, shards, board, eval_board)
    generators = [Generator.options(num_cpus=c.cpus_per_actor, num_gpus=c.gpus_per_generator).remote(
        cfg, i, model_path, shards, board) for i in range(c.generators)]
    if cfg.sync.type == "nccl":  # rank 0 of the learners + every generator form one broadcast group
        host, port = ray.get(learners.ranks[0].address.remote())
        world = c.generators + 1
        ray.get([learners.ranks[0].join_weight_group.remote(host, port, world),
                 *[g.join_weight_group.remote(host, port, i + 1, world) for i, g in enumerate(generators)]])
    evaluator = Evaluator.options(num_cpus=0).remote(cfg, model_path, eval_board)
    return Roles(cfg, ReplayClient(shards), board, eval_board, learners, generators, evaluator)


def ledger_for(cfg: RunConfig) -> ComputeLedger:
    """The run's ledger: the emulated W, T and μ under cluster.emulate, else the real W and T with μ from counts."""
    e, c = cfg.cluster.emulate, cfg.cluster
    if e is None:
        return ComputeLedger(c.generators, c.learners, cfg.learner.batch_size)
    return ComputeLedger(e.generators, e.learners, cfg.learner.batch_size, e.mu)


def train(cfg: RunConfig, progress=None) -> dict:
    """Run training; returns the final record (eval scores + ledger). progress(step, record) is called per step."""
    out = Path(cfg.run.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.run.resume_from and not (Path(cfg.run.resume_from) / "trainer_state.json").is_file():
        raise FileNotFoundError(f"run.resume_from={cfg.run.resume_from}: not a checkpoint (no trainer_state.json); "
                                "pass a checkpoints/step_N folder written by a previous run")
    cfg.dump_json(out / "config.json")
    owns_ray = connect(cfg)  # first: a cluster too small for W/T fails before any model work
    model_path = str(ensure_model(cfg).resolve())
    sink, ledger = MetricsSink(out), ledger_for(cfg)
    roles = None
    try:
        roles = build(cfg, model_path)
        start = roles.resume(cfg.run.resume_from, ledger) if cfg.run.resume_from else 0
        t0 = time.perf_counter() - ledger.wall_s
        if start == 0:  # where RL starts from, so every run reports before → after
            sink.log(0, "eval", roles.evaluate(0) | ledger.summary())
        roles.start_generators()
        record: dict = {}
        step = start
        replay = roles.replay.stats()
        for step in range(start + 1, cfg.run.steps + 1):
            metrics = roles.learner_step(consumer_version=step - 1)           # sample → loss → optimizer step
            sync = roles.learners.publish(version=step) if step % cfg.sync.every_steps == 0 else None
            roles.raise_if_generator_died()
            ledger.wall_s = time.perf_counter() - t0
            replay = roles.replay.stats()
            roles.update(ledger, replay, metrics, sync)
            record = {**metrics, **replay.summary(), **ledger.summary(), **(sync or {})}
            sink.log(step, "train", record)
            if step % cfg.run.eval_every == 0 or step == cfg.run.steps:
                record |= roles.evaluate(step)
                sink.log(step, "eval", {k: v for k, v in record.items() if k.startswith("eval/")} | ledger.summary())
            if cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0:
                roles.checkpoint(out, step, ledger)
            if progress:
                progress(step, record)
            if cfg.run.rollout_budget and ledger.k_inf >= cfg.run.rollout_budget:
                break
        # the buffer's whole age / reuse / since-last-use histograms, for the benchmark's distributions
        (out / "replay_stats.json").write_text(json.dumps(replay.__dict__ | {"replay_ratio": replay.replay_ratio}))
        return record | {"step": step, "output_dir": str(out)}
    finally:
        if roles is not None:
            roles.shutdown()
        sink.close()
        if owns_ray:
            ray.shutdown()

"""Driver-loop cost: how the per-step overhead of the real loop grows with generators (W) and learner ranks (T).

    python benchmarks/control_plane.py                                   # W in 2,8,16,32 x T in 1,2,4,8
    python benchmarks/control_plane.py --workers 2,8 --ranks 1,2 --steps 10 --step-s 0.5

The loop is the real one: trainer.run_roles driving a roles.Roles (learner_step, publish, check_generators,
replay_stats, update with generator_stats, the metrics sink, the evals), over the real replay shards and client.
Only the actors around them are stand-ins, built here and handed to run_roles in place of launch.build: a generator
sleeps --gen-s per "backend call", checking the real weight board for new weights every --poll-s as a real one does
while it decodes (the real subscriber), reports its stats to the real GeneratorReports, and inserts a fixed batch of
rollouts (64 + 256 tokens) dealt over the shards as a real call is; a learner rank samples its shard as
LearnerRank.step does, then sleeps --step-s instead of a DeepSpeed step; rank 0 publishes an empty set of weights
through the real object-store publisher.
So every optimisation of trainer.py or roles.py shows up here; generators run free (no cluster.emulate pace).

Per setting, over --steps steps after --warmup steps:
- overhead_ms: wall time per step minus the ranks' sleep per step: the loop's own cost and its waits on actors;
- busy_share: the ranks' sleep / wall time (the ledger's learner_busy_frac with a learner that costs only its step);
- phase_ms: driver wall time per step inside each Roles call the loop makes (update includes generator_stats;
  learner_step includes the sleep, learner_step_overhead does not, and with --step-s over 1 s it includes the
  check_generators calls it makes while it waits); rest_ms: the rest of the loop (sink, evals, bookkeeping);
- driver_cpu_ms: CPU time of the driver process per step.
What 2 cores limit: W + 2T + 3 actor processes, Ray's own and the driver share them, so the overhead measured here
includes CPU contention that a cluster with a core per actor would not have. The numbers rank the calls and show how
they grow with W and T; they are not a cluster's absolute cost. Prints JSON; writes results.json, table.md and
control_plane.png under --out, and each setting's run folder under --out/runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path

import numpy as np
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from buffer_throughput import make_batch
from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.generation.reports import GeneratorReports, GeneratorStats
from replay_rl.learner.group import LearnerGroup
from replay_rl.driver.session import init_local
from replay_rl.replay.client import ReplayClient, ShardDraws, create_shards
from replay_rl.replay.limits import route
from replay_rl.driver.handles import GeneratorSlot, RoleHandles
from replay_rl.driver.roles import Roles
from replay_rl.sync.board import WeightBoard
from replay_rl.sync.object_store import ObjectStorePublisher, ObjectStoreSubscriber
from replay_rl.driver.session import log_ray_to_file
from replay_rl.driver.trainer import run_roles

# the Roles calls the loop makes every step; "update" calls "generator_stats"
PHASES = ("learner_step", "publish", "check_generators", "replay_stats", "update", "generator_stats")
TOP_LEVEL = ("learner_step", "publish", "check_generators", "replay_stats", "update")


@ray.remote(num_cpus=0)
class StandInEvaluator:
    def evaluate_latest(self) -> dict[str, float]:
        return {"score": 0.0}


@ray.remote(num_cpus=0, max_concurrency=2)  # as Generator: stats() and stop() are served while run() loops
class StandInGenerator:
    def __init__(self, i: int, cfg: RunConfig, shards: list, board, reports, batch, gen_s: float,
                 poll_s: float) -> None:
        self.id, self.cfg, self.client, self.batch = i, cfg, ReplayClient(shards), batch
        self.weights, self.reports = ObjectStoreSubscriber(board), reports
        self.gen_s, self.poll_s = gen_s, poll_s
        self.tokens_per_call = int(np.diff(batch.completion_offsets).sum())
        self._stop, self.calls, self.version = False, 0, -1

    def refresh_weights(self) -> None:
        """Generator.refresh_weights' check for new weights (a version stands in for the loading)."""
        if (handle := self.weights.newer(self.version)) is not None:
            self.version = handle.version

    def run(self) -> GeneratorStats:
        c = self.cfg.cluster
        while not self._stop:
            self.reports.put.remote(self.stats())  # as Generator.run, before each call
            self.refresh_weights()  # before each call, as Generator.generate_once
            t_end = time.perf_counter() + self.gen_s
            while (left := t_end - time.perf_counter()) > 0:  # the backend call, polling the board as it decodes
                time.sleep(min(left, self.poll_s or left))
                if self.poll_s:
                    self.refresh_weights()
            # the real client and the deal a Generator's call makes over the shards
            self.client.insert(self.batch, route(self.id, self.calls, c.generators, len(self.batch), c.learners))
            self.calls += 1
        self.client.flush()
        return self.stats()

    def stop(self) -> None:
        self._stop = True

    def stats(self) -> GeneratorStats:
        busy = self.calls * self.gen_s
        return GeneratorStats(self.id, self.calls * len(self.batch), self.calls * self.tokens_per_call, busy, busy,
                              self.version, 0, 0.0, self.calls)

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class StandInRank:
    """LearnerRank's calls: step() samples this rank's shard as LearnerRank.step does and sleeps for the train step;
    rank 0 publishes a version number."""

    def __init__(self, rank: int, shard, boards: tuple, batch_size: int, step_s: float) -> None:
        self.rank, self.draws, self.boards, self.step_s = rank, ShardDraws(shard, batch_size), boards, step_s
        self.busy_s = 0.0

    def address(self) -> tuple[str, int]:
        return "127.0.0.1", 0

    def pid(self) -> int:  # the liveness probe LearnerRank answers on a thread of its own
        return os.getpid()

    def step(self, consumer_version: int, draw_ahead: bool = False) -> dict[str, float]:
        batch, info, wait = self.draws.take(consumer_version)
        t1 = time.perf_counter()
        time.sleep(self.step_s)
        self.busy_s += time.perf_counter() - t1  # the sleep as slept: a late wake-up is not the loop's cost
        if draw_ahead:
            self.draws.ahead(consumer_version + 1)
        return {"sample_wait_s": wait, "age_mean": float(info.ages.mean()), "age_max": float(info.ages.max()),
                "reuse_mean": float(info.reuse.mean()), "reward_mean": float(batch.reward.mean()),
                "rank_busy_s": self.busy_s}

    def publish(self, version: int, for_eval: bool = False) -> dict | None:
        if self.rank:
            return None
        t0 = time.perf_counter()
        ObjectStorePublisher(self.boards[for_eval]).publish([], [], version)  # the real board, no weights
        return {"version": version, "publish_bytes": 0, "publish_s": time.perf_counter() - t0}

    def save(self, path: str, tag: str) -> dict[str, str]:
        Path(path).mkdir(parents=True, exist_ok=True)  # the run's final checkpoint folder; nothing to save
        return {}  # the sha256 of each file this rank wrote: none

    def load(self, path: str, tag: str) -> None:
        pass


class StandInLearners(LearnerGroup):
    """LearnerGroup's own fan-out (step_async, gather_step, publish, save, shutdown) over stand-in ranks, placed in
    a placement group as the real ranks are; there is no rendezvous and nothing to set up."""

    def __init__(self, cfg: RunConfig, shards: list, boards: tuple, step_s: float) -> None:
        self.cfg = cfg
        self.pg = placement_group([{"CPU": 0.01}] * len(shards), strategy="PACK")
        self.owns_pg = True  # LearnerGroup.shutdown removes it
        ray.get(self.pg.ready())
        self.ranks = [StandInRank.options(scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, i)).remote(
            i, shard, boards, cfg.rank_batch_size, step_s) for i, shard in enumerate(shards)]
        self.pids = [None] * len(shards)  # no pid is named for a stand-in


def timed(method, totals: dict[str, float], name: str):
    def call(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - t0
    return call


def build_stand_ins(cfg: RunConfig, model_path: str, run_restarts: int = 0, place_by: float | None = None, *,
                    gen_s: float, poll_s: float, step_s: float, totals: dict[str, float]) -> Roles:
    """launch.build's signature, with stand-in actors around the real shards; the Roles calls of the loop are timed
    into `totals` (seconds by name; an inner call counts in its caller's time too)."""
    shards = create_shards(shard_spec(cfg))
    board, eval_board, reports = WeightBoard.remote(), WeightBoard.remote(), GeneratorReports.remote()
    learners = StandInLearners(cfg, shards, (board, eval_board), step_s)
    batch = ray.put(make_batch(cfg.generation.rollouts_per_call, np.random.default_rng(0)))
    slots = [GeneratorSlot(StandInGenerator.remote(i, cfg, shards, board, reports, batch, gen_s, poll_s))
             for i in range(cfg.cluster.generators)]
    roles = Roles(RoleHandles(cfg, ReplayClient(shards), board, eval_board, learners, slots, StandInEvaluator.remote(),
                              model_path, reports=reports), run_restarts=run_restarts)
    for name in PHASES:  # on the instance: Roles' own calls to these (update → generator_stats) are timed as well
        owner = roles.supervisor if name == "check_generators" else roles  # the loop asks the supervisor for it
        setattr(owner, name, timed(getattr(owner, name), totals, name))
    return roles


class Window:
    """run_roles' progress callback: marks the end of steps `warmup` and `warmup + steps` (wall, driver CPU, the
    ranks' sleep so far, the phase totals) and the wall time of each step between them."""

    def __init__(self, warmup: int, steps: int, totals: dict[str, float]) -> None:
        self.first, self.last, self.totals = warmup, warmup + steps, totals
        self.marks: dict[int, tuple] = {}
        self.step_ends: list[float] = []

    def __call__(self, step: int, record: dict) -> None:
        now = time.perf_counter()
        if self.first <= step <= self.last:
            self.step_ends.append(now)
        if step in (self.first, self.last):
            self.marks[step] = (now, time.process_time(), record["batch/rank_busy_s"], dict(self.totals), record)

    def row(self) -> dict:
        (w0, c0, b0, p0, _), (w1, c1, b1, p1, rec) = self.marks[self.first], self.marks[self.last]
        n = self.last - self.first
        wall, sleep = (w1 - w0) / n, (b1 - b0) / n  # per step; the ranks' sleep is their mean
        phases = {k: (p1.get(k, 0.0) - p0.get(k, 0.0)) / n * 1e3 for k in PHASES}
        phases["learner_step_overhead"] = phases["learner_step"] - sleep * 1e3
        per_step = np.diff(self.step_ends) * 1e3
        return {"wall_ms": wall * 1e3, "sleep_ms": sleep * 1e3, "overhead_ms": (wall - sleep) * 1e3,
                "busy_share": sleep / wall, "step_ms_median": float(np.median(per_step)),
                "step_ms_max": float(per_step.max()), "driver_cpu_ms": (c1 - c0) / n * 1e3, "phase_ms": phases,
                "rest_ms": wall * 1e3 - sum(phases[k] for k in TOP_LEVEL),
                "ledger_learner_busy_frac": rec["ledger/learner_busy_frac"]}  # from the run's start, warm-up in


def flag(default, what: str):
    return field(default=default, metadata={"help": what})


@dataclass(frozen=True)
class Setup:
    """What every setting runs; each field is a flag (step_s: --step-s)."""
    steps: int = flag(20, "timed steps per setting")
    warmup: int = flag(3, "steps before the timed ones (the buffer fills)")
    step_s: float = flag(0.5, "a learner rank's train step (a sleep)")
    gen_s: float = flag(1.0, "a generator's backend call (a sleep)")
    poll_s: float = flag(0.05, "a generator's weight poll while it generates (Generator._refresh_in_flight); 0: none")


def measure(workers: int, ranks: int, setup: Setup, out: Path) -> dict:
    """One setting: run_roles over stand-in roles, in `out`. Ray must be up."""
    cfg = RunConfig.load(None, [
        f"cluster.generators={workers}", f"cluster.learners={ranks}", f"run.output_dir={out}",
        "cluster.emulate=null",  # generators run free: no pace holds a sample, whose wait would count as overhead
        f"run.steps={setup.warmup + setup.steps + 1}", f"run.eval_every={10**9}",  # the last step's eval is left out
        "replay.snapshot_every_steps=null"])  # no live snapshot written inside a timed sample
    out.mkdir(parents=True, exist_ok=True)  # as train() does before run_roles
    totals: dict[str, float] = {}
    window = Window(setup.warmup, setup.steps, totals)
    run_roles(cfg, "", None, 0, progress=window, build_roles=partial(
        build_stand_ins, gen_s=setup.gen_s, poll_s=setup.poll_s, step_s=setup.step_s, totals=totals))
    return {"workers": workers, "ranks": ranks} | window.row()


def bench(workers: list[int], ranks: list[int], setup: Setup, out: Path) -> dict:
    """Every (W, T) setting on the running Ray; writes results.json, table.md and the PNG into `out`."""
    rows = []
    for w in workers:
        for t in ranks:
            rows.append(measure(w, t, setup, out / "runs" / f"w{w}_t{t}"))
            r = rows[-1]
            print(f"W={w} T={t}: {r['wall_ms']:.0f} ms/step, overhead {r['overhead_ms']:.1f} ms, busy share "
                  f"{r['busy_share']:.3f}", file=sys.stderr, flush=True)
    report = {"benchmark": "control_plane", **asdict(setup), "cpus": os.cpu_count(), "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1))
    (out / "table.md").write_text(table(rows, setup.step_s))
    plot(rows, out / "control_plane.png")
    return report


def table(rows: list[dict], step_s: float) -> str:
    cols = ["learner_step_overhead", "publish", "check_generators", "replay_stats", "update", "generator_stats"]
    head = ["W", "T", "ms/step", "overhead ms", "busy share", "driver CPU ms", *cols, "rest"]
    lines = [f"Driver loop with a {step_s:g} s learner step; phases in ms per step (update includes "
             "generator_stats).", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["workers"], r["ranks"], f"{r['wall_ms']:.0f}", f"{r['overhead_ms']:.1f}", f"{r['busy_share']:.3f}",
                 f"{r['driver_cpu_ms']:.1f}", *(f"{r['phase_ms'][c]:.1f}" for c in cols), f"{r['rest_ms']:.1f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for t in sorted({r["ranks"] for r in rows}):
        rs = sorted((r for r in rows if r["ranks"] == t), key=lambda r: r["workers"])
        for ax, key in zip(axes, ("overhead_ms", "busy_share")):
            ax.plot([r["workers"] for r in rs], [r[key] for r in rs], marker="o", label=f"T={t}")
    for ax, label in zip(axes, ("overhead per step (ms)", "learner busy share")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("generators W")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"Driver loop cost with stand-in actors ({os.cpu_count()} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=ints, default=[2, 8, 16, 32], help="generators W, comma-separated")
    ap.add_argument("--ranks", type=ints, default=[1, 2, 4, 8], help="learner ranks T, comma-separated")
    for f in fields(Setup):
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default, **f.metadata)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/control_plane"))
    args = ap.parse_args()
    setup = Setup(**{f.name: getattr(args, f.name) for f in fields(Setup)})
    log_ray_to_file(args.out / "ray.log")  # Ray's start-up and actor-kill lines go to the file, not the table
    init_local(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False)
    try:
        report = bench(args.workers, args.ranks, setup, args.out)
    finally:
        ray.shutdown()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

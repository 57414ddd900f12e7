"""The driver: build the roles from the config, then run the paper's loop.

    generators (W) ──insert──► replay shards (T) ──sample──► learner ranks (T) ──publish──► generators

`replay` and `on_policy` differ only in the Table preset the shards build (fifo vs lifo_once): the loop has no mode.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import ray
from ray.exceptions import ObjectLostError, RayActorError

from replay_rl.analysis.accounting import ComputeLedger
from replay_rl.driver.checkpoints import link_final_model
from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed, log_error, resume_hint
from replay_rl.driver.health import one_line, settle_nodes, with_lost_nodes
from replay_rl.driver.launch import build
from replay_rl.learner.group import LearnerStartTimeout
from replay_rl.driver.local_ray import init_local
from replay_rl.metrics import MetricsSink, namespaced
from replay_rl.driver.orphan_guard import start_guard
from replay_rl.driver.preflight import check_fits, preflight
from replay_rl.analysis.report import write_report
from replay_rl.driver.run_folder import FolderLock, final_checkpoint, latest_own_checkpoint, save_checkpoint, start_run
from replay_rl.driver.supervision import death_of
from replay_rl.evaluation.warmstart import ensure_model


def connect(cfg: RunConfig) -> bool:
    """Join the configured (or, under `ray job submit`, the ambient) cluster, else start a local one.
    Returns True when this process started Ray and must shut it down."""
    if ray.is_initialized():
        return False
    local = cfg.cluster.address is None and "RAY_ADDRESS" not in os.environ
    # a submitted job already carries its runtime_env (cluster/submit.py); only a local cluster gets ours
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false"}}
    # address="local" always starts a fresh cluster, never one that another process left running here
    log_ray_to_file(Path(cfg.run.output_dir) / "ray.log")
    if local:
        init_local(include_dashboard=False, log_to_driver=False, num_cpus=max(2, os.cpu_count() or 2), runtime_env=env)
    else:
        ray.init(address=cfg.cluster.address, include_dashboard=False, log_to_driver=False)
    check_fits(cfg, ray.cluster_resources())
    if local:  # a driver killed with SIGKILL runs no finally: a guard process stops the cluster it started
        node = ray._private.worker._global_node
        start_guard([info.process.pid for infos in node.all_processes.values() for info in infos])
    return local


def log_ray_to_file(path: Path) -> None:
    """Ray's own lines go to the run folder, not into the bar: its start-up lines (token auth, "Started a local
    Ray instance"), its other loggers' warnings, and the cluster's errors its driver prints, such as
    "(raylet) Task ReplayShardActor.sample failed ... killed by ray.kill" when a failed run stops its actors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    # "ray" and every Ray logger below it write to the file only ("ray._private" holds the start-up lines)
    for name in ("ray", "ray._private"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False
    # the driver's error thread prints to stdout through this function whatever log_to_driver says
    ray._private.worker.print_to_stdstream = _to_ray_log


def _to_ray_log(data: dict, ignore_prefix: bool = False) -> None:
    """ray._private.worker.print_to_stdstream's stand-in: each line to the "ray._private" logger (ray.log)."""
    for line in data.get("lines", []):
        logging.getLogger("ray._private").info("(%s) %s", data.get("pid"), line)


def ledger_for(cfg: RunConfig) -> ComputeLedger:
    """The run's ledger: the emulated W, T and μ under cluster.emulate, else the real W and T with μ from counts."""
    e, c = cfg.cluster.emulate, cfg.cluster
    if e is None:
        return ComputeLedger(c.generators, c.learners, cfg.learner.batch_size)
    return ComputeLedger(e.generators, e.learners, cfg.learner.batch_size, e.mu, generator_actors=c.generators,
                         learner_ranks=c.learners)


def train(cfg: RunConfig, progress=None) -> dict:
    """Run training; returns the final record (eval scores + ledger). progress(step, record) is called per step.
    A role that dies past its own recovery (a learner rank, a generator in a broadcast group, every role of a node
    that left the cluster) restarts every role from this run's newest checkpoint, up to run.max_restarts times; a
    restart waits up to run.node_wait_s from the death for nodes offering the learners' resources (a replacement
    node). The run holds its folder for its life (run_folder: its lock and run id)."""
    preflight(cfg)  # bad inputs fail here, in one line, before Ray starts
    out = Path(cfg.run.output_dir)
    lock = FolderLock(out)  # a second driver in this folder stops here, in one line
    owns_ray, replaced = False, {}
    try:
        run = start_run(cfg, out)  # refuses another run's folder, before Ray starts
        cfg.dump_json(out / "config.json")
        resume = run.resume
        owns_ray = connect(cfg)  # first: a cluster too small for W/T fails before any model work
        replaced = stop_on_signals()
        model_path = str(ensure_model(cfg).resolve())  # inside: a Ctrl-C in the warm start still stops Ray
        lost, place_by = None, None  # the death that the current attempt restarts after, and its node deadline
        for restart in range(cfg.run.max_restarts + 1):
            try:
                return run_roles(cfg, model_path, resume, restart, progress, place_by, run_id=run.run_id)
            except (LearnerStartTimeout, RayActorError) as e:
                if lost is None:  # a first start that failed: its own line
                    raise
                # the restart found no place for its roles (no replacement node), or lost another node meanwhile
                raise RunFailed(f"restarting after {with_lost_nodes(lost.death, lost.where)}: {one_line(e)}; once "
                                f"the cluster offers those resources again, {resume_hint(out)}") from e
            except RunFailed as e:
                if e.death is None:  # a stall held by a rule or a failing reward would fail again
                    raise
                lost, place_by = e, time.monotonic() + cfg.run.node_wait_s
                if restart == cfg.run.max_restarts:
                    if not restart:
                        raise
                    raise RunFailed(f"{e}; run.max_restarts={restart} restarts are used up", e.death, e.where) from e
                resume = latest_own_checkpoint(out, run.run_id) or resume  # none yet: where this run started
                settle_nodes(e.where, place_by)  # a lost node is declared dead before the roles are placed again
                line = (f"restart {restart + 1} of {cfg.run.max_restarts}: {with_lost_nodes(e.death, e.where)}; every "
                        f"role restarts from {resume or 'step 0 (no checkpoint yet)'}")
                log_error(out / "error.log", line, e)  # the cause, remote traceback included, before it is gone
                print(line, file=sys.stderr, flush=True)
        raise AssertionError("unreachable: the last attempt returns or raises")
    finally:
        if owns_ray:
            ray.shutdown()
        for sig, handler in replaced.items():
            signal.signal(sig, handler)
        lock.release()


def run_roles(cfg: RunConfig, model_path: str, resume: Path | None, restarts: int, progress=None,
              place_by: float | None = None, build_roles=build, run_id: str | None = None) -> dict:
    """One attempt: build the roles (from `resume`, a checkpoint, or from scratch), then the paper's loop.
    place_by: a restart's deadline for placing the learners (run.node_wait_s after the death). build_roles: makes
    the roles, as launch.build does (benchmarks/control_plane.py passes one that builds stand-in actors, to time
    this loop on its own). run_id: the run this attempt belongs to, written into each checkpoint it saves."""
    out = Path(cfg.run.output_dir)
    ledger = ledger_for(cfg)
    sink, roles = None, None
    try:
        roles = build_roles(cfg, model_path, run_restarts=restarts, place_by=place_by)
        (out / "placement.json").write_text(json.dumps(roles.placement(), indent=1))
        start = roles.resume(resume, ledger) if resume else 0
        sink = MetricsSink(out, keep_through_step=start if resume else -1)  # a fresh run starts a fresh file
        t0 = time.perf_counter() - ledger.wall_s
        record: dict = {}

        def log_evals(rows: list[tuple[int, dict]]) -> None:
            for eval_step, row in rows:
                sink.log(eval_step, "eval", row)
                record.update({k: v for k, v in row.items() if k.startswith("eval/")})  # its ledger may be older

        if start == 0:  # where RL starts from, so every run reports before → after
            log_evals(roles.start_eval(0, namespaced("ledger", ledger.summary())) + roles.finished_evals(wait=True))
        roles.start_generators()
        step, saved = start, resume
        replay = roles.replay_stats()
        for step in range(start + 1, cfg.run.steps + 1):
            metrics = roles.learner_step(step - 1, draw_ahead(cfg, step))     # sample → loss → optimizer step
            sync = roles.publish(version=step) if step % cfg.sync.every_steps == 0 else None
            roles.supervisor.check_generators()
            replay = roles.replay_stats()
            roles.update(ledger, replay, metrics, sync, wall_s=time.perf_counter() - t0)
            record = merge_disjoint(namespaced("batch", metrics), namespaced("buffer", replay.summary()),
                                    namespaced("ledger", ledger.summary()), namespaced("sync", sync or {}))
            sink.log(step, "train", record)
            log_evals(roles.finished_evals())                                 # evals run beside training
            if step % cfg.run.eval_every == 0 or step == cfg.run.steps:
                log_evals(roles.start_eval(step, namespaced("ledger", ledger.summary())))
            if checkpoint_due(cfg, step):
                saved = save_checkpoint(roles, out, step, ledger, run_id)
            if progress:
                progress(step, record)
            if cfg.run.rollout_budget and ledger.k_inf >= cfg.run.rollout_budget:
                break
        log_evals(roles.finished_evals(wait=True))
        # the buffer's whole age / reuse / since-last-use histograms, for the benchmark's distributions
        (out / "replay_stats.json").write_text(json.dumps(replay.__dict__ | {"replay_ratio": replay.replay_ratio}))
        # the end state: resumable (a longer rerun extends it), and its hf_model/ is this run's trained model
        final = final_checkpoint(roles, out, step, ledger, run_id, saved)
        sink.close()  # every row on disk before the pictures read them
        write_report([out], out / "plots")
        return record | {"step": step, "output_dir": str(out), "final_model": str(link_final_model(out, final))}
    except (RayActorError, ObjectLostError) as e:  # a role died outside the step's handling (the generator reports)
        if roles is None:
            raise
        raise roles.supervisor.dead_member() or death_of(roles, e) from e
    finally:
        if roles is not None:
            roles.shutdown()
        if sink is not None:
            sink.close()


def draw_ahead(cfg: RunConfig, step: int) -> bool:
    """Whether the ranks ask for step+1's batch as step ends (learner.draw_ahead), to be served while the weights
    publish: not when the run ends or checkpoints first, nor when it may stop on run.rollout_budget. The snapshot
    would lack a drawn batch (a consume-once queue loses it on resume) or count the draw as a use (replay)."""
    ends = step >= cfg.run.steps or checkpoint_due(cfg, step) or cfg.run.rollout_budget
    return cfg.learner.draw_ahead and not ends


def checkpoint_due(cfg: RunConfig, step: int) -> bool:
    """Whether the loop checkpoints after `step` (run.checkpoint_every); the end's checkpoint comes apart."""
    return bool(cfg.run.checkpoint_every) and step % cfg.run.checkpoint_every == 0


def merge_disjoint(*parts: dict) -> dict:
    """One metrics record from its sources; a key two sources share would silently overwrite one of them."""
    record: dict = {}
    for part in parts:
        if shared := record.keys() & part.keys():
            raise KeyError(f"metric keys {sorted(shared)} come from two sources; give each quantity one name")
        record |= part
    return record


SHUTDOWN_BOUND_S = 60


def bound_shutdown(seconds: float) -> None:
    """After Ctrl-C / SIGTERM, cleanup gets `seconds`; then the process exits anyway (130) and the orphan guard
    stops the local Ray it started. A loaded CI box once saw an interrupted run not exit within 300 s."""
    def force_exit() -> None:
        print(f"stopped: cleanup did not finish in {seconds:g}s; exiting, the run's Ray is stopped by its guard",
              file=sys.stderr, flush=True)
        os._exit(130)

    timer = threading.Timer(seconds, force_exit)
    timer.daemon = True
    timer.start()


def stop_on_signals() -> dict:
    """Ctrl-C and SIGTERM (a scheduler's cancel, `kill`) stop the run: the finally in train() stops every actor and
    this run's Ray, and a timer started at the signal bounds that cleanup, wherever the signal lands (start-up
    included). Installed after ray.init, which sets a SIGTERM handler that only dumps native stacks. Returns the
    handlers it replaced, which train() puts back when it returns (it may run inside a longer process)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}


def _interrupt(signum, frame) -> None:
    bound_shutdown(SHUTDOWN_BOUND_S)
    raise KeyboardInterrupt


def describe_failure(e: BaseException, log: Path) -> str:
    """One line for the terminal (role and cause); the full traceback, with its causes, goes to `log` after the
    causes of the run's restarts (failures.log_error)."""
    log_error(log, f"run failed: {e if isinstance(e, RunFailed) else one_line(e)}", e)
    return f"{e if isinstance(e, RunFailed) else one_line(e)} (traceback: {log})"

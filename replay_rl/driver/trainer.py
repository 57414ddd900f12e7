"""The driver: build the roles from the config, then run the paper's loop.

    generators (W) ──insert──► replay shards (T) ──sample──► learner ranks (T) ──publish──► generators

`replay` and `on_policy` differ only in the Table preset the shards build (fifo vs lifo_once): the loop has no mode.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ray.exceptions import ObjectLostError, RayActorError

from replay_rl.analysis.accounting import ComputeLedger
from replay_rl.analysis.report import write_report
from replay_rl.config import RunConfig
from replay_rl.driver.checkpoints import link_final_model
from replay_rl.driver.failures import RunFailed, log_error, one_line, resume_hint
from replay_rl.driver.health import settle_nodes, with_lost_nodes
from replay_rl.driver.launch import build
from replay_rl.driver.preflight import preflight
from replay_rl.driver.checkpointer import Checkpointer
from replay_rl.driver.run_folder import FolderLock, latest_own_checkpoint, prune_checkpoints, read_run_id, start_run
from replay_rl.driver.session import connect, disconnect, stop_on_signals
from replay_rl.driver.supervision import dead_member, death_of
from replay_rl.driver.trackers import make_trackers
from replay_rl.driver.weight_checks import WeightChecks
from replay_rl.evaluation.warmstart import ensure_model
from replay_rl.learner.group import LearnerStartTimeout
from replay_rl.metrics import MetricsSink, namespaced, row_at, write_whole


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
        # the run's first start (no run.json yet, or overwritten): a tracker that cannot start stops it here; a
        # resume, a scheduler's retry or a restart drops that tracker and goes on
        first = cfg.run.overwrite or read_run_id(out) is None
        run = start_run(cfg, out)  # refuses another run's folder, before Ray starts
        cfg.dump_json(out / "config.json")
        resume = run.resume
        owns_ray = connect(cfg)  # first: a cluster too small for W/T fails before any model work
        replaced = stop_on_signals()
        model_path = str(ensure_model(cfg).resolve())  # inside: a Ctrl-C in the warm start still stops Ray
        lost, place_by = None, None  # the death that the current attempt restarts after, and its node deadline
        for restart in range(cfg.run.max_restarts + 1):
            try:
                final = run_roles(cfg, model_path, resume, restart, progress, place_by, run_id=run.run_id,
                                  first_start=first and not restart)
                return final | ({"resumed_from": str(run.resume)} if run.resume else {})
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
        disconnect(owns_ray, replaced)
        lock.release()


def run_roles(cfg: RunConfig, model_path: str, resume: Path | None, restarts: int, progress=None,
              place_by: float | None = None, build_roles=build, run_id: str | None = None,
              first_start: bool = True) -> dict:
    """One attempt: build the roles (from `resume`, a checkpoint, or from scratch), then the paper's loop.
    place_by: a restart's deadline for placing the learners (run.node_wait_s after the death). build_roles: makes
    the roles, as launch.build does (benchmarks/control_plane.py passes one that builds stand-in actors, to time
    this loop on its own). run_id: the run this attempt belongs to, written into each checkpoint it saves.
    first_start: the run's first attempt (make_trackers)."""
    out = Path(cfg.run.output_dir)
    ledger = ledger_for(cfg)
    sink, roles = None, None
    try:
        roles = build_roles(cfg, model_path, run_restarts=restarts, place_by=place_by)
        checkpointer, evals = Checkpointer(roles.handles, out, run_id), roles.evals
        (out / "placement.json").write_text(json.dumps(roles.placement(), indent=1))
        start = checkpointer.resume(resume, ledger) if resume else 0
        sink = MetricsSink(out, keep_through_step=start if resume else -1)  # a fresh run starts a fresh file
        sink.mirror_to(make_trackers(cfg, out, run_id, start if resume else None, sink.kept, first_start))
        t0 = time.perf_counter() - ledger.wall_s
        kept = sink.kept  # the rows through `start`, parsed once by the sink (none for a fresh run)
        record = row_at(kept, "train", start)  # the resumed step's: a run resumed at its end logs no other

        def log_evals(rows: list[tuple[int, dict]]) -> None:
            for eval_step, row in rows:
                sink.log(eval_step, "eval", row)
                record.update({k: v for k, v in row.items() if k.startswith("eval/")})  # its ledger may be older

        if start == 0:  # where RL starts from, so every run reports before → after
            log_evals(evals.start(0, namespaced("ledger", ledger.summary())) + evals.finished(wait=True))
        elif eval_lost(cfg, kept, start):
            log_evals(evals.start(start, namespaced("ledger", ledger.summary())))
        roles.start_generators()
        weight_checks = WeightChecks(cfg, out)
        step, saved = start, resume
        replay = roles.replay_stats()
        for step in range(start + 1, cfg.run.steps + 1):
            metrics = roles.learner_step(step - 1, draw_ahead(cfg, step))     # sample → loss → optimizer step
            sync = roles.publish(version=step) if step % cfg.sync.every_steps == 0 else None
            roles.supervisor.check_generators()
            replay = roles.replay_stats()
            roles.update(ledger, replay, metrics, sync, wall_s=time.perf_counter() - t0)
            checked = weight_checks.observe(roles.generator_stats())          # generators hold the published weights
            record = merge_disjoint(namespaced("batch", metrics), namespaced("buffer", replay.summary()),
                                    namespaced("ledger", ledger.summary()), namespaced("sync", sync or {}),
                                    namespaced("weight_check", checked))
            sink.log(step, "train", record)
            log_evals(evals.finished())                                       # evals run beside training
            if cfg.run.log_samples_every and step % cfg.run.log_samples_every == 0:
                sink.log_samples(step, samples_at(step, roles.generator_samples()))
            if step % cfg.run.eval_every == 0 or step == cfg.run.steps:
                log_evals(evals.start(step, namespaced("ledger", ledger.summary())))
            if checkpoint_due(cfg, step):
                saved = checkpointer.save(step, ledger)
            if progress:
                progress(step, record)
            if cfg.run.rollout_budget and ledger.k_inf >= cfg.run.rollout_budget:
                break
        log_evals(evals.finished(wait=True))
        weight_checks.observe(roles.generator_stats(wait=True))  # the checks the last steps' rows did not see yet
        # the end state: resumable (a longer rerun extends it), and its hf_model/ is this run's trained model
        final = checkpointer.final(step, ledger, saved)
        sink.close()  # every row on disk before the pictures read them
        model = link_final_model(out, final)
        prune_checkpoints(out, run_id, cfg.run.keep_checkpoints)  # the earlier end final_model named until now
        # the buffer's whole age / reuse / since-last-use histograms; written after the rest, as the mark of a finished
        # run that a study and the probe's pilot read (a study killed between it and the final checkpoint started the
        # run's extension over)
        # (whole or absent, and naming its run and step: a study reads it as "this run finished")
        write_whole(out / "replay_stats.json", json.dumps(replay.__dict__ | {"replay_ratio": replay.replay_ratio,
                                                                            "run_id": run_id, "step": step}))
        write_report([out], out / "plots")
        return record | {"step": step, "output_dir": str(out), "final_model": str(model)}
    except (RayActorError, ObjectLostError) as e:  # a role died outside the step's handling (the generator reports)
        if roles is None:
            raise
        raise dead_member(roles.handles) or death_of(roles.handles, e) from e
    finally:
        if roles is not None:
            roles.shutdown()
        if sink is not None:
            sink.close(failed=True)  # a no-op after the close of a run that finished


def samples_at(step: int, rows: list[dict]) -> list[dict]:
    """Each generator's newest group as text, with its age now (this step − the version that generated it)."""
    return [row | {"age": step - row["version"]} for row in rows]


def eval_lost(cfg: RunConfig, rows: list[dict], step: int) -> bool:
    """A resumed step was due an eval that the death cut off (a dead evaluator restarts the run from the checkpoint
    of the step it scored): the weights are that checkpoint's, so the eval is made again, not left out of the curve
    (at the last step, the run's final score)."""
    due = step % cfg.run.eval_every == 0 or step == cfg.run.steps
    return due and not row_at(rows, "eval", step)


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

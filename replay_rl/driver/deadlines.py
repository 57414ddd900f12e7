"""The driver's phases outside the learner step, each bounded by its own config field (supervision.Phase): a role
that hangs in a checkpoint, a publish, an eval, a resume or a recovery is named with the phase in one line and
restarts every role from the newest checkpoint (run.max_restarts), instead of holding the driver for ever (or for
DeepSpeed's 30 min barrier, then a raw error and no restart)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from replay_rl.driver.checkpoints import STATE_FILE, checkpoint_dir, commit, staging_dir
from replay_rl.generation.generator import calls_dealt
from replay_rl.replay.shard import shard_dir
from replay_rl.sync.base import WeightsGone
from replay_rl.driver.failures import RunFailed
from replay_rl.driver.supervision import Phase, numbered, publish_blame

if TYPE_CHECKING:  # for the reader and the IDE: at run time it would import in a circle, or bring Ray early
    from replay_rl.driver.roles import Roles


def checkpoint(roles: Roles, out: Path, step: int, ledger) -> Path:
    """Learner state and buffer snapshot of the same step, staged and then renamed into place, within
    run.checkpoint_timeout_s."""
    r = roles.cfg.run
    phase = Phase(roles, f"checkpoint of step {step}", r.checkpoint_timeout_s, "run.checkpoint_timeout_s")
    staging = staging_dir(out, step)
    # each rank hashes and fsyncs its own files inside this bound: a wedged filesystem holds that rank, named here
    hashed = roles.learners.save(str(staging), tag=f"step_{step}", gather=phase.of(ranks(roles)))
    # each shard snapshots atomically under its own lock (ReplayClient.snapshot's calls, bounded)
    phase.wait([s.snapshot.remote(str(shard_dir(staging / "replay", i))) for i, s in enumerate(roles.replay.shards)],
               shards(roles))
    state = {"step": step, "ledger": ledger.state(), "rollouts_lost": roles.replay.lost}
    (staging / STATE_FILE).write_text(json.dumps(state))
    return commit(staging, checkpoint_dir(out, step), hashed)


def resume(roles: Roles, path: str | Path, ledger) -> int:
    """Every role from a checkpoint, within run.resume_timeout_s: learner state, the shards' buffers, where the
    generators go on in the pace, and the resumed weights on every generator before it generates."""
    path, cfg = Path(path), roles.cfg
    state = json.loads((path / STATE_FILE).read_text())
    step = state["step"]
    phase = Phase(roles, f"resume from step {step}", cfg.run.resume_timeout_s, "run.resume_timeout_s")
    roles.learners.load(str(path), tag=f"step_{step}", gather=phase.of(ranks(roles)))
    inserts = sum(phase.wait([s.restore.remote(str(shard_dir(path / "replay", i)))
                              for i, s in enumerate(roles.replay.shards)], shards(roles)))  # ReplayClient.restore
    ledger.load_state(state["ledger"])
    # generators go on from where the snapshot's stream ends (its inserts and the rollouts lost before it), up
    # to a whole call. From the ledger's K_inf, read before the save, they made again what they inserted while
    # it was written (K_inf over the pace's budget by up to 59 after a node loss); from call 0, every rollout
    # the schedule had allowed (K_inf 192 against 96)
    per_call, made = cfg.generation.rollouts_per_call, inserts + state.get("rollouts_lost", 0)
    # a call the snapshot caught in part: a buffer that keeps what it serves does without its missing rows; a
    # consume-once queue would wait for them for ever, so that call is made again (K_inf: < one call over)
    calls = made // per_call if cfg.consumes_once else -(-made // per_call)  # all generators' calls
    phase.wait([s.resume_stream.remote(calls * per_call) for s in roles.replay.shards], shards(roles))
    # the client's own count of rollouts lost; its calls repeat the ones just answered (a shard keeps the larger)
    roles.replay.resume_stream(calls * per_call, lost=max(0, calls * per_call - inserts))
    for i, s in enumerate(roles.slots):
        s.first_call = calls_dealt(i, calls, len(roles.slots))
    phase.wait([s.actor.start_at.remote(s.first_call) for s in roles.slots], generators(roles))
    # the resumed weights reach every generator before it generates (a broadcast group receives them together)
    receivers = tuple(s.actor.await_version.remote(step) for s in roles.slots)
    phase.blame = publish_blame(roles, phase.name)
    roles.learners.publish(version=step, receivers=receivers,
                           gather=phase.of(publishers(roles) + generators(roles)))
    return step


def publish(roles: Roles, version: int, for_eval: bool = False) -> dict[str, float]:
    """learners.publish within sync.timeout_s, its failure named: a paused weight board holds rank 0's put, and under
    sync.type=nccl a generator that dies or hangs mid-broadcast fails or holds rank 0's send; the line names that
    role, not the symptom."""
    cfg = roles.cfg
    name = f"weight publish{' to the evaluator' if for_eval else ''} of version {version}"
    phase = Phase(roles, name, cfg.sync.timeout_s, "sync.timeout_s", publish_blame(roles, name, for_eval))
    return roles.learners.publish(version=version, for_eval=for_eval, gather=phase.of(publishers(roles)))


def start_eval(roles: Roles, step: int, ledger_row: dict) -> list[tuple[int, dict]]:
    """Publish the current weights to the evaluator's own board and score them there while learning goes on.
    The previous eval is finished first (the board holds one version); returns the rows finished by then."""
    rows = finished_evals(roles, wait=True)
    publish(roles, step, for_eval=True)
    roles.pending_eval = (step, ledger_row, roles.evaluator.evaluate_latest.remote())
    return rows


def finished_evals(roles: Roles, wait: bool = False) -> list[tuple[int, dict]]:
    """The (step, eval row) of the eval in flight once it is done; [] while it runs (unless wait: then within
    run.eval_timeout_s)."""
    if roles.pending_eval is None or not (wait or ray.wait([roles.pending_eval[2]], timeout=0)[0]):
        return []
    step, ledger_row, ref = roles.pending_eval
    roles.pending_eval = None
    phase = Phase(roles, f"eval of step {step}", roles.cfg.run.eval_timeout_s, "run.eval_timeout_s")
    try:
        [scores] = phase.wait([ref], ["evaluator"])
    except RunFailed as e:
        if not isinstance(gone := getattr(e.__cause__, "cause", None), WeightsGone):
            raise
        # the eval is of that step's weights and no other: skipped, where it used to end the run
        print(f"eval of step {step} skipped: {str(gone).strip()}; training goes on and the next eval is made",
              file=sys.stderr, flush=True)
        return []
    return [(step, {f"eval/{k}": v for k, v in scores.items()} | ledger_row)]


def recovered(roles: Roles, refs: list, names: list[str], what: str) -> list:
    """The answers of calls that wait on roles just recovered in place (a shard restarting from its live snapshot
    answers the call it missed; the generator reports forget a replaced generator), within run.recovery_timeout_s."""
    r = roles.cfg.run
    return Phase(roles, f"recovery of {what}", r.recovery_timeout_s, "run.recovery_timeout_s").wait(refs, names)


def ranks(roles: Roles) -> list[str]:
    return numbered("learner rank", len(roles.learners.ranks))


def shards(roles: Roles) -> list[str]:
    return numbered("replay shard", len(roles.replay.shards))


def generators(roles: Roles) -> list[str]:
    return numbered("generator", len(roles.slots))


def publishers(roles: Roles) -> list[str]:
    """The ranks a publish calls (LearnerGroup.publish): every rank under ZeRO-3, whose buckets they gather."""
    return ranks(roles) if roles.cfg.learner.zero_stage == 3 else ["learner rank 0"]


def credit_restart(roles: Roles, i: int) -> None:
    """Send shard i, killed to restart in place, the calls each generator has started (read after the kill: a call
    whose rollouts it lost is never missed), its restore credit. Not waited on; with no answer from the reports in
    run.hung_probe_s the shard keeps the pace's allowance, which may serve a few batches early, never late."""
    try:
        latest = ray.get(roles.reports.all.remote(), timeout=roles.cfg.run.hung_probe_s)
    except Exception:  # noqa: BLE001 - the allowance stands (a hung reports actor is found by its own probes)
        return
    calls = [max(latest[g].calls, s.first_call) if g in latest else s.first_call for g, s in enumerate(roles.slots)]
    roles.replay.shards[i].restored_calls.remote(calls)

"""Checkpointer: the whole save-and-commit protocol of one attempt, and its resume. A checkpoint is the learner
state and every shard's buffer of the same step, staged with the run's id and renamed into place whole
(checkpoints.commit), each part bounded by run.checkpoint_timeout_s; a resume puts every role back at a checkpoint's
step within run.resume_timeout_s. A role that hangs or dies in either is named with the phase (supervision.Phase)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from replay_rl.driver.checkpoints import STATE_FILE, checkpoint_dir, commit, staging_dir
from replay_rl.driver.handles import RoleHandles
from replay_rl.driver.run_folder import RUN_FILE, prune_checkpoints, read_run_id
from replay_rl.driver.supervision import Phase, publish_blame
from replay_rl.generation.generator import calls_dealt
from replay_rl.replay.shard import shard_dir


class Checkpointer:
    """Saves into out/checkpoints and resumes from there for one attempt's roles. run_id: written into each
    checkpoint (None: a benchmark's loop, which saves none, since {"run_id": null} would match any run)."""

    def __init__(self, handles: RoleHandles, out: Path, run_id: str | None) -> None:
        self.handles, self.out, self.run_id = handles, Path(out), run_id

    def save(self, step: int, ledger) -> Path:
        """Learner state and buffer snapshot of `step`, staged with the run id and renamed into place together;
        then the run's older checkpoints past run.keep_checkpoints go."""
        h = self.handles
        staging = staging_dir(self.out, step)
        shutil.rmtree(staging, ignore_errors=True)  # a save that died half-written; under the lock, only ours are here
        staging.mkdir(parents=True)
        if self.run_id is not None:
            (staging / RUN_FILE).write_text(json.dumps({"run_id": self.run_id}))
        phase = Phase(h, f"checkpoint of step {step}", h.cfg.run.checkpoint_timeout_s, "run.checkpoint_timeout_s")
        # each rank hashes and fsyncs its own files inside this bound: a wedged filesystem holds that rank, named here
        hashed = h.learners.save(str(staging), tag=f"step_{step}", gather=phase.of(h.rank_names()))
        # each shard snapshots atomically under its own lock (ReplayClient.snapshot's calls, bounded)
        phase.wait([s.snapshot.remote(str(shard_dir(staging / "replay", i))) for i, s in enumerate(h.replay.shards)],
                   h.shard_names())
        state = {"step": step, "ledger": ledger.state(), "rollouts_lost": h.replay.lost}
        (staging / STATE_FILE).write_text(json.dumps(state))
        saved = commit(staging, checkpoint_dir(self.out, step), hashed)
        prune_checkpoints(self.out, self.run_id, h.cfg.run.keep_checkpoints)
        return saved

    def final(self, step: int, ledger, saved: Path | None) -> Path:
        """The end state: the checkpoint this attempt saved or resumed from at `step` (`saved`) where there is one,
        else a new save. One of that step that is merely on disk may be another run's, or this run's from before a
        resume to an earlier step: kept, it would be handed out as the final model."""
        final = checkpoint_dir(self.out, step)
        own = self.run_id is not None and read_run_id(final) == self.run_id  # no id proves nothing: None == None
        if saved is not None and saved.resolve() == final.resolve() and own:
            return final
        return self.save(step, ledger)

    def resume(self, path: str | Path, ledger) -> int:
        """Every role from a checkpoint: learner state, the shards' buffers, where the generators go on in the
        pace, and the resumed weights on every generator before it generates. Returns the checkpoint's step."""
        path, h = Path(path), self.handles
        state = json.loads((path / STATE_FILE).read_text())
        step = state["step"]
        phase = Phase(h, f"resume from step {step}", h.cfg.run.resume_timeout_s, "run.resume_timeout_s")
        h.learners.load(str(path), tag=f"step_{step}", gather=phase.of(h.rank_names()))
        inserts = sum(phase.wait([s.restore.remote(str(shard_dir(path / "replay", i)))
                                  for i, s in enumerate(h.replay.shards)], h.shard_names()))  # ReplayClient.restore
        ledger.load_state(state["ledger"])
        calls = resumed_calls(h, inserts + state.get("rollouts_lost", 0))
        per_call = h.cfg.generation.rollouts_per_call
        phase.wait([s.resume_stream.remote(calls * per_call) for s in h.replay.shards], h.shard_names())
        # the client's own count of rollouts lost; its calls repeat the ones just answered (a shard keeps the larger)
        h.replay.resume_stream(calls * per_call, lost=max(0, calls * per_call - inserts))
        for i, s in enumerate(h.slots):
            s.first_call = calls_dealt(i, calls, len(h.slots))
        phase.wait([s.actor.start_at.remote(s.first_call) for s in h.slots], h.generator_names())
        # the resumed weights reach every generator before it generates (a broadcast group receives them together)
        receivers = tuple(s.actor.await_version.remote(step) for s in h.slots)
        phase.blame = publish_blame(h, phase.name)
        h.learners.publish(version=step, receivers=receivers,
                           gather=phase.of(h.publisher_names() + h.generator_names()))
        return step


def resumed_calls(handles: RoleHandles, made: int) -> int:
    """All generators' calls to go on from, given the rollouts the snapshot's stream holds or lost (`made`): up to
    a whole call. From the ledger's K_inf, read before the save, they made again what they inserted while it was
    written (K_inf over the pace's budget by up to 59 after a node loss); from call 0, every rollout the schedule had
    allowed (K_inf 192 against 96). A call the snapshot caught in part: a buffer that keeps what it serves does
    without its missing rows; a consume-once queue would wait for them for ever, so that call is made again
    (K_inf: < one call over)."""
    per_call = handles.cfg.generation.rollouts_per_call
    return made // per_call if handles.cfg.consumes_once else -(-made // per_call)

"""The driver's bounded waits, and how a role's death is told. A phase (a checkpoint, a publish, an eval, a resume,
a recovery) waits for its calls until its config bound; a role that dies or hangs in it is named with the phase in
one line and is a death, recovered as every death past a role's own recovery is: every role restarts from the
newest checkpoint (run.max_restarts). Ray's own text ("The actor is dead because ...") stays in error.log. Every
function here reads the run's RoleHandles and nothing above them."""

from __future__ import annotations

import time
from typing import Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from replay_rl.driver.failures import RunFailed, one_line, resume_hint
from replay_rl.driver.handles import RoleHandles
from replay_rl.driver.health import PROBE_S, NoAnswer, node_of, probe_all


def died(handles: RoleHandles, death: str, role: str = "") -> RunFailed:
    """A death's failure: `role` (e.g. "learner rank 1") names the node it ran on, and whether that node left."""
    node = node_of(handles.where, role)
    death = f"{death} on {node}" if node else death
    return RunFailed(f"{death}; {resume_hint(handles.cfg.run.output_dir)}", death, handles.where)


def dead_member(handles: RoleHandles) -> RunFailed | None:
    """The failure of the first learner rank or replay shard that no longer answers, or None."""
    # shards first: a rank whose shard died fails, and its peer then waits in the allreduce
    members = [(f"replay shard {i}", s.stats) for i, s in enumerate(handles.replay.shards)]
    members += [(f"learner rank {i}", r.pid) for i, r in enumerate(handles.learners.ranks)]
    for name, method in members:
        try:
            ray.get(method.remote(), timeout=PROBE_S)
        except GetTimeoutError:
            continue  # paused or wedged, not dead: a stall names it (health.hung_roles)
        except RayActorError:
            return died(handles, f"{name} died", role=name)
    return None


def dead_role(e: BaseException, handles: RoleHandles) -> str | None:
    """The role whose death `e` reports: Ray's actor error names the dead actor's id, also when it reaches the
    driver through the call that saw it (a generator's insert into a dead shard is RayTaskError(ActorDiedError)
    with the shard's id). None for an actor this run no longer knows, or no actor error."""
    actor_id = e.actor_id if isinstance(e, RayActorError) else None
    return handles.role_names().get(actor_id) if actor_id else None


def death_of(handles: RoleHandles, e: BaseException, phase: str = "") -> RunFailed:
    """A role's death as one line naming it (and the phase it died in); Ray's text only where no role matches."""
    role = dead_role(e, handles)
    during = f" during the {phase}" if phase else ""
    return died(handles, f"{role} died{during}", role=role) if role else died(handles, f"{one_line(e)}{during}")


class Phase:
    """One bounded phase of the driver: its waits together take at most bound_s (the config field `field`).
    blame(): a more precise failure for a symptom (the generator a broadcast waited on), asked first."""

    def __init__(self, handles: RoleHandles, name: str, bound_s: float, field: str,
                 blame: Callable | None = None) -> None:
        self.handles, self.name, self.bound_s, self.field, self.blame = handles, name, bound_s, field, blame
        self.deadline = time.monotonic() + bound_s

    def of(self, names: list[str]) -> Callable[[list], list]:
        """A gather for LearnerGroup / ReplayClient calls: refs[i] is a call on role names[i]."""
        return lambda refs: self.wait(refs, names)

    def wait(self, refs: list, names: list[str]) -> list:
        """Each result of refs, in order. The first role to die or fail is named with the phase as its error
        comes; roles not done by the deadline are named as hung. Either is a death; a remote error that no death
        explains (a full disk) would recur, so it is not."""
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, self.deadline - time.monotonic()))
            if not done:
                late = [names[refs.index(r)] for r in pending]
                hung = f"{', '.join(late)} hung in the {self.name}: not done in {self.bound_s:g}s ({self.field})"
                raise (self.blame and self.blame()) or died(self.handles, hung, role=late[0])
            try:
                ray.get(done[0])
            except Exception as e:  # noqa: BLE001 - named below; the whole error stays its cause (error.log)
                raise self.failure(e, names[refs.index(done[0])]) from e
        return ray.get(refs)

    def failure(self, e: Exception, name: str) -> RunFailed:
        if isinstance(e, RayActorError):
            return death_of(self.handles, e, self.name) if dead_role(e, self.handles) else died(
                self.handles, f"{name} died during the {self.name}", role=name)
        # a survivor's error (a closed gloo connection) is a symptom: the member that died or hung, if any
        return ((self.blame and self.blame()) or dead_member(self.handles)
                or RunFailed(f"{name} failed in the {self.name}: {one_line(e)}"))


def recovered(handles: RoleHandles, refs: list, names: list[str], what: str) -> list:
    """The answers of calls that wait on roles just recovered in place (a shard restarting from its live snapshot
    answers the call it missed; the generator reports forget a replaced generator), within run.recovery_timeout_s."""
    r = handles.cfg.run
    return Phase(handles, f"recovery of {what}", r.recovery_timeout_s, "run.recovery_timeout_s").wait(refs, names)


def publish(handles: RoleHandles, version: int, for_eval: bool = False) -> dict[str, float]:
    """learners.publish within sync.timeout_s, its failure named: a paused weight board holds rank 0's put, and under
    sync.type=nccl a generator that dies or hangs mid-broadcast fails or holds rank 0's send; the line names that
    role, not the symptom."""
    name = f"weight publish{' to the evaluator' if for_eval else ''} of version {version}"
    phase = Phase(handles, name, handles.cfg.sync.timeout_s, "sync.timeout_s", publish_blame(handles, name, for_eval))
    return handles.learners.publish(version=version, for_eval=for_eval, gather=phase.of(handles.publisher_names()))


def first_silent(handles: RoleHandles, members: dict[str, object], method: str, phase: str) -> RunFailed | None:
    """The first of `members` (role -> actor) that is dead or gives no answer to `method` within run.hung_probe_s,
    named as a death during `phase`; None when all answer."""
    probe = handles.cfg.run.hung_probe_s
    for name, a in zip(members, probe_all([getattr(m, method).remote() for m in members.values()], probe)):
        if a == "dead" or isinstance(a, NoAnswer):
            how = "died" if a == "dead" else f"hung (no answer in {probe:g}s)"
            return died(handles, f"{name} {how} during the {phase}", role=name)
    return None


def publish_blame(handles: RoleHandles, phase: str, for_eval: bool = False) -> Callable[[], RunFailed | None]:
    """Who holds a publish: a paused board (every publish sets one, a broadcast too; the soak's paused board read
    "learner rank 0 hung in the weight publish"), or under sync.type=nccl a broadcast member that died or hung (the
    group re-forms only when every role restarts; not for the evaluator, which reads its board)."""
    name, board = ("evaluator's weight board", handles.eval_board) if for_eval else ("weight board", handles.board)
    board_blame = (lambda: first_silent(handles, {name: board}, "version", phase)) if board is not None else (
        lambda: None)
    if handles.cfg.sync.type != "nccl" or for_eval:
        return board_blame
    # the generators as the blame runs (not as it was built): a replaced one is probed, never its dead actor
    return lambda: first_silent(handles, {f"generator {i}": s.actor for i, s in enumerate(handles.slots)}, "pid",
                                phase) or board_blame()

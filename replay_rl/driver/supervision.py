"""The driver's bounded waits, and the name of every role that can die. A phase (a checkpoint, a publish, an eval,
a resume, a recovery) waits for its calls until its config bound; a role that dies or hangs in it is named with the
phase in one line and is a death, recovered as every death past a role's own recovery is: every role restarts from
the newest checkpoint (run.max_restarts). Ray's own text ("The actor is dead because ...") stays in error.log."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

import ray
from ray.exceptions import RayActorError

from replay_rl.driver.failures import RunFailed
from replay_rl.driver.health import NoAnswer, one_line, probe_all

if TYPE_CHECKING:  # for the reader and the IDE: at run time it would import in a circle, or bring Ray early
    from replay_rl.driver.roles import Roles


def role_names(roles: Roles) -> dict[str, str]:
    """Actor id (hex) -> the role it plays, as failure and restart lines name it."""
    named = {f"generator {i}": s.actor for i, s in enumerate(roles.slots)}
    named |= {f"replay shard {i}": s for i, s in enumerate(roles.replay.shards)}
    named |= {f"learner rank {i}": r for i, r in enumerate(roles.learners.ranks if roles.learners else [])}
    named |= {"weight board": roles.board, "evaluator's weight board": roles.eval_board,
              "generator reports": roles.reports, "evaluator": roles.evaluator}
    return {a._actor_id.hex(): name for name, a in named.items() if a is not None}


def dead_role(e: BaseException, roles: Roles) -> str | None:
    """The role whose death `e` reports: Ray's actor error names the dead actor's id, also when it reaches the
    driver through the call that saw it (a generator's insert into a dead shard is RayTaskError(ActorDiedError)
    with the shard's id). None for an actor this run no longer knows, or no actor error."""
    actor_id = e.actor_id if isinstance(e, RayActorError) else None
    return role_names(roles).get(actor_id) if actor_id else None


def death_of(roles: Roles, e: BaseException, phase: str = "") -> RunFailed:
    """A role's death as one line naming it (and the phase it died in); Ray's text only where no role matches."""
    role = dead_role(e, roles)
    during = f" during the {phase}" if phase else ""
    died = roles.supervisor.died
    return died(f"{role} died{during}", role=role) if role else died(f"{one_line(e)}{during}")


class Phase:
    """One bounded phase of the driver: its waits together take at most bound_s (the config field `field`).
    blame(): a more precise failure for a symptom (the generator a broadcast waited on), asked first."""

    def __init__(self, roles: Roles, name: str, bound_s: float, field: str, blame: Callable | None = None) -> None:
        self.roles, self.name, self.bound_s, self.field, self.blame = roles, name, bound_s, field, blame
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
                raise (self.blame and self.blame()) or self.roles.supervisor.died(hung, role=late[0])
            try:
                ray.get(done[0])
            except Exception as e:  # noqa: BLE001 - named below; the whole error stays its cause (error.log)
                raise self.failure(e, names[refs.index(done[0])]) from e
        return ray.get(refs)

    def failure(self, e: Exception, name: str) -> RunFailed:
        if isinstance(e, RayActorError):
            return death_of(self.roles, e, self.name) if dead_role(e, self.roles) else self.roles.supervisor.died(
                f"{name} died during the {self.name}", role=name)
        # a survivor's error (a closed gloo connection) is a symptom: the member that died or hung, if any
        return ((self.blame and self.blame()) or self.roles.supervisor.dead_member()
                or RunFailed(f"{name} failed in the {self.name}: {one_line(e)}"))


def first_silent(roles: Roles, members: dict[str, object], method: str, phase: str) -> RunFailed | None:
    """The first of `members` (role -> actor) that is dead or gives no answer to `method` within run.hung_probe_s,
    named as a death during `phase`; None when all answer."""
    probe = roles.cfg.run.hung_probe_s
    for name, a in zip(members, probe_all([getattr(m, method).remote() for m in members.values()], probe)):
        if a == "dead" or isinstance(a, NoAnswer):
            how = "died" if a == "dead" else f"hung (no answer in {probe:g}s)"
            return roles.supervisor.died(f"{name} {how} during the {phase}", role=name)
    return None


def broadcast_blame(roles: Roles, phase: str) -> Callable[[], RunFailed | None]:
    """Under sync.type=nccl a generator that died or hung fails rank 0's broadcast (or holds it): that generator,
    named, is a death (the group re-forms only when every role restarts), not the publish's symptom."""
    return lambda: first_silent(roles, {f"generator {i}": s.actor for i, s in enumerate(roles.slots)}, "pid", phase)


def board_blame(roles: Roles, phase: str, for_eval: bool) -> Callable[[], RunFailed | None]:
    """A publish puts the weights on a board: a paused board holds rank 0's put, and the line names the board, not
    rank 0 (the soak's paused board read "learner rank 0 hung in the weight publish")."""
    name, board = ("evaluator's weight board", roles.eval_board) if for_eval else ("weight board", roles.board)
    return lambda: first_silent(roles, {name: board}, "version", phase) if board is not None else None


def publish_blame(roles: Roles, phase: str, for_eval: bool = False) -> Callable[[], RunFailed | None]:
    """Who holds a publish: a paused board (every publish sets one, a broadcast too), or under sync.type=nccl a
    broadcast member (not for the evaluator, which reads its board)."""
    board = board_blame(roles, phase, for_eval)
    if roles.cfg.sync.type != "nccl" or for_eval:
        return board
    members = broadcast_blame(roles, phase)
    return lambda: members() or board()


def numbered(role: str, n: int) -> list[str]:
    return [f"{role} {i}" for i in range(n)]

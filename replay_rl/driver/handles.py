"""The run's actors as launch built them, and the names the driver's lines give them. Plain handles and their
generator positions: no phase, no recovery (supervisor.py), no protocol (checkpointer.py, eval_schedule.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from replay_rl.config import RunConfig
from replay_rl.generation.generator import Generator
from replay_rl.learner.group import LearnerGroup
from replay_rl.replay.client import ReplayClient


@dataclass
class GeneratorSlot:
    """One generator position: its current actor, its run() call, and what it last reported."""
    actor: object
    run: object = None
    stats: object = None
    restarts: int = 0
    first_call: int = 0      # where the current actor started in the pace (its stats count from there)


@dataclass
class RoleHandles:
    """Every role of one attempt (launch.build makes them; a restart makes new ones)."""
    cfg: RunConfig
    replay: ReplayClient
    board: object                # the generators' weight board
    eval_board: object           # the evaluator's own board
    learners: LearnerGroup
    slots: list[GeneratorSlot]
    evaluator: object
    model_path: str
    reports: object = None       # GeneratorReports: every generator's newest stats, read in one call
    where: dict = field(default_factory=dict)  # Roles.placement(): a role's death names the node it was lost with
    layout: object = None        # driver/placement.py's Placement: a replaced generator goes back into its bundle

    @property
    def generators(self) -> list:
        return [s.actor for s in self.slots]

    @property
    def restarts(self) -> int:
        """Generator replacements in this attempt."""
        return sum(s.restarts for s in self.slots)

    def spawn(self, i: int, first_call: int):
        """A new generator for position i, as launch starts one, going on from call first_call of the pace."""
        return spawn_generator(self.cfg, i, self.model_path, self.replay.shards, self.board, self.reports,
                               first_call, self.layout and self.layout.generator(i))

    def rank_names(self) -> list[str]:
        return numbered("learner rank", len(self.learners.ranks))

    def shard_names(self) -> list[str]:
        return numbered("replay shard", len(self.replay.shards))

    def generator_names(self) -> list[str]:
        return numbered("generator", len(self.slots))

    def publisher_names(self) -> list[str]:
        """The ranks a publish calls (LearnerGroup.publish): every rank under ZeRO-3, whose buckets they gather."""
        return self.rank_names() if self.cfg.learner.zero_stage == 3 else ["learner rank 0"]

    def role_names(self) -> dict[str, str]:
        """Actor id (hex) -> the role it plays, as failure and restart lines name it."""
        named = {f"generator {i}": s.actor for i, s in enumerate(self.slots)}
        named |= {f"replay shard {i}": s for i, s in enumerate(self.replay.shards)}
        named |= {f"learner rank {i}": r for i, r in enumerate(self.learners.ranks if self.learners else [])}
        named |= {"weight board": self.board, "evaluator's weight board": self.eval_board,
                  "generator reports": self.reports, "evaluator": self.evaluator}
        return {a._actor_id.hex(): name for name, a in named.items() if a is not None}


def numbered(role: str, n: int) -> list[str]:
    return [f"{role} {i}" for i in range(n)]


def spawn_generator(cfg: RunConfig, i: int, model_path: str, shards: list, board, reports, first_call: int = 0,
                    strategy=None):
    """strategy: where Ray places it (its bundle of the run's reservation); None: by its resources."""
    c = cfg.cluster
    return Generator.options(num_cpus=c.cpus_per_actor, num_gpus=c.gpus_per_generator,
                             resources=c.generator_resources or None, scheduling_strategy=strategy).remote(
        cfg, i, model_path, shards, board, first_call, reports)

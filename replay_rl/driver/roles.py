"""The run's roles on Ray and the driver's view of their health: step the learners under a stall watchdog,
recover a role that died or hung as far as its own recovery goes, name one past it, and stop everything promptly.
launch.py builds them."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError

from replay_rl.analysis.accounting import ComputeLedger
from replay_rl.driver import deadlines
from replay_rl.config import RunConfig
from replay_rl.driver.failures import RunFailed, resume_hint
from replay_rl.generation.generator import Generator
from replay_rl.generation.reports import GeneratorStats
from replay_rl.driver.health import PROBE_S, Hung, NoAnswer, first_error, hung_roles, node_of, one_line, probe_all
from replay_rl.learner.agreement import agreement_problem
from replay_rl.learner.group import LearnerGroup
from replay_rl.replay.client import ReplayClient, shard_restarts
from replay_rl.replay.table import TableStats
from replay_rl.driver.supervision import Phase, dead_role, death_of, numbered

__all__ = ["GeneratorSlot", "Roles", "RunFailed", "resume_hint", "spawn_generator"]


@dataclass
class GeneratorSlot:
    """One generator position: its current actor, its run() call, and what it last reported."""
    actor: object
    run: object = None
    stats: object = None
    restarts: int = 0
    first_call: int = 0      # where the current actor started in the pace (its stats count from there)


@dataclass
class Roles:
    cfg: RunConfig
    replay: ReplayClient
    board: object
    eval_board: object
    learners: LearnerGroup
    slots: list[GeneratorSlot]
    evaluator: object
    model_path: str
    pending_eval: tuple | None = None  # (step, ledger row at that step, the evaluator's result ref)
    replay_asked: list | None = None  # the shards' stats, asked for as the step ended (replay_stats collects them)
    reports: object = None  # GeneratorReports: every generator's newest stats, read in one call
    reports_asked: object = None  # its outstanding all() call, read when it is ready, never waited on
    run_restarts: int = 0  # how often every role was restarted from a checkpoint before these were built
    where: dict = field(default_factory=dict)  # placement(): a role's death names the node it was lost with

    @property
    def generators(self) -> list:
        return [s.actor for s in self.slots]

    @property
    def restarts(self) -> int:
        return sum(s.restarts for s in self.slots)

    def placement(self) -> dict[str, dict]:
        """Which node each actor runs on, with the custom resources that node offers (written to placement.json:
        where cluster.generator_resources / learner_resources put the roles)."""
        actors = {f"generator {i}": a for i, a in enumerate(self.generators)}
        actors |= {f"learner rank {i}": r for i, r in enumerate(self.learners.ranks)}
        actors |= {f"replay shard {i}": s for i, s in enumerate(self.replay.shards)}
        node_ids = Phase(self, "start", self.cfg.run.start_timeout_s, "run.start_timeout_s").wait(
            [a.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()) for a in actors.values()],
            list(actors))
        offers = {n["NodeID"]: {k: v for k, v in n["Resources"].items() if not k.startswith(("node:", "CPU", "GPU",
                                                                                          "memory", "object_store"))}
                  for n in ray.nodes()}
        self.where = {name: {"node_id": node, "node_resources": offers.get(node, {})}
                      for name, node in zip(actors, node_ids)}
        return self.where

    def start_generators(self) -> None:
        for s in self.slots:
            s.run = s.actor.run.remote()

    def learner_step(self, consumer_version: int, draw_ahead: bool = False) -> dict[str, float]:
        """learners.step, watched: a generator that dies is replaced, a rank that dies ends the run with one line,
        and a step that stalls for run.stall_timeout_s recovers the roles that hung or ends the run naming the rule
        that holds it, instead of every rank waiting out its timeouts. draw_ahead: as LearnerRank.step."""
        pending, started = self.learners.step_async(consumer_version, draw_ahead), time.monotonic()
        while True:
            ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=1.0)
            if not waiting:
                try:
                    metrics = self.learners.gather_step(pending)
                except Exception as e:  # noqa: BLE001 - named below: the dead rank, else the first error
                    raise self._step_failure(pending) from e
                if consumer_version == 0:  # every rollout is fresh: the start-up agreement check
                    self._check_agreement(metrics)
                # asked now, answered while the weights publish: one wait fewer on the step's critical path
                self.replay_asked = [s.stats.remote() for s in self.replay.shards]
                return metrics
            if ready:  # one rank finished early only when another is stuck or dead
                self._check_ranks(ready, pending)
            self.check_generators()
            if time.monotonic() - started > self.cfg.run.stall_timeout_s:
                self.recover_hung(consumer_version)
                started = time.monotonic()

    def _check_agreement(self, metrics: dict[str, float]) -> None:
        r = self.cfg.run
        if problem := agreement_problem(metrics, r.mismatch_warn, r.mismatch_fail):
            level, line = problem
            if level == "fail":
                raise RunFailed(line)
            print(line, file=sys.stderr, flush=True)

    def _check_ranks(self, ready: list, pending: list) -> None:
        try:
            ray.get(ready)
        except Exception as e:  # noqa: BLE001 - a survivor's error is a symptom; name the dead rank if there is one
            raise self._step_failure(pending) from e

    def _step_failure(self, pending: list) -> RunFailed:
        """Name the member that died, not the survivors' symptom (a closed gloo connection, a failed sample)."""
        return self.dead_member() or RunFailed("a learner step failed: " + first_error(pending))

    def died(self, death: str, role: str = "") -> RunFailed:
        """A death's failure: `role` (e.g. "learner rank 1") names the node it ran on, and whether that node left."""
        node = node_of(self.where, role)
        death = f"{death} on {node}" if node else death
        return RunFailed(f"{death}; {resume_hint(self.cfg.run.output_dir)}", death, self.where)

    def dead_member(self) -> RunFailed | None:
        """The failure of the first learner rank or replay shard that no longer answers, or None."""
        # shards first: a rank whose shard died fails, and its peer then waits in the allreduce
        members = [(f"replay shard {i}", s.stats) for i, s in enumerate(self.replay.shards)]
        members += [(f"learner rank {i}", r.address) for i, r in enumerate(self.learners.ranks)]
        for name, method in members:
            try:
                ray.get(method.remote(), timeout=PROBE_S)
            except GetTimeoutError:
                continue  # busy (a rank waiting in the allreduce for a failed peer), not dead
            except RayActorError:
                return self.died(f"{name} died", role=name)
        return None

    def publish(self, version: int) -> dict[str, float]:
        return deadlines.publish(self, version)

    def recover_hung(self, consumer_version: int) -> None:
        """Kill and recover each role that does not answer once a step stalled, as its death would be recovered;
        a rule that holds the step, or a role past its restarts, ends the run with the stall's diagnosis."""
        line, hung = self.diagnose(consumer_version)
        if hung is None:
            raise RunFailed(line)
        r = self.cfg.run
        try:
            self.recover(hung, hung.how or f"did not answer in {r.hung_probe_s:g}s after {r.stall_timeout_s:g}s "
                         "without a learner step")
        except RunFailed as e:
            raise RunFailed(f"{line}; {e}", e.death, e.where) from e

    def recover(self, hung: Hung, cause: str, generator_cause: str | None = None) -> None:
        """Recover the hung shards and generators as their deaths would be; hung learner ranks are a death."""
        if hung.learners or hung.death:  # past any role's own recovery: every role restarts (run.max_restarts)
            raise self.died(hung.learners or hung.death)
        for i in hung.shards:
            self.recover_shard(i, cause)
        for i in hung.generators:
            self.recover_generator(i, generator_cause or cause)

    def recover_shard(self, i: int, cause: str) -> None:
        """Kill a hung shard: Ray restarts it in place, it restores its live snapshot and counts the restart
        (buffer/shard_restarts), and the calls in flight to it are sent again. With no restart left, a death."""
        allowed, used = shard_restarts(self.cfg), self.replay.restarts_seen(i)
        if used >= allowed:
            why = (f"run.max_shard_restarts={allowed} restarts are used up" if self.cfg.replay.snapshot_every_steps
                   else "has no live snapshot to restart from (replay.snapshot_every_steps)")
            raise self.died(f"replay shard {i} {cause} and {why}")
        self.replay.kill(i)
        deadlines.credit_restart(self, i)  # after the kill: no call whose rollouts it lost is missed
        print(f"replay shard {i} {cause}: killed, restarts from its live snapshot (restart {used + 1} of {allowed})",
              file=sys.stderr, flush=True)

    def recover_generator(self, i: int, cause: str) -> None:
        """Replace generator i, which died or hung, up to run.max_generator_restarts times in the run."""
        limit = self.cfg.run.max_generator_restarts
        if self.restarts >= limit:
            raise RunFailed(f"generator {i} {cause} and run.max_generator_restarts={limit} restarts are used up")
        if self.cfg.sync.type == "nccl":  # the group's communicators are broken: every member must form it anew
            raise self.died(f"generator {i} {cause} in the sync.type=nccl broadcast group, which re-forms when every "
                            "role restarts from the newest checkpoint (run.max_restarts)")
        self.replace_generator(i)
        print(f"generator {i} {cause}: replaced (restart {self.restarts} of {limit})", file=sys.stderr, flush=True)

    def check_generators(self) -> None:
        """Replace a generator whose actor died (it reloads the newest weights); re-raise one that failed."""
        runs = [s.run for s in self.slots]
        ended = set(ray.wait(runs, num_returns=len(runs), timeout=0)[0])  # one call per step, not one per generator
        for i, s in enumerate(self.slots):
            if s.run not in ended:
                continue
            try:
                ray.get(s.run)
            except (ActorDiedError, ActorUnavailableError) as e:
                if dead_role(e, self) in (None, f"generator {i}"):  # its own death, not one its call saw
                    self.recover_generator(i, "died")
                    continue
                raise self.dead_member() or death_of(self, e) from e  # a shard, the board: named, not this one
            except Exception as e:  # noqa: BLE001 - an insert into a dead shard lands here first
                raise self.dead_member() or RunFailed(f"generator {i} failed: {one_line(e)}") from e
            raise RunFailed(f"generator {i} stopped on its own; see its log")

    def replace_generator(self, i: int) -> None:
        s = self.slots[i]
        ray.kill(s.actor)  # one that hung; a dead one is gone already
        # the calls the position has made: its actor's own count, which includes where that actor started; one
        # that died before reporting made none beyond its start (counting rollouts from 0 repeated calls after a
        # second replacement or a resume, a burst that inflated K_inf)
        # (max: a report of the actor before may still arrive after its replacement started)
        calls = max(s.stats.calls, s.first_call) if s.stats else s.first_call
        # before the replacement reports: none is lost
        deadlines.recovered(self, [self.reports.forget.remote(i)], ["generator reports"], f"generator {i}")
        self.reports_asked = None  # an answer asked before the forget would bring the old actor's numbers back
        s.actor = spawn_generator(self.cfg, i, self.model_path, self.replay.shards, self.board, self.reports, calls)
        s.run, s.stats, s.first_call = s.actor.run.remote(), None, calls
        s.restarts += 1

    def generator_stats(self) -> list:
        """The newest stats each generator reported, without waiting (for a paused one, or the reports' answer)."""
        if self.reports_asked is not None and ray.wait([self.reports_asked], timeout=0)[0]:
            for i, stats in ray.get(self.reports_asked).items():
                self.slots[i].stats = stats
            self.reports_asked = None
        if self.reports_asked is None:
            self.reports_asked = self.reports.all.remote()
        return [s.stats for s in self.slots if s.stats is not None]

    def diagnose(self, consumer_version: int) -> tuple[str, Hung | None]:
        """One line: who waits on what, from probes waited on together for at most run.hung_probe_s; and the roles
        that hang, if any (hung_roles)."""
        n, t = self.cfg.rank_batch_size, len(self.replay.shards)
        answers = probe_all([s.blocked_reason.remote(n, consumer_version) for s in self.replay.shards]
                            + [s.actor.stats.remote() for s in self.slots]
                            + [s.stats.remote() for s in self.replay.shards], self.cfg.run.hung_probe_s)
        shards, gens, tables = answers[:t], answers[t:-t], answers[-t:]
        gen_text = ", ".join(f"generator {i} " + (f"at version {g.version}, {g.rollouts} rollouts"
                             if isinstance(g, GeneratorStats) else str(g)) for i, g in enumerate(gens))
        shard_text = "; ".join(f"shard {i}: {r}" for i, r in enumerate(shards))
        line = (f"stalled: no learner step for {self.cfg.run.stall_timeout_s:g}s (step {consumer_version + 1}); "
                f"{shard_text}; {gen_text}; sync {self.cfg.sync.type}")
        return line, hung_roles(shards, gens, consumer_version + 1, tables)

    def replay_stats(self) -> TableStats:
        """replay.stats(), bounded: a shard that gives no answer within run.stall_timeout_s is recovered as hung
        (its restart answers the same call) instead of holding the driver for ever, and so is a generator that does
        not answer a probe then: one hung beside it is found now, not one stall later."""
        refs = self.replay_asked or [s.stats.remote() for s in self.replay.shards]
        self.replay_asked, bound = None, self.cfg.run.stall_timeout_s
        ready = ray.wait(refs, num_returns=len(refs), timeout=bound)[0]
        if silent := tuple(i for i, ref in enumerate(refs) if ref not in ready):
            probe = self.cfg.run.hung_probe_s
            gens = probe_all([s.actor.stats.remote() for s in self.slots], probe)
            self.recover(Hung(silent, tuple(i for i, g in enumerate(gens) if isinstance(g, NoAnswer))),
                         f"did not answer a stats call in {bound:g}s",
                         f"did not answer in {probe:g}s beside a hung shard")
            return self.replay.stats(deadlines.recovered(self, refs, numbered("replay shard", len(refs)),
                                                         ", ".join(f"replay shard {i}" for i in silent)))
        return self.replay.stats(ray.get(refs))

    def start_eval(self, step: int, ledger_row: dict) -> list[tuple[int, dict]]:
        return deadlines.start_eval(self, step, ledger_row)

    def finished_evals(self, wait: bool = False) -> list[tuple[int, dict]]:
        return deadlines.finished_evals(self, wait)

    def update(self, ledger: ComputeLedger, replay: TableStats, learner: dict[str, float],
               sync: dict[str, float] | None, wall_s: float) -> None:
        """Hand the ledger this step's counters, from the roles that own them."""
        gens = self.generator_stats()
        extra = {"generator_restarts": self.restarts, "run_restarts": self.run_restarts}
        if gens:
            extra["generator_version_min"] = min(g.version for g in gens)  # how far behind the slowest is
        ledger.observe(inserts=replay.inserts, lost=replay.rollouts_lost, consumed=self.cfg.learner.batch_size,
                       tokens=sum(g.tokens for g in gens), generator_busy_s=sum(g.busy_s for g in gens),
                       learner_busy_s=learner["rank_busy_s"] * self.cfg.cluster.learners, wall_s=wall_s,
                       publish_s=sync["publish_s"] if sync else 0.0,
                       publish_bytes=sync["publish_bytes"] if sync else 0, **extra)

    def checkpoint(self, out: Path, step: int, ledger: ComputeLedger) -> Path:
        return deadlines.checkpoint(self, out, step, ledger)

    def resume(self, path: str | Path, ledger: ComputeLedger) -> int:
        return deadlines.resume(self, path, ledger)

    def shutdown(self) -> None:
        """Ask generators to stop, give them a few seconds to flush, then kill whatever is still blocked (in a
        rate-limited insert or a broadcast) instead of waiting out its timeout."""
        for s in self.slots:
            s.actor.stop.remote()
        runs = [s.run for s in self.slots if s.run is not None]
        if runs:
            ray.wait(runs, num_returns=len(runs), timeout=5)
        for actor in [*self.generators, self.evaluator, self.board, self.eval_board, self.reports,
                      *self.replay.shards]:
            ray.kill(actor)
        self.learners.shutdown()


def spawn_generator(cfg: RunConfig, i: int, model_path: str, shards: list, board, reports, first_call: int = 0):
    c = cfg.cluster
    return Generator.options(num_cpus=c.cpus_per_actor, num_gpus=c.gpus_per_generator,
                             resources=c.generator_resources or None).remote(
        cfg, i, model_path, shards, board, first_call, reports)

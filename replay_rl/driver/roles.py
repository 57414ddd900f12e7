"""The run's roles on Ray, as the driver's loop sees them: a thin front over their handles (handles.py) that steps
the learners under a stall watchdog, publishes, gathers stats and stops everything promptly. It holds the owners
of the rest: the Supervisor (names and recovers a role that died or hung) and the EvalSchedule (the eval in
flight); the trainer holds the attempt's Checkpointer. launch.py builds the handles."""

from __future__ import annotations

import sys
import time

import ray

from replay_rl.analysis.accounting import ComputeLedger
from replay_rl.config.replay_specs import shard_restarts
from replay_rl.driver.eval_schedule import EvalSchedule
from replay_rl.driver.failures import RunFailed
from replay_rl.driver.handles import RoleHandles
from replay_rl.driver.health import Hung, NoAnswer, placed_on, probe_all
from replay_rl.driver.supervision import Phase, publish, recovered
from replay_rl.driver.supervisor import Supervisor
from replay_rl.learner.agreement import agreement_problem
from replay_rl.replay.table_stats import TableStats


class Roles:
    """run_restarts: how often every role was restarted from a checkpoint before these were built."""

    def __init__(self, handles: RoleHandles, run_restarts: int = 0) -> None:
        self.handles, self.run_restarts = handles, run_restarts
        self.supervisor = Supervisor(handles, handles.spawn, replaced=self._forget_reports)
        self.evals = EvalSchedule(handles)
        self.replay_asked: list | None = None  # the shards' stats, asked for as the step ended (replay_stats reads)
        self.reports_asked = None  # the generator reports' outstanding all() call, read when ready, never waited on

    def _forget_reports(self, i: int) -> None:
        self.reports_asked = None

    def placement(self) -> dict[str, dict]:
        """Which node each actor runs on, with the custom resources that node offers, and the placement group it
        runs in (a study trial's reservation; None outside one). Written to placement.json: where
        cluster.generator_resources / learner_resources put the roles."""
        h = self.handles
        actors = {f"generator {i}": a for i, a in enumerate(h.generators)}
        actors |= {f"learner rank {i}": r for i, r in enumerate(h.learners.ranks)}
        actors |= {f"replay shard {i}": s for i, s in enumerate(h.replay.shards)}
        where = Phase(h, "start", h.cfg.run.start_timeout_s, "run.start_timeout_s").wait(
            [a.__ray_call__.remote(lambda _: (ray.get_runtime_context().get_node_id(),
                                              ray.get_runtime_context().get_placement_group_id()))
             for a in actors.values()], list(actors))
        nodes = ray.nodes()
        h.where = {name: placed_on(node, nodes) | {"placement_group": pg} for name, (node, pg) in zip(actors, where)}
        return h.where

    def start_generators(self) -> None:
        for s in self.handles.slots:
            s.run = s.actor.run.remote()

    def learner_step(self, consumer_version: int, draw_ahead: bool = False) -> dict[str, float]:
        """learners.step, watched: a generator that dies is replaced, a rank that dies ends the run with one line,
        and a step that stalls for run.stall_timeout_s recovers the roles that hung or ends the run naming the rule
        that holds it, instead of every rank waiting out its timeouts. draw_ahead: as LearnerRank.step."""
        pending, started = self.handles.learners.step_async(consumer_version, draw_ahead), time.monotonic()
        while True:
            ready, waiting = ray.wait(pending, num_returns=len(pending), timeout=1.0)
            if not waiting:
                try:
                    metrics = self.handles.learners.gather_step(pending)
                except Exception as e:  # noqa: BLE001 - named below: the dead rank, else the first error
                    raise self.supervisor.step_failure(pending) from e
                if consumer_version == 0:  # every rollout is fresh: the start-up agreement check
                    self._check_agreement(metrics)
                # asked now, answered while the weights publish: one wait fewer on the step's critical path
                self.replay_asked = [s.stats.remote() for s in self.handles.replay.shards]
                return metrics
            if ready:  # one rank finished early only when another is stuck or dead
                self.supervisor.check_ranks(ready, pending)
            if self.supervisor.check_generators():  # it waited for a lost node: the stall clock starts again
                started = time.monotonic()
            if time.monotonic() - started > self.handles.cfg.run.stall_timeout_s:
                self.supervisor.recover_hung(consumer_version)
                started = time.monotonic()

    def _check_agreement(self, metrics: dict[str, float]) -> None:
        r = self.handles.cfg.run
        if problem := agreement_problem(metrics, r.mismatch_warn, r.mismatch_fail):
            level, line = problem
            if level == "fail":
                raise RunFailed(line)
            print(line, file=sys.stderr, flush=True)

    def publish(self, version: int) -> dict[str, float]:
        return publish(self.handles, version)

    def generator_stats(self, wait: bool = False) -> list:
        """The newest stats each generator reported, without waiting (for a paused one, or the reports' answer);
        wait: for the reports' answer to a call made now, up to run.hung_probe_s (the run's end)."""
        h = self.handles
        if wait:
            self.reports_asked = h.reports.all.remote()
        if self.reports_asked is not None and ray.wait([self.reports_asked],
                                                       timeout=h.cfg.run.hung_probe_s if wait else 0)[0]:
            for i, stats in ray.get(self.reports_asked).items():
                h.slots[i].stats = stats
            self.reports_asked = None
        if self.reports_asked is None:
            self.reports_asked = h.reports.all.remote()
        return [s.stats for s in h.slots if s.stats is not None]

    def generator_samples(self) -> list[dict]:
        """Each generator's newest group as text (run.log_samples_every); none if the reports do not answer within
        run.hung_probe_s (the samples are a view, never a reason to stall)."""
        ref = self.handles.reports.samples.remote()
        return ray.get(ref) if ray.wait([ref], timeout=self.handles.cfg.run.hung_probe_s)[0] else []

    def replay_stats(self) -> TableStats:
        """replay.stats(), bounded: a shard that gives no answer within run.stall_timeout_s is recovered as hung
        (its restart answers the same call) instead of holding the driver for ever, and so is a generator that does
        not answer a probe then: one hung beside it is found now, not one stall later."""
        h = self.handles
        refs = self.replay_asked or [s.stats.remote() for s in h.replay.shards]
        self.replay_asked, bound = None, h.cfg.run.stall_timeout_s
        ready = ray.wait(refs, num_returns=len(refs), timeout=bound)[0]
        if silent := tuple(i for i, ref in enumerate(refs) if ref not in ready):
            probe = h.cfg.run.hung_probe_s
            gens = probe_all([s.actor.stats.remote() for s in h.slots], probe)
            self.supervisor.recover(Hung(silent, tuple(i for i, g in enumerate(gens) if isinstance(g, NoAnswer))),
                                    f"did not answer a stats call in {bound:g}s",
                                    f"did not answer in {probe:g}s beside a hung shard")
            stats = h.replay.stats(recovered(h, refs, h.shard_names(), ", ".join(f"replay shard {i}" for i in silent)))
        else:
            stats = h.replay.stats(ray.get(refs))
        for i, restarts, lost in h.replay.take_restored():  # Ray restarted it in place: said, as a replacement is
            print(f"replay shard {i} died: restored in place from its live snapshot (restart {restarts} of "
                  f"{shard_restarts(h.cfg)}; at least {lost} rollouts inserted after it lost)", file=sys.stderr,
                  flush=True)
        return stats

    def update(self, ledger: ComputeLedger, replay: TableStats, learner: dict[str, float],
               sync: dict[str, float] | None, wall_s: float) -> None:
        """Hand the ledger this step's counters, from the roles that own them."""
        gens, cfg = self.generator_stats(), self.handles.cfg
        extra = {"generator_restarts": self.handles.restarts, "run_restarts": self.run_restarts}
        if gens:
            extra["generator_version_min"] = min(g.version for g in gens)  # how far behind the slowest is
            groups = sum(g.rollouts for g in gens) / cfg.generation.group_size
            # of all groups generated so far by the generators now running (a replaced one's count restarts)
            extra["zero_variance_share_fresh"] = sum(g.zero_variance_groups for g in gens) / max(groups, 1)
            extra["prompt_replay_share"] = sum(g.prompts_replayed for g in gens) / max(groups, 1)
        # K_train: the rollouts the loss trained on (learner.drop_zero_advantage leaves some out); ranks' equal shares
        consumed = round(learner.get("trained_share", 1.0) * cfg.learner.batch_size)
        ledger.observe(inserts=replay.inserts, lost=replay.rollouts_lost, consumed=consumed,
                       forward=cfg.learner.batch_size, tokens=sum(g.tokens for g in gens),
                       generator_busy_s=sum(g.busy_s for g in gens),
                       learner_busy_s=learner["rank_busy_s"] * cfg.cluster.learners, wall_s=wall_s,
                       publish_s=sync["publish_s"] if sync else 0.0,
                       publish_bytes=sync["publish_bytes"] if sync else 0, **extra)

    def shutdown(self) -> None:
        """Ask generators to stop, give them a few seconds to flush, then kill whatever is still blocked (in a
        rate-limited insert or a broadcast) instead of waiting out its timeout."""
        h = self.handles
        for s in h.slots:
            s.actor.stop.remote()
        runs = [s.run for s in h.slots if s.run is not None]
        if runs:
            ray.wait(runs, num_returns=len(runs), timeout=5)
        for actor in [*h.generators, h.evaluator, h.board, h.eval_board, h.reports, *h.replay.shards]:
            ray.kill(actor)
        h.learners.shutdown()


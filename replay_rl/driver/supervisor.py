"""The roles' supervisor: it names a role that died or hung and recovers it as far as that role's own recovery goes
(a shard restarts in place from its live snapshot, a generator is replaced); past that, the death is a RunFailed
that train() answers by restarting every role from the newest checkpoint (run.max_restarts).
It reads the RoleHandles it watches and never builds them (spawn is handed in); whoever holds it hears of a
replaced generator through `replaced`, and it holds nothing back."""

from __future__ import annotations

import sys
import time
from typing import Callable

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError

from replay_rl.config.replay_specs import shard_restarts
from replay_rl.driver import supervision
from replay_rl.driver.failures import RunFailed, one_line, resume_hint
from replay_rl.driver.handles import RoleHandles
from replay_rl.driver.health import Hung, first_error, hung_roles, left_node, node_of, placed_on, probe_all
from replay_rl.driver.supervision import dead_role, death_of
from replay_rl.generation.backend import HalfLoaded
from replay_rl.generation.reports import GeneratorStats
from replay_rl.sync.base import WeightsGone


class Supervisor:
    """Watches `handles` (cfg, replay, learners, slots, where, reports). spawn(i, first_call) starts a new generator
    for position i, as launch does; replaced(i) is told once position i holds a new one."""

    def __init__(self, handles: RoleHandles, spawn: Callable[[int, int], object],
                 replaced: Callable[[int], None] = lambda i: None) -> None:
        self.handles, self.spawn, self.replaced = handles, spawn, replaced
        self.slow_step: int | None = None  # the consumer version whose step the learner ranks were given more time

    def died(self, death: str, role: str = "") -> RunFailed:
        return supervision.died(self.handles, death, role)

    def dead_member(self) -> RunFailed | None:
        return supervision.dead_member(self.handles)

    def step_failure(self, pending: list) -> RunFailed:
        """Name the member that died, not the survivors' symptom (a closed gloo connection, a failed sample)."""
        return self.dead_member() or RunFailed("a learner step failed: " + first_error(pending))

    def check_ranks(self, ready: list, pending: list) -> None:
        try:
            ray.get(ready)
        except Exception as e:  # noqa: BLE001 - a survivor's error is a symptom; name the dead rank if there is one
            raise self.step_failure(pending) from e

    def recover_hung(self, consumer_version: int) -> None:
        """Kill and recover each role that does not answer once a step stalled, as its death would be recovered;
        a rule that holds the step, or a role past its restarts, ends the run with the stall's diagnosis. Learner
        ranks that hold their step are hung only once it stalls a second window in a row."""
        line, hung = self.diagnose(consumer_version)
        if hung is None:
            raise RunFailed(line)
        r = self.handles.cfg.run
        if hung.learners and self.slow_step != consumer_version:
            # every role answers and the ranks hold their batches: a step slowed by a loaded box looks the same as
            # a hang for one window, and the ranks' recovery (every role from a checkpoint) is the costliest
            self.slow_step = consumer_version
            print(f"{line}; {hung.learners.removesuffix(' (hung)')} yet: waiting run.stall_timeout_s="
                  f"{r.stall_timeout_s:g}s more before treating them as hung", file=sys.stderr, flush=True)
            return
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
        cfg, replay = self.handles.cfg, self.handles.replay
        allowed, used = shard_restarts(cfg), replay.restarts_seen(i)
        if used >= allowed:
            why = (f"run.max_shard_restarts={allowed} restarts are used up" if cfg.replay.snapshot_every_steps
                   else "has no live snapshot to restart from (replay.snapshot_every_steps)")
            raise self.died(f"replay shard {i} {cause} and {why}")
        replay.kill(i)
        self.credit_restart(i)  # after the kill: no call whose rollouts it lost is missed
        print(f"replay shard {i} {cause}: killed, restarts from its live snapshot (restart {used + 1} of {allowed})",
              file=sys.stderr, flush=True)

    def recover_generator(self, i: int, cause: str) -> bool:
        """Replace generator i, which died or hung, up to run.max_generator_restarts times in the run. When its node
        left the cluster, wait up to run.node_wait_s from now for its replacement to run somewhere (a replacement
        node, or room on another): the pace deals every W-th call to this position, so the run cannot go on
        without it. Returns whether it waited so."""
        cfg = self.handles.cfg
        limit = cfg.run.max_generator_restarts
        if self.handles.restarts >= limit:
            raise RunFailed(f"generator {i} {cause} and run.max_generator_restarts={limit} restarts are used up")
        if cfg.sync.type == "nccl":  # the group's communicators are broken: every member must form it anew
            raise self.died(f"generator {i} {cause} in the sync.type=nccl broadcast group, which re-forms when every "
                            "role restarts from the newest checkpoint (run.max_restarts)")
        since, role = time.monotonic(), f"generator {i}"
        lost = left_node(self.handles.where, role, since + cfg.run.node_wait_s)
        self.replace_generator(i)
        how = "replaced"
        if lost:
            cause = f"{cause} on {lost}"
            self.await_placement(i, f"{role} {cause}", since + cfg.run.node_wait_s)
            how = f"replaced on {node_of(self.handles.where, role)} after {time.monotonic() - since:.0f}s"
        print(f"{role} {cause}: {how} (restart {self.handles.restarts} of {limit})", file=sys.stderr, flush=True)
        return bool(lost)

    def await_placement(self, i: int, death: str, deadline: float) -> None:
        """Wait until generator i's replacement has started on a node, until the monotonic deadline; past it, the
        run stops in one line (a restart of every role would wait for the same resources)."""
        c, r = self.handles.cfg.cluster, self.handles.cfg.run
        wants = ", ".join(f"{k}={v:g}" for k, v in c.generator_resources.items()) or f"{c.cpus_per_actor:g} CPU"
        print(f"{death}: waiting up to {r.node_wait_s:g}s (run.node_wait_s) for a node offering {wants} to run its "
              "replacement", file=sys.stderr, flush=True)
        ref = self.handles.slots[i].actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        if not ray.wait([ref], timeout=max(0.0, deadline - time.monotonic()))[0]:
            raise RunFailed(f"{death}, and no node offering {wants} started its replacement within "
                            f"run.node_wait_s={r.node_wait_s:g}s; once the cluster offers those resources again, "
                            f"{resume_hint(r.output_dir)}")
        self.handles.where[f"generator {i}"] = placed_on(ray.get(ref))  # a later loss names the node it is on now

    def check_generators(self) -> bool:
        """Replace a generator whose actor died (it reloads the newest weights); re-raise one that failed. Returns
        whether a replacement waited for a lost node."""
        slots, waited = self.handles.slots, False
        runs = [s.run for s in slots]
        ended = set(ray.wait(runs, num_returns=len(runs), timeout=0)[0])  # one call per step, not one per generator
        for i, s in enumerate(slots):
            if s.run not in ended:
                continue
            try:
                ray.get(s.run)
            except (ActorDiedError, ActorUnavailableError) as e:
                if dead_role(e, self.handles) in (None, f"generator {i}"):  # its own death, not one its call saw
                    waited |= self.recover_generator(i, "died")
                    continue
                raise self.dead_member() or death_of(self.handles, e) from e  # a shard, the board: named, not this
            except Exception as e:  # noqa: BLE001 - an insert into a dead shard lands here first
                if (member := self.dead_member()) is not None:
                    raise member from e
                if isinstance(cause := getattr(e, "cause", None), (WeightsGone, HalfLoaded)):
                    # its weights were lost and no newer version came in sync.timeout_s, or a stream broke off part
                    # way: a replacement loads the board's newest, as one does after a death
                    what = "lost its weights" if isinstance(cause, WeightsGone) else "half-loaded its weights"
                    waited |= self.recover_generator(i, what)
                    continue
                raise RunFailed(f"generator {i} failed: {one_line(e)}") from e
            raise RunFailed(f"generator {i} stopped on its own; see its log")
        return waited

    def replace_generator(self, i: int) -> None:
        handles = self.handles
        s = handles.slots[i]
        ray.kill(s.actor)  # one that hung; a dead one is gone already
        # the calls the position has made: its actor's own count, which includes where that actor started; one
        # that died before reporting made none beyond its start (counting rollouts from 0 repeated calls after a
        # second replacement or a resume, a burst that inflated K_inf)
        # (max: a report of the actor before may still arrive after its replacement started)
        calls = max(s.stats.calls, s.first_call) if s.stats else s.first_call
        # before the replacement reports: none is lost
        supervision.recovered(handles, [handles.reports.forget.remote(i)], ["generator reports"], f"generator {i}")
        self.replaced(i)  # an answer asked before the forget would bring the old actor's numbers back
        s.actor = self.spawn(i, calls)
        s.run, s.stats, s.first_call = s.actor.run.remote(), None, calls
        s.restarts += 1

    def diagnose(self, consumer_version: int) -> tuple[str, Hung | None]:
        """One line: who waits on what, from probes waited on together for at most run.hung_probe_s; and the roles
        that hang, if any (hung_roles)."""
        cfg, replay, slots, learners = self.handles.cfg, self.handles.replay, self.handles.slots, self.handles.learners
        n, t, g = cfg.rank_batch_size, len(replay.shards), len(slots)
        answers = probe_all([s.blocked_reason.remote(n, consumer_version) for s in replay.shards]
                            + [s.actor.stats.remote() for s in slots]
                            + [s.stats.remote() for s in replay.shards]
                            + [r.pid.remote() for r in learners.ranks], cfg.run.hung_probe_s)
        shards, gens, tables, ranks = answers[:t], answers[t:t + g], answers[t + g:2 * t + g], answers[2 * t + g:]
        gen_text = ", ".join(f"generator {i} " + (f"at version {g.version}, {g.rollouts} rollouts"
                             if isinstance(g, GeneratorStats) else str(g)) for i, g in enumerate(gens))
        shard_text = "; ".join(f"shard {i}: {r}" for i, r in enumerate(shards))
        line = (f"stalled: no learner step for {cfg.run.stall_timeout_s:g}s (step {consumer_version + 1}); "
                f"{shard_text}; {gen_text}; sync {cfg.sync.type}")
        return line, hung_roles(shards, gens, consumer_version + 1, tables, list(zip(ranks, learners.pids)))

    def credit_restart(self, i: int) -> None:
        """Send shard i, killed to restart in place, the calls each generator has started (read after the kill: a
        call whose rollouts it lost is never missed), its restore credit. Not waited on; with no answer from the
        reports in run.hung_probe_s the shard keeps the pace's allowance, which may serve a few batches early,
        never late."""
        handles = self.handles
        try:
            latest = ray.get(handles.reports.all.remote(), timeout=handles.cfg.run.hung_probe_s)
        except Exception:  # noqa: BLE001 - the allowance stands (a hung reports actor is found by its own probes)
            return
        calls = [max(latest[g].calls, s.first_call) if g in latest else s.first_call
                 for g, s in enumerate(handles.slots)]
        handles.replay.shards[i].restored_calls.remote(calls)

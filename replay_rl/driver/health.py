"""The driver's probes of its roles, each bounded in time, and what a stalled learner step means: a role that does
not answer (hung: paused, a wedged device or filesystem), learner ranks that hold the step, or a rule."""

from __future__ import annotations

import time
from dataclasses import dataclass

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from replay_rl.driver.failures import one_line
from replay_rl.replay.shard import NOT_ASKED, SERVED

PROBE_S = 5.0  # how long a probe that tells a dead actor from a busy one waits for its answer


@dataclass(frozen=True)
class NoAnswer:
    """A probe not answered within `seconds`: the actor is paused, wedged, or too busy to serve a trivial call."""
    seconds: float

    def __str__(self) -> str:
        return f"no answer in {self.seconds:g}s (paused or busy)"


@dataclass(frozen=True)
class Hung:
    """What holds a stalled step: shards and generators that did not answer or died (`how` = "died"; None: hung),
    each recovered by its own restarts (run.max_shard_restarts, run.max_generator_restarts), as supervision
    recovers a death seen outside a stall; or (all of them answering, no shard waiting on a rule) the learner
    ranks, named in `learners`; or a death no role's own recovery covers, named in `death` (a consume-once queue
    restored in place that waits), which run.max_restarts recovers."""
    shards: tuple[int, ...] = ()
    generators: tuple[int, ...] = ()
    learners: str | None = None
    death: str | None = None
    how: str | None = None


def hung_roles(shards: list, generators: list, step: int, tables: list | None = None,
               ranks: list | None = None) -> Hung | None:
    """The stall's verdict from each shard's blocked_reason and each generator's stats probe; None when a rule
    (the pace, the limiter, caps) holds the step, which killing an actor would not change. tables: each shard's
    stats probe (asked now: the driver's own count lags a restore); a consume-once queue restored in place, or a
    buffer restored with less than its rank's batch, that waits before serving its first batch since
    (TableStats.restored_waiting) lost what it waits for (its inserts after the snapshot, which are made once), so
    its stall is a death, not a rule. A keep-all buffer restored with a batch cannot stall (its credit covers what
    it lost), nor is a shard that served a batch since blamed. ranks: (answer, pid at start) per learner rank, the
    answer to pid() on its probe thread ("dead", NoAnswer): one that gives none is paused or wedged, and named."""
    silent = [i for i, a in enumerate(shards) if isinstance(a, NoAnswer)]
    gens = [i for i, a in enumerate(generators) if isinstance(a, NoAnswer)]
    if silent or gens:
        return Hung(tuple(silent), tuple(gens))
    dead_shards = tuple(i for i, a in enumerate(shards) if a == "dead")
    dead_gens = tuple(i for i, a in enumerate(generators) if a == "dead")
    if dead_shards or dead_gens:  # each through its own restarts first, as supervision routes a death
        return Hung(dead_shards, dead_gens, how="died")
    waiting = [i for i, a in enumerate(shards) if a not in (SERVED, NOT_ASKED, "ready")]
    tables = tables or [None] * len(shards)
    if back := [i for i in waiting if getattr(tables[i], "restored_waiting", False)]:
        i = back[0]
        return Hung(death=f"replay shard {i} waits since its in-place restore (restart {tables[i].shard_restarts})")
    # every rank took its batch, or never asked for it: no rank waits on its shard, so the ranks hold the step
    if all(a in (SERVED, NOT_ASKED) for a in shards):
        pids = dict(enumerate(pid for _, pid in ranks or []))
        if idle := [i for i, a in enumerate(shards) if a == NOT_ASKED]:
            return Hung(learners=f"{rank_names(idle, pids)} did not ask for step {step}'s batch (hung)")
        if dead := [i for i, (a, _) in enumerate(ranks or []) if a == "dead"]:
            return Hung(learners=f"{rank_names(dead, pids)} died with step {step}'s batch (hung)")
        if silent := [i for i, (a, _) in enumerate(ranks or []) if isinstance(a, NoAnswer)]:
            return Hung(learners=f"{rank_names(silent, pids)} gave no answer (paused or wedged) with step {step}'s "
                                 "batch (hung)")
        return Hung(learners=f"learner ranks took step {step}'s batches but none finished the step (hung)")
    return None


def rank_names(ranks: list[int], pids: dict[int, int]) -> str:
    """"learner rank 1 (pid 4242)", "learner ranks 0, 1": with the pid each had at start where known."""
    names = [f"{i} (pid {pids[i]})" if pids.get(i) else str(i) for i in ranks]
    return f"learner rank{'s' * (len(names) > 1)} {', '.join(names)}"


def probe_all(refs: list, seconds: float = PROBE_S) -> list:
    """Each answer, "dead", or NoAnswer for those not back within `seconds`, all waited on together: paused
    actors cost one window, not one each."""
    ready = set(ray.wait(refs, num_returns=len(refs), timeout=seconds)[0]) if refs else set()
    out = []
    for ref in refs:
        if ref not in ready:
            out.append(NoAnswer(seconds))
            continue
        try:
            out.append(ray.get(ref))
        except RayActorError:
            out.append("dead")
    return out



def first_error(refs: list) -> str:
    for ref in refs:
        try:
            ray.get(ref, timeout=PROBE_S)
        except Exception as e:  # noqa: BLE001 - reported, not handled
            return one_line(e)
    return "unknown"


def _node(node_id: str, offers: dict, nodes: dict) -> str:
    address = nodes[node_id]["NodeManagerAddress"] if node_id in nodes else "?"
    offered = ", ".join(f"{k}={v:g}" for k, v in offers.items()) or "no custom resources"
    return f"node {address} (id {node_id[:8]}, offering {offered})"


def node_of(where: dict, role: str) -> str:
    """Where `role` ran in a placement (Roles.placement): "node ADDRESS (id ..., offering ...)", with ", which left
    the cluster" once Ray has declared it dead; "" when the placement does not have it, or on a one-node cluster
    where the node says nothing."""
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    if role not in where or len(nodes) < 2:
        return ""
    node = where[role]["node_id"]
    gone = node in nodes and not nodes[node]["Alive"]
    return _node(node, where[role]["node_resources"], nodes) + (", which left the cluster" if gone else "")


def left_node(where: dict, role: str, deadline: float) -> str:
    """The node `role` ran on, as node_of names it, if that node has left the cluster; "" while it is alive (the
    role died or hung on its own) and on a one-node cluster. A node that stopped answering is waited for (until the
    monotonic `deadline`) until Ray declares it dead, as settle_nodes does."""
    if role not in where or len(ray.nodes()) < 2:
        return ""
    settle_nodes({role: where[role]}, deadline)
    node = node_of(where, role)
    return node if node.endswith(", which left the cluster") else ""


def placed_on(node_id: str, nodes: list | None = None) -> dict:
    """A placement entry (Roles.placement) for an actor on `node_id`: the node and the custom resources it offers.
    nodes: ray.nodes(), when the caller has them."""
    offers = next((n["Resources"] for n in nodes or ray.nodes() if n["NodeID"] == node_id), {})
    return {"node_id": node_id, "node_resources": {k: v for k, v in offers.items() if not k.startswith(
        ("node:", "CPU", "GPU", "memory", "object_store"))}}


def lost_nodes(where: dict) -> list[str]:
    """The nodes of a placement that have left the cluster (a preempted or failed host), each as node_of names it;
    none while every one is alive, or Ray has not noticed yet: a node's missed heartbeats take Ray's health check
    ~15-30 s, while a dead worker process is noticed at once (settle_nodes waits for that)."""
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    lost = {p["node_id"]: p["node_resources"] for p in where.values()
            if p["node_id"] in nodes and not nodes[p["node_id"]]["Alive"]}
    return [_node(node, offers, nodes) for node, offers in lost.items()]


def with_lost_nodes(death: str, where: dict) -> str:
    """A death's line, saying which nodes of its placement left the cluster: after the node it names, or apart."""
    apart = []
    for node in lost_nodes(where):
        if f"{node}, which left the cluster" in death:
            continue
        if node in death:
            death = death.replace(node, f"{node}, which left the cluster")
        else:
            apart.append(node)
    return f"{death} ({', '.join(apart)} left the cluster)" if apart else death


@ray.remote(num_cpus=0)
def _here() -> bool:
    return True


def settle_nodes(where: dict, deadline: float) -> None:
    """Before a restart places the roles again, wait (until the monotonic `deadline`) until every node of the dead
    attempt's placement either runs a trivial task or is declared dead by Ray. A host lost at once kills its workers
    at once, but Ray declares the node dead only after its missed heartbeats (~30 s): roles placed on it in between
    never start ("the actor never ran"). A task pinned to a node returns on a live one and fails once that node is
    declared dead, so waiting for them all is enough."""
    probes = [_here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
              for node in {p["node_id"] for p in where.values()}]
    _, pending = ray.wait(probes, num_returns=len(probes), timeout=max(0.0, deadline - time.monotonic()))
    for ref in pending:  # a node neither answering nor declared dead by the deadline: placement fails in one line
        ray.cancel(ref, force=True)

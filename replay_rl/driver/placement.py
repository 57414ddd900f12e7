"""Where a run's roles go: on a node of the driver's choosing, or, inside a reservation the run already holds (a
study trial's placement group, built from cluster.bundles()), each role into its own bundle, so that runs side by
side never take each other's CPUs or GPUs.

The bundles are cluster.role_bundles()'s layout: the run's driver (the trial actor), with the replay shards, weight
boards and reports, and the evaluator when it has no GPU; the evaluator when cluster.gpus_per_evaluator > 0; one
per generator; one per learner rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray
from ray.util.placement_group import PlacementGroup, get_current_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from replay_rl.config import ClusterConfig, ConfigError, RunConfig


@dataclass(frozen=True)
class Placement:
    cluster: ClusterConfig
    driver_node: str        # the node the run's driver runs on
    pg: PlacementGroup | None = None  # the reservation the run runs inside; None: none, the roles go anywhere

    def here(self):
        """The roles that live as long as the run and ask for no resources: pinned to the driver's node (Ray ignored
        a soft affinity), so a lost generator or learner node takes only its own generators or ranks; inside a
        reservation, into the driver's bundle (an explicit node affinity would leave the reservation)."""
        if self.pg is None:
            return NodeAffinitySchedulingStrategy(self.driver_node, soft=False)
        return self._bundle(0)

    def evaluator(self):
        if self.pg is None or not self.cluster.gpus_per_evaluator:
            return self.here()
        return self._bundle(self.cluster.first_bundle("evaluator"))

    def generator(self, i: int):
        """Generator i's bundle; None outside a reservation (Ray places it by its resources)."""
        return None if self.pg is None else self._bundle(self.cluster.first_bundle("generator") + i)

    def learner_bundles(self) -> tuple[PlacementGroup, list[int]] | None:
        """(the reservation, the learner ranks' bundle indices) for LearnerGroup; None: it makes a group of its own."""
        if self.pg is None:
            return None
        first = self.cluster.first_bundle("learner")
        return self.pg, list(range(first, first + self.cluster.learners))

    def _bundle(self, index: int) -> PlacementGroupSchedulingStrategy:
        return PlacementGroupSchedulingStrategy(self.pg, index, placement_group_capture_child_tasks=True)


def placement_for(cfg: RunConfig) -> Placement:
    """The run's placement, from where its driver runs: inside a placement group (a study trial) its bundles must be
    exactly cluster.bundles(), else a ConfigError in one line."""
    pg = get_current_placement_group()
    here = ray.get_runtime_context().get_node_id()
    if pg is None:
        return Placement(cfg.cluster, here)
    needs = cfg.cluster.bundles()
    if pg.bundle_specs != needs:
        raise ConfigError(f"train() runs inside a placement group of {len(pg.bundle_specs)} bundles "
                          f"{pg.bundle_specs}, but this run needs cluster.bundles() = {needs}; reserve the run's own "
                          "bundles (a study trial does), or start the run outside any placement group")
    return Placement(cfg.cluster, here, pg)

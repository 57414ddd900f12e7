"""A run's shape (cluster.bundles()) and where its roles go inside a reservation it runs in (driver/placement.py):
the layout a study trial reserves, and the one-line refusal of a reservation of another shape."""

import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.config.cluster import MIN_CPU
from replay_rl.driver.preflight import check_fits

PLACED = ["cluster.generators=1", "cluster.learners=1", "cluster.generator_resources={generator_node: 1}",
          "cluster.learner_resources={learner_node: 1}"]


def test_bundles_are_the_driver_then_the_evaluator_with_a_gpu_then_generators_then_learner_ranks():
    c = RunConfig.load(None, PLACED).cluster
    assert c.bundles() == [{"CPU": 0.25}, {"CPU": 0.25, "generator_node": 1}, {"CPU": 0.25, "learner_node": 1}]
    gpu = RunConfig.load("configs/qwen2p5_7b_w5_t3.yaml", ["cluster.gpus_per_evaluator=0.1"]).cluster
    b = gpu.bundles()
    assert len(b) == 1 + 1 + 5 + 3 and b[1] == {"CPU": MIN_CPU, "GPU": 0.1}
    assert [x.get("GPU", 0) for x in b[2:]] == [gpu.gpus_per_generator] * 5 + [gpu.gpus_per_learner] * 3
    # the totals the fit check compares with the cluster are the bundles' sums
    cpus = sum(x["CPU"] for x in b)
    assert cpus == pytest.approx((5 + 3 + 1) * gpu.cpus_per_actor + MIN_CPU)
    with pytest.raises(ConfigError, match=rf"needs 8.1 GPUs and {cpus:g} CPUs"):
        whole_gpus = ["cluster.gpus_per_learner=1", "cluster.total_gpus=null"]
        check_fits(RunConfig.load("configs/qwen2p5_7b_w5_t3.yaml", whole_gpus), {"CPU": 1000, "GPU": 8})
    # no empty bundle (Ray refuses one; Tune drops an empty first one and shifts every index)
    assert all(x["CPU"] == MIN_CPU for x in RunConfig.load(None, ["cluster.cpus_per_actor=0"]).cluster.bundles())


@pytest.mark.ray
def test_inside_a_placement_group_each_role_gets_its_bundle_and_another_shape_is_refused_in_one_line(ray_cluster):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

    from replay_rl.driver.placement import placement_for

    @ray.remote(num_cpus=0)
    def where(overrides: list[str]):
        try:
            p = placement_for(RunConfig.load(None, overrides))
        except ConfigError as e:
            return str(e)
        learners = p.learner_bundles()
        strategies = [p.here(), p.evaluator(), p.generator(0), p.generator(1)]
        return ([getattr(s, "placement_group_bundle_index", None) for s in strategies],
                learners and learners[1], p.pg is not None)

    # outside any group: today's placement, unchanged
    assert ray.get(where.remote([])) == ([None, None, None, None], None, False)
    outside = placement_for(RunConfig.load(None, []))
    assert isinstance(outside.here(), NodeAffinitySchedulingStrategy) and outside.learner_bundles() is None
    shape = ["cluster.generators=2", "cluster.learners=2", "cluster.gpus_per_evaluator=0"]
    pg = placement_group(RunConfig.load(None, shape).cluster.bundles(), strategy="PACK")
    try:
        ray.get(pg.ready(), timeout=60)
        inside = where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0))
        assert ray.get(inside.remote(shape)) == ([0, 0, 1, 2], [3, 4], True)
        line = ray.get(inside.remote(["cluster.generators=1", "cluster.learners=2"]))
        assert line.startswith("train() runs inside a placement group of 5 bundles") and "\n" not in line, line
        assert "this run needs cluster.bundles() = [{'CPU': 0.25}, {'CPU': 0.25}, {'CPU': 0.25}, {'CPU': 0.25}]" in line
    finally:
        remove_placement_group(pg)


def nodes(*offers: dict) -> list[dict]:
    return [{"Alive": True, "Resources": o} for o in offers] + [{"Alive": False, "Resources": {"CPU": 64, "GPU": 8}}]


def test_a_trial_shape_the_cluster_cannot_place_is_refused_in_one_line():
    from replay_rl.driver.preflight import check_placeable

    loopback = nodes({"CPU": 2}, {"CPU": 1, "generator_node": 1}, {"CPU": 1, "learner_node": 1},
                     {"CPU": 1, "learner_node": 1})
    check_placeable(RunConfig.load(None, PLACED), loopback)
    refusals = {  # the totals; a bundle no single node holds; an evaluator on a GPU node with no GPU of its own
        "cluster.learners=4": "cluster.learner_resources: 4 × learner_node=1 but the Ray cluster offers 2 learner_node",
        "cluster.cpus_per_actor=1.5": "a generator's bundle {'CPU': 1.5, 'generator_node': 1.0} fits no node of the "
                                      "Ray cluster (its nodes offering generator_node offer at most {'CPU': 1, 'generator_node': 1})"}
    for override, line in refusals.items():
        with pytest.raises(ConfigError) as e:
            check_placeable(RunConfig.load(None, [*PLACED, override]), loopback)
        assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)
    gpus = nodes({"CPU": 16, "GPU": 8}, {"CPU": 16, "GPU": 8})
    gpu_run = ["cluster.generators=1", "cluster.learners=1", "cluster.gpus_per_generator=1", "cluster.gpus_per_learner=1"]
    # roles on GPUs with an evaluator that has none: refused by the config itself, a study's or a single run's
    with pytest.raises(ConfigError, match=r"cluster.gpus_per_evaluator: 0 while generators or learners hold GPUs"):
        RunConfig.load(None, gpu_run)
    # roles on CPUs on a GPU cluster: the evaluator would still take a GPU no trial reserved
    with pytest.raises(ConfigError, match=r"^cluster.gpus_per_evaluator=0 on a cluster with GPUs"):
        check_placeable(RunConfig.load(None, gpu_run[:2]), gpus)
    check_placeable(RunConfig.load(None, [*gpu_run, "cluster.gpus_per_evaluator=0.1"]), gpus)


@pytest.mark.parametrize("preset, gpus", [("qwen3_0p6b_w6_t2", 8), ("qwen2p5_7b_w5_t3", 8), ("gpu_base", 8),
                                          ("smollm2_135m_gpu", 1)])
def test_the_gpu_presets_place_every_role_and_the_evaluator_on_their_node(preset, gpus):
    """Each shipped GPU preset on the one node it names: every bundle fits, and the evaluator has a GPU share."""
    from replay_rl.driver.preflight import check_placeable

    cfg = RunConfig.load(f"configs/{preset}.yaml")
    check_placeable(cfg, nodes({"CPU": 64, "GPU": gpus}))
    assert cfg.cluster.gpus_per_evaluator > 0

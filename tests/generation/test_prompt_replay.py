"""Tier 2: prompt replay on a real generator actor (the warm-started tiny model, real replay shards): a prompt whose
group had mixed rewards is generated again in a later call, as a group of its own, and counted."""

import pytest
import ray

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.generation.generator import Generator
from replay_rl.replay.client import create_shards
from replay_rl.sync.board import WeightBoard

pytestmark = pytest.mark.ray


def groups_by_prompt(shards) -> dict[bytes, dict[int, set[float]]]:
    """Each prompt's token bytes -> {group id: the rewards in that group}, over every rollout the shards hold."""
    seen: dict[bytes, dict[int, set[float]]] = {}
    for shard in shards:
        n = ray.get(shard.stats.remote()).size
        batch, _ = ray.get(shard.sample.remote(n, consumer_version=0))
        for i in range(len(batch)):
            prompt = batch.prompt_tokens[batch.prompt_offsets[i]:batch.prompt_offsets[i + 1]].tobytes()
            seen.setdefault(prompt, {}).setdefault(int(batch.group_id[i]), set()).add(float(batch.reward[i]))
    return seen


@pytest.mark.parametrize("share, replayed", [(0.5, 1), (None, 0)], ids=["prompt-replay", "fresh-only"])
def test_a_mixed_group_s_prompt_is_generated_again_in_a_later_call(ray_cluster, warm_model, share, replayed):
    path, _ = warm_model
    cfg = RunConfig.load(None, [f"model.path={path}", "replay.capacity=256", "cluster.emulate=null",
                                "generation.group_size=16", "generation.prompts_per_call=2",
                                *([f"generation.prompt_replay={{share: {share}}}"] if share else [])])
    shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
    gen = Generator.options(num_cpus=0).remote(cfg, 0, path, shards, board)
    try:
        ray.get([gen.generate_once.remote() for _ in range(3)])  # 3 calls × 2 prompts, groups of 16
        stats = ray.get(gen.stats.remote())
        seen = groups_by_prompt(shards)
    finally:
        for actor in [*shards, board, gen]:
            ray.kill(actor)
    # the warm model solves about half of these sums, so a group of 16 is mixed almost always: calls 2 and 3 take
    # one prompt of two from the pool whenever it holds one
    assert stats.prompts_replayed >= replayed
    again = {p: groups for p, groups in seen.items() if len(groups) > 1}
    assert len(again) == stats.prompts_replayed and sum(map(len, seen.values())) == 6
    for groups in again.values():  # only a prompt whose earlier group had mixed rewards comes back
        first = groups[min(groups)]
        assert len(first) > 1, groups

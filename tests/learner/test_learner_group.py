"""Tier 2: real DeepSpeed ranks on gloo inside Ray actors, fed by real shards and a real generator."""

import time

import numpy as np
import pytest
import ray
import torch

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.generation.backend import SamplingParams
from replay_rl.generation.generator import Generator
from replay_rl.generation.hf import HFBackend
from replay_rl.learner.group import LearnerGroup
from replay_rl.models.hf_folder import load_model, load_tokenizer
from replay_rl.models.scoring import sequence_logprobs
from replay_rl.replay.client import ReplayClient, create_shards
from replay_rl.sync.board import WeightBoard
from replay_rl.sync.object_store import ObjectStoreSubscriber
from replay_rl.tasks import make_task
from replay_rl.tasks.weight_probe import weight_probe
from tests.learner.steps import assert_same_step
from tests.replay.helpers import make_batch

pytestmark = [pytest.mark.ray, pytest.mark.deepspeed]


def group_cfg(warm_path, *overrides):
    return RunConfig.load(None, [f"model.path={warm_path}", "learner.batch_size=16", "replay.capacity=64",
                                 "replay.sample_timeout_s=60", "learner.lr=1e-3", "cluster.emulate=null", *overrides])


@pytest.fixture(scope="module")
def system(ray_cluster, warm_model):
    """T=2 ZeRO-2 learner group + 2 shards + weight board + 1 generator, on the warm-started tiny model."""
    path, _ = warm_model
    cfg = group_cfg(path)
    shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
    group = LearnerGroup(cfg, path, shards, board, WeightBoard.remote())
    gen = Generator.options(num_cpus=0).remote(cfg, 0, path, shards, board)
    yield cfg, shards, board, group, gen
    group.shutdown()
    for a in [*shards, board, gen]:
        ray.kill(a)


def test_fresh_on_policy_step_has_ratio_one_and_same_weights_on_both_ranks(system):
    cfg, shards, board, group, gen = system
    ray.get([gen.generate_once.remote() for _ in range(2)])       # 2 calls × 4 prompts × 16 = 128 rollouts
    ray.get(gen.stats.remote())
    ReplayClient(shards).stats()
    before = group.full_state()[0]
    m = group.step(consumer_version=0)
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and m["clip_fraction"] == 0.0
    assert m["age_mean"] == 0 and m["reuse_mean"] == 1
    # every row is fresh: the live agreement check compares them all, and fp32 generator and learner agree
    assert m["mismatch/tokens"] > 0 and m["mismatch/abs_mean"] < 1e-4 and m["mismatch/kl"] < 1e-6
    s0, s1 = group.full_state()
    assert all(torch.equal(s0[k], s1[k]) for k in s0)               # ranks agree bit for bit
    assert any(not torch.equal(before[k], s0[k]) for k in s0)       # and the step changed the weights


def test_staleness_on_samples_matches_versions(system):
    cfg, shards, board, group, gen = system
    m = group.step(consumer_version=5)                              # items were made by version 0
    assert m["age_mean"] == 5 and m["age_max"] == 5
    assert m["ratio_mean"] != pytest.approx(1.0, abs=1e-6)          # weights moved since: off-policy now


def test_after_sync_generator_greedy_output_equals_learner_model(system, warm_model):
    cfg, shards, board, group, gen = system
    group.train_on([make_batch(8, start=500 + 10 * r, completion_len=5) for r in range(2)])  # weights move first
    info = group.publish(version=7)
    assert info["version"] == 7 and info["publish_bytes"] > 4 * 400_000 and info["publish_s"] > 0
    assert ray.get(gen.await_version.remote(7)) == 7  # a poll sees new weights once the board's answer is in
    learner_state = group.full_state()[0]
    reference = HFBackend(warm_model[0])
    reference.model.load_state_dict(learner_state)
    tok = load_tokenizer(warm_model[0])
    prompts = [np.asarray(tok(p, add_special_tokens=False)["input_ids"], np.int32) for p in ("12+34=", "7+8=", "55+44=")]
    greedy = SamplingParams(0.0, 1.0, 8, 1)
    mine = [g[0].token_ids.tolist() for g in reference.generate(prompts, greedy)]
    theirs = [g[0].token_ids.tolist() for g in ray.get(gen.backend_generate.remote(prompts, greedy))]
    assert mine == theirs
    stale = HFBackend(warm_model[0])                                # the unsynced model answers differently somewhere
    assert any(not torch.equal(stale.model.state_dict()[k], learner_state[k]) for k in learner_state)


def test_agreement_check_fires_when_the_generator_samples_other_weights(system, init_model):
    """Weights loaded into the generator but not the learner: the fresh rollouts' log-probs are the other model's,
    so the first step's agreement check reports a large gap and the start-up verdict stops the run."""
    from replay_rl.learner.agreement import agreement_problem
    from replay_rl.sync.base import publish_state
    from replay_rl.sync.object_store import ObjectStorePublisher

    cfg, shards, board, group, gen = system
    other = HFBackend(str(init_model))
    publish_state(ObjectStorePublisher(board), other.model.state_dict(), version=8)
    assert ray.get(gen.await_version.remote(8)) == 8  # a poll sees new weights once the board's answer is in
    ray.get([gen.generate_once.remote() for _ in range(2)])  # 128 rollouts fill both shards (capacity 64)
    m = group.step(consumer_version=8)                        # the learner is "at" version 8 but has its own weights
    assert m["age_mean"] == 0 and m["mismatch/abs_mean"] > 0.5
    level, line = agreement_problem(m, cfg.run.mismatch_warn, cfg.run.mismatch_fail)
    assert level == "fail" and "generator and learner disagree on fresh rollouts" in line


def test_ranks_not_started_in_time_are_named_and_release_their_resources(ray_cluster, warm_model):
    """A rank that cannot finish its start (here: a 0.5 s bound, shorter than loading the model) ends the start with
    one line naming it, and nothing is left holding CPUs: a later group starts on the same cluster."""
    from replay_rl.learner.group import LearnerStartTimeout

    cfg = group_cfg(warm_model[0], "run.start_timeout_s=0.5")
    shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
    free_before = ray.available_resources().get("CPU", 0)
    # on a loaded box the placement itself can take longer than 0.5 s: then it is what the line names
    with pytest.raises(LearnerStartTimeout, match=r"(learner rank 0|learner placement of 2 ranks) did not start within "
                                                  r"0.5s \(run.start_timeout_s\)"):
        LearnerGroup(cfg, warm_model[0], shards, board, board)
    deadline = time.monotonic() + 30  # Ray returns a removed group's CPUs asynchronously
    while ray.available_resources().get("CPU", 0) < free_before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= free_before
    for a in [*shards, board]:
        ray.kill(a)


def test_zero_stages_give_the_same_loss_trajectory_and_publish_every_weight_in_buckets(ray_cluster, warm_model):
    path, _ = warm_model
    batches = [[make_batch(8, start=100 * s + 10 * r, completion_len=5) for r in range(2)] for s in range(3)]
    trajectories = {}
    for stage in (0, 2, 3):
        # 50 KiB buckets: the 1.6 MB model travels in more than 10, each gathered on its own under ZeRO-3
        cfg = group_cfg(path, f"learner.zero_stage={stage}", "sync.bucket_mb=0.05")
        shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
        group = LearnerGroup(cfg, path, shards, board, WeightBoard.remote())
        trajectories[stage] = [group.train_on(b)[0]["loss"] for b in batches]
        info = group.publish(version=3)
        handle = ObjectStoreSubscriber(board).latest()
        received, learner_state = dict(ObjectStoreSubscriber(board).fetch(handle)), group.full_state()[0]
        assert info["version"] == 3 and len(handle.plan) > 10 and info["publish_bytes"] >= 4 * 400_000
        assert received.keys() == learner_state.keys()
        assert all(torch.equal(received[k], learner_state[k]) for k in received), stage
        # the weight-path check's reference, a forward every rank takes part in under ZeRO-3, is the published
        # weights' own log-probs of the probe set
        model = load_model(path)
        model.load_state_dict(learner_state)
        probe = weight_probe(make_task(cfg.task, cfg.task.split_seed), False, load_tokenizer(path))
        want = sequence_logprobs(model, probe, 0)
        assert len(handle.probe) == 4 and all(np.allclose(a, b, atol=1e-5) for a, b in zip(handle.probe, want)), stage
        group.shutdown()
    assert np.allclose(trajectories[0], trajectories[2], rtol=1e-4, atol=1e-6), trajectories
    assert np.allclose(trajectories[0], trajectories[3], rtol=1e-4, atol=1e-6), trajectories
    assert trajectories[0][0] != trajectories[0][2]


@pytest.mark.parametrize("stage", [2, 3])
def test_micro_batched_step_equals_the_full_batch_step(ray_cluster, warm_model, stage):
    """Same start, same rank batches (of different completion lengths, rank 1's longer, so that it needs more
    micro-batches): one optimizer step in micro-batches of at most 40 padded tokens leaves the same weights as one
    step on the whole batch, under ZeRO 2 and 3. Each collective per micro-batch (ZeRO-2's gradient reduce, ZeRO-3's
    gather) needs every rank to run as many: with fewer on one rank a ZeRO-2 step hung."""
    path, _ = warm_model
    batches = [make_batch(8, start=10 * r, completion_len=lambda i, r=r: 2 + (i * 5) % 7 + 8 * r) for r in range(2)]
    states, micro, metrics = {}, {}, {}
    for budget in (None, 40):
        cfg = group_cfg(path, f"learner.zero_stage={stage}", f"learner.micro_batch_tokens={budget or 'null'}")
        shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
        group = LearnerGroup(cfg, path, shards, board, WeightBoard.remote())
        try:
            metrics[budget] = group.train_on(batches)
            micro[budget] = [m["micro_batches"] for m in metrics[budget]]
            states[budget] = group.full_state()[0]
        finally:
            group.shutdown()
            for a in [*shards, board]:
                ray.kill(a)
    assert micro[None] == [1, 1] and min(micro[40]) >= 2
    assert micro[40][0] == micro[40][1]  # the ranks run the same number of passes
    assert_same_step(metrics[40], metrics[None], states[40], states[None], group_cfg(path).learner.lr)


@pytest.fixture(scope="module")
def one_rank_norm(ray_cluster, warm_model):
    """The gradient norm one rank (rank_token_mean) takes on a batch, from the warm model: one group serves every
    reference, its steps at lr 1e-12 (the norm is read before the step, and the weights barely move between calls)."""
    path, _ = warm_model
    cfg = group_cfg(path, "cluster.learners=1", "learner.lr=1e-12")
    shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
    group = LearnerGroup(cfg, path, shards, board, WeightBoard.remote())
    yield lambda batch: group.train_on([batch])[0]["grad_norm"]
    group.shutdown()
    for a in [*shards, board]:
        ray.kill(a)


def two_rank_step(path: str, halves: list, *overrides: str) -> list[dict]:
    """One step of a fresh T=2 group on `halves` (a batch per rank); each rank's metrics."""
    cfg = group_cfg(path, "cluster.learners=2", *overrides)
    shards, board = create_shards(shard_spec(cfg)), WeightBoard.remote()
    group = LearnerGroup(cfg, path, shards, board, WeightBoard.remote())
    try:
        return group.train_on(halves)
    finally:
        group.shutdown()
        for a in [*shards, board]:
            ray.kill(a)


def test_global_token_mean_over_two_ranks_equals_one_rank_on_the_whole_batch(warm_model, one_rank_norm):
    """Ranks holding different token counts: global_token_mean at T=2 takes the gradient of one mean over all
    tokens, which is what a single rank computes on the concatenated batch (and rank_token_mean does not)."""
    path, _ = warm_model
    lengths = lambda i: 2 if i < 8 else 7  # noqa: E731  rank 0 short completions, rank 1 long ones
    whole = make_batch(16, completion_len=lengths)
    halves = [whole.take(np.arange(8)), whole.take(np.arange(8, 16))]
    one = one_rank_norm(whole)
    assert two_rank_step(path, halves, "learner.loss.aggregation=global_token_mean")[0]["grad_norm"] == \
        pytest.approx(one, rel=1e-4)
    assert two_rank_step(path, halves, "learner.loss.aggregation=rank_token_mean")[0]["grad_norm"] != \
        pytest.approx(one, rel=1e-3)


def test_rows_left_out_on_two_ranks_take_the_step_of_one_rank_on_the_rows_trained(warm_model, one_rank_norm):
    """learner.drop_zero_advantage at T=2, ranks left unequal shares (rank 0 keeps 2 of its 8 rows, rank 1 all 8):
    the counts are pooled over ranks, so the step is one rank's on the 10 rows trained, not a mean of the ranks'
    means (which would weigh rank 0's two rows as much as rank 1's eight)."""
    path, _ = warm_model
    whole = make_batch(16, completion_len=lambda i: 2 + i % 5)
    whole.advantage[:6] = 0.0
    metrics = two_rank_step(path, [whole.take(np.arange(8)), whole.take(np.arange(8, 16))],
                            "learner.drop_zero_advantage=true")
    assert [m["trained_share"] for m in metrics] == [0.25, 1.0]
    assert metrics[0]["grad_norm"] == pytest.approx(one_rank_norm(whole.take(np.arange(6, 16))), rel=1e-4)

"""The one-update comparison (benchmarks/peer_step.py) hands TRL's loss the batch our learner trains on, laid out as
GRPOTrainer lays out its own (prompts padded on the left, completions on the right, behaviour log-probs under the
completion mask), and measures two updates' distance from their common start. TRL itself is not needed here."""

from pathlib import Path

import numpy as np
import pytest
import torch

from replay_rl.rollout import Rollout, RolloutBatch


def rollout(prompt, completion, logprobs, advantage):
    return Rollout(np.array(prompt, np.int32), np.array(completion, np.int32), np.array(logprobs, np.float32), 1.0,
                   advantage, 0.5, True, 0, 0, 0, 0, 0, 0)


def test_trl_inputs_pad_prompts_left_and_completions_right(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    from peer_step import trl_inputs

    batch = RolloutBatch.from_rollouts([rollout([5, 6], [7, 8, 2], [-0.1, -0.2, -0.3], 1.0),
                                        rollout([9, 10, 11], [2], [-0.4], -1.0)])
    x = trl_inputs(batch, pad_id=0)
    assert x["prompt_ids"].tolist() == [[0, 5, 6], [9, 10, 11]]
    assert x["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert x["completion_ids"].tolist() == [[7, 8, 2], [2, 0, 0]]
    assert x["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert np.allclose(x["old_per_token_logps"].numpy(), [[-0.1, -0.2, -0.3], [-0.4, 0.0, 0.0]])
    assert x["advantages"].tolist() == [1.0, -1.0] and int(x["num_items_in_batch"]) == 4


def test_update_gap_is_zero_for_the_same_update_and_grows_with_a_different_one(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    from peer_step import update_gap

    start = {"w": torch.zeros(4)}
    step = {"w": torch.tensor([1.0, -2.0, 0.0, 2.0])}
    same = update_gap(start, step, step)
    assert same["relative_difference"] == 0 and same["cosine"] == pytest.approx(1.0)
    half = update_gap(start, {"w": step["w"] / 2}, step)  # ‖Δa − Δb‖ / ‖Δb‖ = 1/2, same direction
    assert half["relative_difference"] == pytest.approx(0.5) and half["cosine"] == pytest.approx(1.0)
    assert half["max_abs_difference"] == pytest.approx(1.0) and half["max_abs_step"] == pytest.approx(2.0)


def test_the_sampler_comparison_tells_one_distribution_from_two(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    from peer_sampler import ks_test

    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 500), rng.normal(0, 1, 500)
    assert ks_test(a, a) == {"d": 0.0, "p": 1.0}
    assert ks_test(a, b)["p"] > 0.05 and ks_test(a, b + 0.5)["p"] < 1e-6
    assert ks_test(np.zeros(10), np.ones(10))["d"] == 1.0

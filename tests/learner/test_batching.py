"""Micro-batching: splits under a token budget, and micro-batch losses that sum to the full batch's loss and
gradient for every loss and aggregation."""

import numpy as np
import pytest
import torch

from replay_rl.config import AsymreLossConfig, GrpoLossConfig
from replay_rl.learner.batching import MicroStats, micro_batches, to_learner_inputs
from replay_rl.learner.losses import grpo_loss, make_loss
from tests.replay.helpers import make_batch


def mixed_batch(n=12):
    """Rollouts of different completion lengths (2 to 9 tokens), so padding and normalisation matter."""
    return make_batch(n, completion_len=lambda i: 2 + (i * 5) % 8)


def test_micro_batches_respect_the_budget_cover_every_row_once_and_can_be_forced_to_a_count():
    batch = mixed_batch()
    lengths = np.diff(batch.prompt_offsets) + np.diff(batch.completion_offsets)
    parts = micro_batches(batch, budget=30)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(batch)))
    assert all(len(p) * lengths[p].max() <= 30 for p in parts) and len(parts) > 1
    assert len(micro_batches(batch, None)) == 1
    assert len(micro_batches(batch, 30, count=len(parts) + 2)) == len(parts) + 2
    with pytest.raises(ValueError, match="cannot split 12 rollouts into 13"):
        micro_batches(batch, 30, count=13)


def test_packed_micro_batches_budget_real_tokens_and_cover_every_row_once():
    batch = mixed_batch()
    lengths = np.diff(batch.prompt_offsets) + np.diff(batch.completion_offsets)   # 5 to 12 tokens, 102 in all
    parts = micro_batches(batch, budget=30, packed=True)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(batch)))
    assert all(lengths[p].sum() <= 30 for p in parts) and len(parts) == 4
    assert len(parts) < len(micro_batches(batch, budget=30))   # padded tokens fill the budget sooner
    assert len(micro_batches(batch, 5, packed=True)) == len(batch)   # a row over the budget still runs, alone
    assert len(micro_batches(batch, 30, count=6, packed=True)) == 6


@pytest.mark.parametrize("loss_cfg", [GrpoLossConfig(), AsymreLossConfig(aggregation="seq_sum"),
                                      AsymreLossConfig(aggregation="token_mean")], ids=["grpo", "asymre_seq", "asymre_tok"])
def test_micro_batch_losses_and_gradients_sum_to_the_full_batch(loss_cfg):
    batch = mixed_batch()
    loss_fn = make_loss(loss_cfg)
    torch.manual_seed(0)
    table = torch.randn(100, requires_grad=True)  # a stand-in policy: log π(target) = −softplus(table[token])

    def logp_of(inp):
        return -torch.nn.functional.softplus(table[inp.input_ids[:, 1:]])

    full = to_learner_inputs(batch, pad_id=0)
    full_loss, _ = loss_fn(logp_of(full), full)
    (full_grad,) = torch.autograd.grad(full_loss, table)
    tokens, rollouts = float(np.diff(batch.completion_offsets).sum()), float(len(batch))
    total, grad = 0.0, torch.zeros_like(table)
    for rows in micro_batches(batch, budget=25):
        inp = to_learner_inputs(batch.take(rows), 0, "cpu", tokens, rollouts)
        loss, _ = loss_fn(logp_of(inp), inp)
        grad += torch.autograd.grad(loss, table)[0]
        total += loss.item()
    assert total == pytest.approx(full_loss.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(grad, full_grad, rtol=1e-5, atol=1e-7)


def test_micro_stats_weigh_by_tokens_and_keep_the_max():
    acc = MicroStats()
    acc.add({"clip_fraction": 0.5, "ratio_max": 1.3}, tokens=10)
    acc.add({"clip_fraction": 0.0, "ratio_max": 2.0}, tokens=30)
    assert acc.result() == {"clip_fraction": pytest.approx(0.125), "ratio_max": 2.0}
    full = to_learner_inputs(mixed_batch(), 0)
    assert grpo_loss(GrpoLossConfig(), full.old_logprobs, full)[1]["clip_fraction"] == 0.0

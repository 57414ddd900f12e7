"""RolloutBatch (numpy, CSR) → LearnerInputs (padded torch tensors)."""

from __future__ import annotations

import numpy as np
import torch

from replay_rl.learner.losses import LearnerInputs
from replay_rl.rollout import RolloutBatch


def to_learner_inputs(batch: RolloutBatch, pad_id: int, device: torch.device | str = "cpu") -> LearnerInputs:
    n = len(batch)
    plen = np.diff(batch.prompt_offsets)
    clen = np.diff(batch.completion_offsets)
    width = int((plen + clen).max())
    ids = np.full((n, width), pad_id, np.int64)
    attn = np.zeros((n, width), np.int64)
    mask = np.zeros((n, width - 1), np.float32)
    old = np.zeros((n, width - 1), np.float32)
    for i in range(n):
        p, c = int(plen[i]), int(clen[i])
        ids[i, :p] = batch.prompt_tokens[batch.prompt_offsets[i]:batch.prompt_offsets[i + 1]]
        ids[i, p:p + c] = batch.completion_tokens[batch.completion_offsets[i]:batch.completion_offsets[i + 1]]
        attn[i, :p + c] = 1
        # target column j predicts token j+1: completion token k sits at column p−1+k
        mask[i, p - 1:p - 1 + c] = 1
        old[i, p - 1:p - 1 + c] = batch.behavior_logprobs[batch.completion_offsets[i]:batch.completion_offsets[i + 1]]
    t = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
    return LearnerInputs(t(ids), t(attn), t(mask), t(old), t(batch.advantage), t(batch.reward), t(batch.baseline))

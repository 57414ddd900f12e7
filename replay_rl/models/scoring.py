"""Log-probs of given token sequences under an HF causal LM: the learner's and the transformers generator's side of
the weight-path check (sync/weight_check.py). Raw distribution (temperature 1, no nucleus): the check is about
weights, not sampling."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


@torch.no_grad()
def sequence_logprobs(model, sequences: Sequence[np.ndarray], pad_id: int) -> list[np.ndarray]:
    """For each sequence of L tokens, the (L−1,) log-probs of tokens 1..L−1 given the ones before them, in fp32.
    Rows are right-padded, so every row's positions start at 0 as they do when the sequence runs alone."""
    width = max(len(s) for s in sequences)
    device = next(model.parameters()).device
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.as_tensor(np.asarray(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    ids, mask = ids.to(device), mask.to(device)
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    out = []
    for i, s in enumerate(sequences):  # a row at a time: one row's fp32 (L, V) copy, not the batch's
        row = logits[i, :len(s) - 1].float()
        out.append((row.gather(-1, ids[i, 1:len(s), None]).squeeze(-1) - row.logsumexp(-1)).cpu().numpy())
    return out

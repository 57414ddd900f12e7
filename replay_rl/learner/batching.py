"""RolloutBatch (numpy, CSR) → LearnerInputs (padded torch tensors), in micro-batches under a token budget.

The inputs stay padded with learner.pack_sequences too: only the model's forward runs the rows packed
(logprobs.final_hidden_states), so the losses see the same (B, L−1) layout either way."""

from __future__ import annotations

import numpy as np
import torch

from replay_rl.learner.losses import LearnerInputs
from replay_rl.rollout import RolloutBatch


def to_learner_inputs(batch: RolloutBatch, pad_id: int, device: torch.device | str = "cpu",
                      token_count: float | None = None, rollout_count: float | None = None,
                      ages: np.ndarray | None = None) -> LearnerInputs:
    """token_count / rollout_count: the whole rank batch's, when `batch` is one of its micro-batches. ages: each
    row's learner versions since its weights (None: unknown)."""
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
    return LearnerInputs(t(ids), t(attn), t(mask), t(old), t(batch.advantage), t(batch.reward), t(batch.baseline),
                         token_count, rollout_count, None if ages is None else t(ages))


def micro_batches(batch: RolloutBatch, budget: int | None, count: int | None = None,
                  packed: bool = False) -> list[np.ndarray]:
    """Row indices of micro-batches of at most `budget` tokens, rows sorted by length so that little is padding:
    padded tokens (rows × longest row), or with `packed` the rows' real tokens (Σ lengths; one packed row per
    micro-batch). `count`: split further until there are exactly this many (ZeRO-3 ranks must run the same number
    of forward passes); None or a budget of None: as few as the budget allows."""
    lengths = np.diff(batch.prompt_offsets) + np.diff(batch.completion_offsets)
    order = np.argsort(lengths, kind="stable")
    parts: list[list[int]] = [[]]
    tokens = 0  # the last part's real tokens
    for i in order:
        cost = tokens + lengths[i] if packed else (len(parts[-1]) + 1) * lengths[i]  # sorted: row i is the longest
        if budget is not None and parts[-1] and cost > budget:
            parts.append([])
            tokens = 0
        parts[-1].append(int(i))
        tokens += lengths[i]
    while count is not None and len(parts) < count:
        big = max(range(len(parts)), key=lambda j: len(parts[j]))
        if len(parts[big]) < 2:
            raise ValueError(f"cannot split {len(batch)} rollouts into {count} micro-batches")
        half = len(parts[big]) // 2
        parts[big:big + 1] = [parts[big][:half], parts[big][half:]]
    return [np.asarray(p) for p in parts]


class MicroStats:
    """The loss's per-token statistics over a batch's micro-batches: token-weighted means, maxima of maxima."""

    def __init__(self) -> None:
        self.tokens, self.sums, self.maxima = 0.0, {}, {}

    def add(self, stats: dict[str, float], tokens: float) -> None:
        self.tokens += tokens
        for k, v in stats.items():
            if k.endswith("_max"):
                self.maxima[k] = max(self.maxima.get(k, v), v)
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v * tokens

    def result(self) -> dict[str, float]:
        """NaN where no token was trained on (learner.drop_zero_advantage left a rank none): undefined, not 0; the
        group's mean over ranks skips it."""
        if not self.tokens:
            return {k: float("nan") for k in (*self.sums, *self.maxima)}
        return {k: v / self.tokens for k, v in self.sums.items()} | self.maxima


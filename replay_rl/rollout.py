"""Rollout records: one sampled completion per item, frozen at generation time.

`RolloutBatch` is the wire and storage format: a struct of numpy arrays with ragged token data concatenated and
indexed by offsets (CSR), so a batch crosses Ray as a handful of contiguous buffers and never as per-token objects.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

FINISH_STOP, FINISH_LENGTH = 0, 1


@dataclass(frozen=True, slots=True)
class Rollout:
    """One completion. C = completion length, P = prompt length."""

    prompt_ids: np.ndarray         # (P,) int32
    completion_ids: np.ndarray     # (C,) int32, ends with EOS when finish == FINISH_STOP
    behavior_logprobs: np.ndarray  # (C,) float32  log π_behavior(token) as sampled
    reward: float                  # verifier score in [0, 1]
    advantage: float               # (r − mean_G r) / (std_G r + eps), computed once over its group, never recomputed
    baseline: float                # mean_G r: the group's mean reward (AsymRE's V̂), also frozen at generation
    correct: bool                  # reward ≥ task threshold; positive_bias retention keeps these longer
    group_id: int                  # the G completions of one prompt share it
    policy_version: int            # OLDEST learner version whose weights produced any of its tokens
    last_version: int              # newest such version (differs when weights changed mid-generation)
    created_step: int              # newest learner version the generator had loaded when it started this rollout
    generator_id: int
    finish: int                    # FINISH_STOP or FINISH_LENGTH


ROW_FIELDS = {  # per-rollout arrays of a batch and their dtypes
    "reward": np.float32, "advantage": np.float32, "baseline": np.float32, "correct": np.bool_, "group_id": np.int64,
    "policy_version": np.int64, "last_version": np.int64, "created_step": np.int64,
    "generator_id": np.int32, "finish": np.int8, "times_sampled": np.int32,
}


@dataclass(frozen=True)
class RolloutBatch:
    """N rollouts as arrays. Invariants: prompt_offsets and completion_offsets have N+1 entries starting at 0;
    len(prompt_tokens) == prompt_offsets[-1]; len(completion_tokens) == len(behavior_logprobs) == completion_offsets[-1];
    every per-rollout array has length N. `times_sampled` counts how often the buffer returned the item."""

    prompt_tokens: np.ndarray       # (ΣP,) int32
    prompt_offsets: np.ndarray      # (N+1,) int64
    completion_tokens: np.ndarray   # (ΣC,) int32
    completion_offsets: np.ndarray  # (N+1,) int64
    behavior_logprobs: np.ndarray   # (ΣC,) float32
    reward: np.ndarray
    advantage: np.ndarray
    baseline: np.ndarray
    correct: np.ndarray
    group_id: np.ndarray
    policy_version: np.ndarray
    last_version: np.ndarray
    created_step: np.ndarray
    generator_id: np.ndarray
    finish: np.ndarray
    times_sampled: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.prompt_offsets) - 1
        ok = (len(self.completion_offsets) == n + 1 and self.prompt_offsets[-1] == len(self.prompt_tokens)
              and self.completion_offsets[-1] == len(self.completion_tokens) == len(self.behavior_logprobs)
              and all(len(getattr(self, k)) == n for k in ROW_FIELDS))
        if not ok:
            raise ValueError("RolloutBatch: array lengths violate the offsets invariant")

    def __len__(self) -> int:
        return len(self.prompt_offsets) - 1

    def truncated_share(self) -> float:
        """Share of rows cut at max_new_tokens (FINISH_LENGTH): scored 0, so a high share means the cap, not the
        model, decides the rewards (the learner logs it as batch/truncated_share)."""
        return float((self.finish == FINISH_LENGTH).mean()) if len(self) else 0.0

    @classmethod
    def from_rollouts(cls, rollouts: Sequence[Rollout]) -> "RolloutBatch":
        pt, po = pack_ragged([r.prompt_ids for r in rollouts], np.int32)
        ct, co = pack_ragged([r.completion_ids for r in rollouts], np.int32)
        lp, _ = pack_ragged([r.behavior_logprobs for r in rollouts], np.float32)
        scalars = {k: np.array([getattr(r, k) for r in rollouts] if k != "times_sampled" else [0] * len(rollouts),
                               dtype=t) for k, t in ROW_FIELDS.items()}
        return cls(pt, po, ct, co, lp, **scalars)

    def take(self, idx: np.ndarray) -> "RolloutBatch":
        """Rows idx (any order, repeats allowed) as a new compact batch."""
        idx = np.asarray(idx, np.int64)
        def gather(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            starts, ends = offsets[idx], offsets[idx + 1]
            lens = ends - starts
            new_off = np.zeros(len(idx) + 1, np.int64)
            np.cumsum(lens, out=new_off[1:])
            # one vectorised gather: position j of row k reads tokens[starts[k] + j]
            src = np.repeat(starts - new_off[:-1], lens) + np.arange(new_off[-1])
            return tokens[src], new_off
        pt, po = gather(self.prompt_tokens, self.prompt_offsets)
        ct, co = gather(self.completion_tokens, self.completion_offsets)
        lp, _ = gather(self.behavior_logprobs, self.completion_offsets)
        return RolloutBatch(pt, po, ct, co, lp, **{k: getattr(self, k)[idx] for k in ROW_FIELDS})

    def rollout(self, i: int) -> Rollout:
        ps, pe = self.prompt_offsets[i], self.prompt_offsets[i + 1]
        cs, ce = self.completion_offsets[i], self.completion_offsets[i + 1]
        return Rollout(self.prompt_tokens[ps:pe], self.completion_tokens[cs:ce], self.behavior_logprobs[cs:ce],
                       float(self.reward[i]), float(self.advantage[i]), float(self.baseline[i]), bool(self.correct[i]),
                       int(self.group_id[i]),
                       int(self.policy_version[i]), int(self.last_version[i]), int(self.created_step[i]),
                       int(self.generator_id[i]), int(self.finish[i]))

    def arrays(self) -> dict[str, np.ndarray]:
        """Name → array, for snapshots (safetensors)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())


def pack_ragged(parts: Sequence[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length arrays → (concatenated values, N+1 offsets starting at 0)."""
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(a) for a in parts], out=offsets[1:])
    flat = np.concatenate(parts).astype(dtype, copy=False) if len(parts) else np.zeros(0, dtype)
    return flat, offsets


def group_advantages(rewards: np.ndarray, eps: float = 1e-6, ddof: int = 0) -> np.ndarray:
    """A_i = (r_i − mean(r)) / (std(r) + eps) over one group; a group with equal rewards gets all zeros. ddof 1:
    the unbiased std (generation.advantage_std=sample)."""
    r = np.asarray(rewards, np.float64)
    if r.max() == r.min():  # exactly 0, where the arithmetic leaves ~1e-10 for some values (3 × 0.1)
        return np.zeros(len(r), np.float32)
    return ((r - r.mean()) / (r.std(ddof=ddof) + eps)).astype(np.float32)

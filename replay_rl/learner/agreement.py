"""Generator/learner agreement: on rollouts made by exactly the learner's current weights, π_θ must equal the
stored behaviour log-probs. Their gap is measured on every step that has such rollouts (always the first), and
checked at the start of a run: dtype, kernels, an engine upgrade or a weight-loading bug show up here first."""

from __future__ import annotations

import math

import torch


class Mismatch:
    """Generator/learner agreement on fresh rollouts (made by the learner's current weights), over a batch's
    micro-batches: mean and max |log π_θ − log π_behaviour| per token, and KL(behaviour ‖ π_θ) by the k3
    estimator (r − 1 − log r, r = π_θ/π_behaviour; ≥ 0, unbiased on behaviour samples). NaN without fresh tokens."""

    def __init__(self) -> None:
        self.tokens = self.abs_sum = self.kl_sum = self.abs_max = 0.0

    def add(self, logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> None:
        n = mask.sum().item()
        if not n:
            return
        diff = (logp - old) * mask
        self.tokens += n
        self.abs_sum += diff.abs().sum().item()
        self.kl_sum += ((torch.exp(diff) - 1 - diff) * mask).sum().item()
        self.abs_max = max(self.abs_max, diff.abs().max().item())

    def result(self) -> dict[str, float]:
        if not self.tokens:
            return {"mismatch/abs_mean": float("nan"), "mismatch/abs_max": float("nan"), "mismatch/kl": float("nan"),
                    "mismatch/tokens": 0.0}
        return {"mismatch/abs_mean": self.abs_sum / self.tokens, "mismatch/abs_max": self.abs_max,
                "mismatch/kl": self.kl_sum / self.tokens, "mismatch/tokens": self.tokens}


def agreement_problem(metrics: dict[str, float], warn: float, fail: float | None) -> tuple[str, str] | None:
    """("fail" | "warn", one line) when the mean per-token gap exceeds a limit, else None."""
    gap = metrics.get("mismatch/abs_mean", float("nan"))
    if math.isnan(gap):
        return None
    line = (f"generator and learner disagree on fresh rollouts: mean |Δ log π| {gap:.3g} per token, max "
            f"{metrics['mismatch/abs_max']:.3g}, KL {metrics['mismatch/kl']:.3g} (dtype, kernels or weight loading "
            f"differ between them)")
    if fail is not None and gap > fail:
        return "fail", f"{line}; above run.mismatch_fail={fail:g}"
    if gap > warn:
        return "warn", f"warning: {line}; above run.mismatch_warn={warn:g}"
    return None

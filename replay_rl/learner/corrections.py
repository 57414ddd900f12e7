"""Off-policy corrections (learner.loss.correction): a per-token weight w, without gradient, on the loss terms.

ρ = π_θ(token) / π_behaviour(token), the ratio to the probability the rollout engine sampled the token with; it
carries both staleness (replayed rollouts) and engine/learner mismatch, since no separate learner-side pass
recomputes the behaviour policy. C = correction_cap.
- none: w = 1 (the paper).
- tis: truncated importance sampling, w = min(ρ, C) (Yao et al. 2025; verl's rollout_is).
- icepop: token-level masking, w = 1 if 1/C ≤ ρ ≤ C else 0 (IcePop).
- mis: sequence-level masking, w = 1 for every token of a rollout whose geometric-mean ratio exp(mean log ρ) lies
  in [1/C, C], else 0 for the whole rollout (masked importance sampling).
"""

from __future__ import annotations

import torch


def correction_weights(kind: str, cap: float, log_ratio: torch.Tensor, mask: torch.Tensor
                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, T) weights (no grad) and stats: the share of tokens truncated or masked, and the effective sample size
    (Σw)²/(n·Σw²) of the weights over the n completion tokens (1: no correction)."""
    with torch.no_grad():
        ratio = torch.exp(log_ratio)
        if kind == "none":
            w = torch.ones_like(ratio)
        elif kind == "tis":
            w = torch.clamp(ratio, max=cap)
        elif kind == "icepop":
            w = ((ratio >= 1 / cap) & (ratio <= cap)).float()
        elif kind == "mis":
            seq = torch.exp((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1))
            w = ((seq >= 1 / cap) & (seq <= cap)).float()[:, None].expand_as(ratio)
        else:
            raise ValueError(f"learner.loss.correction: unknown {kind!r}")
        n = mask.sum().clamp(min=1)
        if kind == "none":
            changed = torch.zeros_like(w)
        else:  # truncated (tis) or masked (icepop, mis)
            changed = (ratio > cap).float() if kind == "tis" else (w == 0).float()
        wm = (w * mask).double()  # float32 sums put ESS of near-equal weights at 1 + 1e-7 (seen in CI)
        ess = min((wm.sum() ** 2 / (n * (wm ** 2).sum()).clamp(min=1e-300)).item(), 1.0) if wm.sum() > 0 else 0.0
        return w, {"correction/changed_fraction": ((changed * mask).sum() / n).item(), "correction/ess": ess}

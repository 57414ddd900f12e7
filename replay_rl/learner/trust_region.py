"""Trust region on each rollout's current importance ratios (learner.loss.trust_region): staleness measured as the
policy's distance from the one that sampled the rollout, not as its age in steps.

Per rollout i over its n_i completion tokens, with log ρ = log π_θ − log π_behaviour:
    M2_i = Σ_t (log ρ_t)² / n_i              (M2PO's second moment, taken per rollout)
    ESS_i = (Σ_t ρ_t)² / (n_i · Σ_t ρ_t²)    (1 when every ratio is equal)
A rollout with M2_i > max_m2 or ESS_i < min_ess is masked: weight 0 on all its tokens.
"""

from __future__ import annotations

import torch


def trust_region_weights(max_m2: float | None, min_ess: float | None, log_ratio: torch.Tensor, mask: torch.Tensor
                         ) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, 1) weights (no grad: 1 kept, 0 masked) and stats, token means over the batch's completion tokens:
    trust/m2 the mean (log ρ)², trust/ess the rollouts' ESS, trust/masked_fraction the share of tokens in masked
    rollouts; trust/m2_max the largest rollout M2."""
    with torch.no_grad():
        tokens = mask.sum(-1)
        n = tokens.clamp(min=1)
        m2 = (log_ratio ** 2 * mask).sum(-1) / n
        ratio = (torch.exp(log_ratio) * mask).double()
        ess = (ratio.sum(-1) ** 2 / (n * (ratio ** 2).sum(-1)).clamp(min=1e-300)).clamp(max=1.0).float()
        ess = torch.where(tokens > 0, ess, torch.ones_like(ess))
        masked = torch.zeros_like(m2, dtype=torch.bool)
        if max_m2 is not None:
            masked |= m2 > max_m2
        if min_ess is not None:
            masked |= ess < min_ess
        total = tokens.sum().clamp(min=1)
        token_mean = lambda x: ((x * tokens).sum() / total).item()  # noqa: E731
        return (~masked).float()[:, None], {"trust/m2": token_mean(m2), "trust/m2_max": m2.max().item(),
                                            "trust/ess": token_mean(ess), "trust/masked_fraction": token_mean(masked)}

"""Policy losses: pure tensor functions, unit-tested against hand-computed values.

Aggregation (the paper leaves it open for GRPO): GRPO is a token-mean over the completion tokens of a rank's
sub-batch (DAPO-style, long completions weigh more); AsymRE defaults to the paper's per-rollout Σ_t log π
(`aggregation: seq_sum`). DeepSpeed then averages gradients over learner ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replay_rl.config import AsymreLossConfig, GrpoLossConfig
from replay_rl.learner.corrections import correction_weights
from replay_rl.learner.trust_region import trust_region_weights


@dataclass
class LearnerInputs:
    """A sub-batch ready for the model. B rollouts, L = longest prompt+completion; positions are *targets*:
    column j holds the token at j+1 predicted from the prefix up to j."""

    input_ids: torch.Tensor       # (B, L) long, right-padded
    attention_mask: torch.Tensor  # (B, L) long
    loss_mask: torch.Tensor       # (B, L−1) float: 1 where the target is a completion token
    old_logprobs: torch.Tensor    # (B, L−1) float: behaviour log-probs at those targets, 0 elsewhere
    advantages: torch.Tensor      # (B,) group advantage (frozen at generation)
    rewards: torch.Tensor         # (B,)
    baselines: torch.Tensor       # (B,) group mean reward (frozen at generation)
    # normalisers of the whole rank batch this is a micro-batch of, so the micro-batches' losses sum to the full
    # batch's loss; None: this batch's own completion tokens and rollouts
    token_count: float | None = None
    rollout_count: float | None = None
    ages: torch.Tensor | None = None  # (B,) learner versions since each rollout's weights; None: unknown


def processed_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """The logits of the distribution generation samples from: divided by the temperature, and outside the top-p
    nucleus set to a large negative number (HF's TopPLogitsWarper rule: drop the tokens whose ascending cumulative
    probability is ≤ 1 − top_p, keep at least one). Finite, so a token the nucleus drops gets ratio 0, not NaN."""
    logits = logits.float() / temperature
    if top_p >= 1.0:
        return logits
    with torch.no_grad():  # the nucleus is a mask: no gradient flows through the sort
        sorted_logits, order = torch.sort(logits, dim=-1)
        drop = sorted_logits.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[..., -1] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), -1e4)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def _token_mean(x: torch.Tensor, inp: LearnerInputs) -> torch.Tensor:
    """Σ over completion tokens / the whole rank batch's completion tokens (the micro-batch's share of the mean)."""
    count = inp.token_count if inp.token_count is not None else inp.loss_mask.sum().item()
    return (x * inp.loss_mask).sum() / max(count, 1.0)


def token_weights(cfg: GrpoLossConfig | AsymreLossConfig, logp: torch.Tensor, inp: LearnerInputs
                  ) -> tuple[torch.Tensor, dict[str, float]]:
    """The (B, T) weights (no grad) on the loss terms: the off-policy correction's, times the stale negatives'
    weight and the trust region's rollout mask when configured; and their stats."""
    m = inp.loss_mask
    log_ratio = (logp - inp.old_logprobs) * m
    w, stats = correction_weights(cfg.correction, cfg.correction_cap, log_ratio, m)
    if cfg.stale_negatives is not None and inp.ages is not None:
        rule = cfg.stale_negatives
        # negative as the loss weighs it: AsymRE's shifted baseline can push up a reward just under the group mean
        sign = inp.rewards - (inp.baselines + cfg.baseline_shift) if cfg.type == "asymre" else inp.advantages
        stale = (sign < 0) & (inp.ages > rule.max_age)
        w = w * torch.where(stale, rule.weight, 1.0)[:, None].to(w.dtype)
        stats = stats | {"stale/negative_fraction": _masked_mean(stale.float()[:, None].expand_as(m), m).item()}
    if cfg.trust_region is None:
        return w, stats
    keep, trust = trust_region_weights(cfg.trust_region.max_m2, cfg.trust_region.min_ess, log_ratio, m)
    return w * keep, stats | trust


def grpo_surrogates(cfg: GrpoLossConfig, logp: torch.Tensor, inp: LearnerInputs
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ratio, unclipped, clipped), each (B, L−1): ρ (1 at padding), ρ·A and clip(ρ, 1−ε_low, 1+ε_high)·A, the two
    branches of GRPO's min; the probe reads what the clip removes from the same tensors (probe/gradients.py)."""
    m = inp.loss_mask
    ratio = torch.exp(logp - inp.old_logprobs) * m + (1 - m)  # padding positions: ratio 1, masked out anyway
    adv = inp.advantages[:, None]                             # (B, 1) broadcast over tokens
    return ratio, ratio * adv, torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high) * adv


def grpo_loss(cfg: GrpoLossConfig, logp: torch.Tensor, inp: LearnerInputs) -> tuple[torch.Tensor, dict[str, float]]:
    """−mean of min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A), ρ = π_θ(token) / π_behaviour(token), no KL; the mean is
    cfg.aggregation's (a token mean by default)."""
    m = inp.loss_mask
    ratio, unclipped, clipped = grpo_surrogates(cfg, logp, inp)
    w, corr = token_weights(cfg, logp, inp)
    terms = torch.minimum(unclipped, clipped) * w
    if cfg.aggregation == "seq_mean":
        count = inp.rollout_count if inp.rollout_count is not None else len(inp.rewards)
        loss = -((terms * m).sum(-1) / m.sum(-1).clamp(min=1)).sum() / max(count, 1.0)
    else:  # rank or global token mean: the worker sets token_count to the rank's or to global / T
        loss = -_token_mean(terms, inp)
    with torch.no_grad():
        is_clipped = (clipped < unclipped).float()            # the clip is the active branch of the min
        stats = {"clip_fraction": _masked_mean(is_clipped, m).item(), "ratio_mean": _masked_mean(ratio, m).item(),
                 "ratio_max": (ratio * m).max().item()}
    return loss, stats | corr


def asymre_loss(cfg: AsymreLossConfig, logp: torch.Tensor, inp: LearnerInputs) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE with a shifted group baseline, no ratio. seq_sum (the paper): −mean over rollouts of
    (r − (V̂ + δV))·Σ_t log π_θ(token); token_mean: −token-mean of (r − (V̂ + δV))·log π_θ(token)."""
    w, corr = token_weights(cfg, logp, inp)
    weight = (inp.rewards - (inp.baselines + cfg.baseline_shift))[:, None] * w
    if cfg.aggregation == "seq_sum":
        count = inp.rollout_count if inp.rollout_count is not None else len(inp.rewards)
        loss = -(weight * logp * inp.loss_mask).sum() / max(count, 1.0)
    else:
        loss = -_token_mean(weight * logp, inp)
    with torch.no_grad():
        ratio = torch.exp(logp - inp.old_logprobs)
        stats = {"clip_fraction": 0.0, "ratio_mean": _masked_mean(ratio, inp.loss_mask).item(),
                 "ratio_max": (ratio * inp.loss_mask).max().item()}
    return loss, stats | corr


def make_loss(cfg: GrpoLossConfig | AsymreLossConfig):
    match cfg.type:
        case "grpo":
            return lambda logp, inp: grpo_loss(cfg, logp, inp)
        case "asymre":
            return lambda logp, inp: asymre_loss(cfg, logp, inp)

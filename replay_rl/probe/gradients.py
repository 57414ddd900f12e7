"""Per-rollout gradients of the training loss, sketched, and the in-process learner step the probe trains with.

The sketch is a CountSketch (Charikar et al. 2002): coordinate j of the flat parameter vector is added, with a
random sign s_j, into bucket h_j of k. It is a random projection with E⟨Sx, Sy⟩ = ⟨x, y⟩, like a Gaussian one,
but costs O(D) per vector and stores D indices instead of a k × D matrix (3.4 GB at k = 1024 for the tiny model's
420k parameters, 550 GB for a 135M model).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from replay_rl.config import RunConfig
from replay_rl.learner.batching import to_learner_inputs
from replay_rl.learner.losses import LearnerInputs, grpo_surrogates, make_loss, processed_logits
from replay_rl.learner.optimizer import make_optimizer
from replay_rl.rollout import RolloutBatch


class CountSketch:
    def __init__(self, params: list[torch.nn.Parameter], k: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.k = k
        self.index = [torch.randint(0, k, (p.numel(),), generator=gen) for p in params]
        self.sign = [torch.randint(0, 2, (p.numel(),), generator=gen).float() * 2 - 1 for p in params]

    def __call__(self, tensors) -> np.ndarray:
        """(k,) float64 sketch of the concatenated flat tensors (e.g. every parameter's .grad)."""
        out = torch.zeros(self.k, dtype=torch.float64)
        for t, h, s in zip(tensors, self.index, self.sign):
            if t is not None:
                out.index_add_(0, h, (t.detach().reshape(-1).float().cpu() * s).double())
        return out.numpy()


def _logprobs(model, inp, cfg: RunConfig) -> torch.Tensor:
    """(B, L−1) log π_θ(target) under generation's temperature and top-p: the learner's π_θ, written out here
    with full logits (a probe's batches are one rollout or one small batch)."""
    logits = model(input_ids=inp.input_ids, attention_mask=inp.attention_mask).logits[:, :-1]
    g = cfg.generation
    logp_all = torch.log_softmax(processed_logits(logits, g.temperature, g.top_p), dim=-1)
    return logp_all.gather(-1, inp.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


class ProbeLearner:
    """One process's learner: AdamW at learner.lr, the config's loss on the whole batch, global-norm clipping at
    learner.grad_clip (DeepSpeed's gradient_clipping). One rank: the loss's token mean is over the whole batch,
    where T ranks under rank_token_mean average T per-rank means."""

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, pad_id: int) -> None:
        self.cfg, self.model, self.pad_id = cfg, model, pad_id
        self.device = next(model.parameters()).device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.loss_fn = make_loss(cfg.learner.loss)
        self.opt = make_optimizer(self.params, cfg.learner)

    def step(self, batch: RolloutBatch) -> float:
        """One optimizer step on `batch`; returns the loss."""
        self.model.train()
        inp = to_learner_inputs(batch, self.pad_id, self.device)
        loss, _ = self.loss_fn(_logprobs(self.model, inp, self.cfg), inp)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.learner.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg.learner.grad_clip)
        self.opt.step()
        return float(loss.item())

    def backward_seconds(self, batch: RolloutBatch) -> float:
        """Seconds of one forward and backward on `batch`, gradients discarded (no optimizer step)."""
        t0 = time.perf_counter()
        inp = to_learner_inputs(batch, self.pad_id, self.device)
        self.loss_fn(_logprobs(self.model, inp, self.cfg), inp)[0].backward()
        self.opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    def sketches(self, batch: RolloutBatch, sketch: CountSketch, token_count: float, deadline: float | None = None,
                 clock=None) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """(n, k) sketches of each rollout's gradient at the current θ: rollout i alone through the loss, with the
        batch normalisers fixed (token_count = a mean completion length, rollout_count = 1), so that the mean of
        the per-rollout gradients over a batch is that batch's gradient; and per-rollout mechanism columns
        (effective.MECHANISM) from the loss's own stats on that rollout. None if `clock()` passes `deadline`."""
        self.model.eval()  # no dropout: the gradient at θ, not at a random sub-network
        out = np.zeros((len(batch), sketch.k))
        cols: dict[str, list[float]] = {}
        for i in range(len(batch)):
            if deadline is not None and clock() > deadline:
                return None
            inp = to_learner_inputs(batch.take(np.array([i])), self.pad_id, self.device, token_count, 1.0)
            logp = _logprobs(self.model, inp, self.cfg)
            loss, _ = self.loss_fn(logp, inp)
            grads = torch.autograd.grad(loss, self.params, allow_unused=True)
            out[i] = sketch(grads)
            for k, v in self.mechanism(logp.detach(), inp).items():
                cols.setdefault(k, []).append(v)
        return out, {k: np.array(v) for k, v in cols.items()}

    def mechanism(self, logp: torch.Tensor, inp: LearnerInputs) -> dict[str, float]:
        """Sums over the rollout's tokens for effective.MECHANISM, from the loss's own surrogates: tokens where the
        clip is the active branch (zero gradient), |ρA| (the unclipped surrogate's gradient weight on ∇log π) in
        all and on those tokens, ρ, and (ρ − 1) − log ρ (KL(π_b‖π_θ), k3). AsymRE has no clip: ratio and KL only."""
        m = inp.loss_mask
        log_ratio = (logp - inp.old_logprobs) * m
        ratio = torch.exp(log_ratio)
        out = {"tokens": m.sum(), "ratio": (ratio * m).sum(), "kl": ((ratio - 1 - log_ratio) * m).sum()}
        if self.cfg.learner.loss.type == "grpo":
            _, unclipped, clipped = grpo_surrogates(self.cfg.learner.loss, logp, inp)
            active = (clipped < unclipped).float() * m
            out |= {"clip_active": active.sum(), "mass": (unclipped.abs() * m).sum(),
                    "clip_removed": (unclipped.abs() * active).sum()}
        return {k: float(v) for k, v in out.items()}

    def weights_sketch(self, sketch: CountSketch) -> np.ndarray:
        """S·θ, so that ‖S(θ_t − θ_s)‖ estimates how far the weights moved (κ's denominator)."""
        return sketch([p.data for p in self.params])

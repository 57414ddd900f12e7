"""The optimizer every learner builds: the learner ranks (engine.py, under DeepSpeed) and the probe's in-process
learner (probe/gradients.py) step with the same one."""

from __future__ import annotations

from typing import Iterable

import torch

from replay_rl.config import LearnerConfig


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: LearnerConfig) -> torch.optim.AdamW:
    """AdamW at learner.lr (constant, as in the paper, unless make_schedule warms it up), with learner.betas and
    weight_decay."""
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def make_schedule(opt: torch.optim.Optimizer, cfg: LearnerConfig) -> torch.optim.lr_scheduler.LambdaLR | None:
    """learner.warmup_steps: a linear rise to learner.lr over that many steps, then constant; None without one.
    Stepped once per optimizer step (DeepSpeed steps a client scheduler with the optimizer and checkpoints it)."""
    if not cfg.warmup_steps:
        return None
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda done: min(1.0, (done + 1) / cfg.warmup_steps))

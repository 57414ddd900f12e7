"""The optimizer every learner builds: the learner ranks (engine.py, under DeepSpeed) and the probe's in-process
learner (probe/gradients.py) step with the same one."""

from __future__ import annotations

from typing import Iterable

import torch

from replay_rl.config import LearnerConfig


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: LearnerConfig) -> torch.optim.AdamW:
    """AdamW at a constant learner.lr, as in the paper (no schedule), with learner.betas and weight_decay."""
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)

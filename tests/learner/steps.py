"""Comparing two optimizer steps taken from the same start on the same rollouts."""

import pytest
import torch


def assert_same_step(metrics: list[dict], want_metrics: list[dict], state: dict, want_state: dict, lr: float) -> None:
    """metrics: train_on's, one per rank; state: the full weights after the step."""
    # Adam's first step is nearly sign(g), so the weights alone would miss a wrong scale: compare loss and the
    # global gradient norm (before clipping) too
    for key in ("loss", "grad_norm", "entropy"):
        assert [m[key] for m in metrics] == pytest.approx([m[key] for m in want_metrics], rel=1e-4), key
    # Adam's first step is lr·g/(|g|+eps): an element whose gradient is near eps takes a different step for a
    # 1e-7 change in g (seen: 1 element of 420k off by 2e-6). A wrong split changes the sign of many gradients,
    # so: at most 1 in 100,000 elements off, and those by a tenth of the largest step (lr) at most
    off = {k: ~torch.isclose(want_state[k], state[k], rtol=1e-4, atol=1e-6) for k in want_state}
    worst = max(float((want_state[k] - state[k]).abs().max()) for k in want_state)
    total = sum(v.numel() for v in want_state.values())
    off_counts = {k: int(v.sum()) for k, v in off.items() if v.any()}
    assert sum(off_counts.values()) <= total // 100_000, off_counts
    assert worst <= lr / 10, worst

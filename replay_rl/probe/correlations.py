"""Pair correlations and signal retention for estimators.py, on its cluster cells (same notation: e = g − ḡ_p,
v_p the noise of ḡ_p, s2_of the σ²(τ) per age). Pure numpy; split from estimators.py to keep it under 300 lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from replay_rl.probe.estimators import Cells


def mean_pair_corr(c: Cells, w: np.ndarray, e_s: np.ndarray, e_q: np.ndarray, vp: np.ndarray,
                    s2_of: dict[int, float]) -> float:
    """c̄: pooled correlation over every pair of distinct buffer rollouts at a probe point (any ages, same group
    included). A bootstrap copy of a cluster is the same rollouts, so pairs of copies are left out."""
    num = den = 0.0
    for p in np.unique(c.probe):
        at = (c.probe == p) & (c.age >= 1) & (w > 0)
        wa, ma, es = w[at], c.m[at], e_s[at]
        sd = np.sqrt(np.maximum([s2_of[int(a)] for a in c.age[at]], 0.0))
        sq = (es ** 2).sum(1)
        tot = (wa[:, None] * es).sum(0)
        within, within_n = (wa * (sq - e_q[at])).sum(), (wa * ma * (ma - 1)).sum()
        across, across_n = tot @ tot - (wa ** 2 * sq).sum(), (wa * ma).sum() ** 2 - (wa ** 2 * ma ** 2).sum()
        num += within + across - (within_n + across_n) * vp[at][0]
        den += (wa * ma * (ma - 1) * sd ** 2).sum() + (wa * ma * sd).sum() ** 2 - (wa ** 2 * ma ** 2 * sd ** 2).sum()
    return float(num / den) if den > 0 else float("nan")


def signal(c: Cells, w: np.ndarray, ages: np.ndarray, gbars: dict, v: dict) -> np.ndarray:
    """(A,) ⟨E g | τ, ∇F⟩ / ‖∇F‖² per age: how much of the fresh mean gradient a rollout of age τ still carries
    (1 at age 0 by definition). ⟨mean g_τ, ḡ⟩ is unbiased for ⟨E g_τ, ∇F⟩ (independent of F) and ‖ḡ‖² − v_p
    for ‖∇F‖²."""
    out = np.full(len(ages), np.nan)
    for i, a in enumerate(ages):
        if a == 0:
            out[i] = 1.0
            continue
        num = den = 0.0
        for p, gbar in gbars.items():
            at = (c.probe == p) & (c.age == a)
            num += (w[at] * (c.s[at] @ gbar)).sum()
            den += (w[at] * c.m[at]).sum() * (gbar @ gbar - v[p])
        out[i] = num / den if den != 0 else np.nan
    return out


def same_time_corr(c: Cells, e_s: np.ndarray, e_q: np.ndarray, vp: np.ndarray,
                    s2_of: dict[int, float]) -> tuple[float, float]:
    """Pooled correlation of distinct buffer rollouts inserted at the same time: within a group, and across groups.
    Assumption 4.3 puts both at ≤ 0 (|t_i − t_j| = 0); reported as evidence, not used."""
    old = c.age >= 1
    scale = np.array([max(s2_of[int(a)], 1e-300) for a in c.age])
    within_pairs = c.m * (c.m - 1)
    within = ((e_s ** 2).sum(1) - e_q - within_pairs * vp)[old].sum() / (within_pairs * scale)[old].sum()
    num = den = 0.0
    for p, a in {(int(p), int(a)) for p, a in zip(c.probe[old], c.age[old])}:
        at = (c.probe == p) & (c.age == a)
        tot = e_s[at].sum(0)
        n = c.m[at].sum()
        other = tot @ tot - (e_s[at] ** 2).sum()           # Σ over pairs of rollouts from different groups
        other_pairs = n * n - (c.m[at] ** 2).sum()
        num += other - other_pairs * vp[at][0]
        den += other_pairs * s2_of[a]
    return float(within), float(num / den) if den > 0 else float("nan")

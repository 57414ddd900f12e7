"""Each rollout's two measurements paired (issue 30, item 2): a buffer rollout measured at two probe points carries
its age's effect on the same rollout, free of cohort. Pure numpy, on effective.py's cells and intervals."""

from __future__ import annotations

import numpy as np

from replay_rl.probe.effective import _halves, interval
from replay_rl.probe.estimators import Sketches, _cells


def paired_retention(sk: Sketches, draws: int = 200, seed: int = 0) -> list[dict]:
    """Each rollout measured at two probe points p < p′ (ages τ and τ + t_p′ − t_p) is its own control: the change
    of its retention r_i = ⟨g_i, ḡ_p⟩/‖∇F_p‖² between the two is age's effect on the same rollouts, free of cohort
    (which rollouts were generated when). Per (τ, τ′): rollouts, mean r at each, and the change with a percentile
    bootstrap interval over groups. Empty without rollout ids or repeated measurements."""
    if sk.rollout is None:
        return []
    c = _cells(sk)
    fresh = c.age == 0
    half = _halves(c, fresh)
    ref, norm2 = {}, {}
    for p in np.unique(c.probe):  # ḡ_p and the cross-fitted ‖∇F_p‖²
        fa, fb = (np.flatnonzero((c.probe == p) & fresh & (half == h)) for h in (0, 1))
        ga, gb = c.s[fa].sum(0) / c.m[fa].sum(), c.s[fb].sum(0) / c.m[fb].sum()
        ref[p], norm2[p] = (c.s[fa].sum(0) + c.s[fb].sum(0)) / c.m[np.r_[fa, fb]].sum(), ga @ gb
    # a point whose ‖∇F‖² estimate is not positive has no retention to pair (status says ∇F is not resolved)
    r = np.array([g @ ref[p] / norm2[p] if norm2[p] > 0 else np.nan for g, p in zip(sk.g, sk.probe)])
    old = np.flatnonzero(sk.age >= 1)
    first = {}
    rows: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
    for i in old[np.argsort(sk.probe[old], kind="stable")]:
        j = first.setdefault(int(sk.rollout[i]), i)
        # the same id with consistent ages: Python ids of dropped rollouts can come back on new ones
        if j != i and sk.age[i] > sk.age[j] and sk.cluster[i] == sk.cluster[j] and np.isfinite(r[i] + r[j]):
            rows.setdefault((int(sk.age[j]), int(sk.age[i])), []).append((r[j], r[i], int(sk.cluster[i])))
    rng = np.random.default_rng(seed)
    out = []
    for (a, b), xs in sorted(rows.items()):
        before, after, cl = (np.array(v) for v in zip(*xs))
        groups, inv = np.unique(cl, return_inverse=True)
        total, count = np.bincount(inv, after - before), np.bincount(inv).astype(float)
        picks = rng.integers(0, len(groups), (draws, len(groups)))
        boot = total[picks].sum(1) / count[picks].sum(1)
        out.append({"ages": [a, b], "rollouts": len(xs), "retention": [float(before.mean()), float(after.mean())],
                    "change": interval(float((after - before).mean()), boot).as_dict()})
    return out

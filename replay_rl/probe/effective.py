"""Noise per unit of retained signal, σ²_eff(τ) = V(τ)/s(τ)², and the batch variance 𝒱(N) (issue 30). Pure numpy.

Notation as estimators.py: at probe point p (weights θ_t), g_i the sketched gradient of rollout i, τ_i its age,
clusters the prompt groups. The fresh set's clusters (age 0) are split into halves A and B, alternately by id.
    ‖∇F_p‖²   = ⟨ḡ_A, ḡ_B⟩: unbiased, the halves being independent (‖ḡ‖² carries ḡ's own noise)
    s(τ)      = Σ_p Σ_{i: τ} ⟨g_i, ḡ_p⟩ / Σ_p n_pτ ‖∇F_p‖²: the share of ∇F a rollout of age τ still carries
                (E g_τ = s(τ)∇F + a part ⟂ ∇F); s(0) = 1. Buffer rollouts are independent of the fresh set.
    V(τ)      = Σ_p n_pτ V_pτ / Σ_p n_pτ, V_pτ = ½ mean ‖g_i − g_j‖² over pairs of age-τ rollouts at p from
                different groups: the per-rollout variance around the age's own mean at p, unbiased without
                estimating that mean (same-group pairs, correlated, are left out). A cell of one group (R ≈ G
                rollouts a step) takes its same-group pairs over 1 − ρ_w, the share of V they see on the fresh set
                at p: it assumes the within-group correlation ρ_w does not change with age
    σ²_eff(τ) = V(τ) / s(τ)²: flat when gradients shrink with age at constant noise per unit of signal
    σ̄²_eff(x) = mean_{h ≤ x} iso(h), iso the isotonic (non-decreasing, weighted by rollouts) fit of σ²_eff(1..H)
    α         = ½ slope of log iso(τ) on log τ: a local summary for the terminal, not what is planned with
    growth    = ½ slope of log σ²_eff(τ) on log τ, unconstrained: the test of growth (status.py). The isotonic fit
                of a flat curve rises with the noise, so α's interval alone would find growth where there is none
    𝒱(N_h)    = E‖ĝ_b − ∇F‖², ĝ_b the mean of a batch of B drawn uniformly without repeats from the youngest h
                versions of the probe's FIFO (N_h rollouts), exact over the draw:
                ‖ḡ_pool‖² + S²/B·(1 − B/N_h) − 2⟨ḡ_pool, ḡ_p⟩ + ‖∇F_p‖², S² the pool's per-rollout variance, pooled
                over probe points. Same-group and cross-age correlations enter through ‖ḡ_pool‖², as in a learner's
                batch. 𝒱_eff(N_h) = E‖ĝ_b‖²/s̄_h² − ‖∇F‖², s̄_h the pool's retention: noise per unit of signal.
Intervals: 95% percentile bootstrap over clusters (fresh ones within their probe point and half, buffer ones over all
points with all their appearances), widened to contain the estimate where they miss it (`Interval.stretched`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay_rl.analysis.study import isotonic
from replay_rl.probe.estimators import Interval, Sketches, _cells

# numerator column → the column it is a share of, per age (Sketches.columns; sums over a rollout's tokens)
MECHANISM = {"clip_active": "tokens",   # tokens whose clip is active (zero gradient)
             "clip_removed": "mass",    # |A|·r summed over those tokens: the unclipped surrogate's gradient
             "ratio": "tokens",         # r = π_θ/π_b summed over tokens
             "kl": "tokens"}            # (r − 1) − log r summed: the k3 estimate of KL(π_b ‖ π_θ)


@dataclass(frozen=True)
class Effective:
    ages: np.ndarray                 # (A,) ages with data, 0 = the fresh set
    counts: np.ndarray               # (A,) rollouts per age, all probe points
    grad_norm2: Interval             # ‖∇F‖², mean over probe points
    retention: list[Interval]        # s(τ) per age
    variance: list[Interval]         # V(τ)
    sigma2_eff: list[Interval]       # σ²_eff(τ)
    sigma2_eff_bar: np.ndarray       # (A−1,) σ̄²_eff(x) at x = ages ≥ 1, from the isotonic fit
    alpha: Interval                  # local summary of the isotonic fit
    growth: Interval                 # unconstrained slope (module doc): what status.py tests
    pool_ages: np.ndarray            # (h,) FIFO depths h with N_h ≥ B at every probe point
    pool_capacity: np.ndarray        # (h,) mean N_h
    batch_variance: list[Interval]   # 𝒱(N_h)
    batch_variance_eff: list[Interval]
    mechanism: dict[str, np.ndarray]  # name → (A,) per-age share (MECHANISM), when measured
    draws_finite: float              # share of bootstrap draws with a finite α (σ²_eff finite at ≥ 2 ages)
    alpha_draws: np.ndarray          # (D,) α per bootstrap draw, for the plan's intervals


def _quad(wa: np.ndarray, k: np.ndarray, wb: np.ndarray) -> np.ndarray:
    """(D,) Σ_ab wa_da K_ab wb_db: inner products of weighted cell sums, for every draw at once."""
    return np.einsum("da,ab,db->d", wa, k, wb)


def _halves(c, fresh: np.ndarray) -> np.ndarray:
    """(cells,) 0/1: the fresh cells of each probe point alternately in halves A and B by cluster id."""
    half = np.zeros(len(c.m), int)
    for p in np.unique(c.probe):
        rows = np.flatnonzero(fresh & (c.probe == p))
        half[rows[np.argsort(c.cluster[rows], kind="stable")[1::2]]] = 1
    return half


def _weights(c, fresh: np.ndarray, half: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(1 + draws, cells): row 0 the data, then cluster-bootstrap multiplicities (module doc)."""
    w = np.ones((draws + 1, len(c.m)))
    for p in np.unique(c.probe):
        for h in (0, 1):
            rows = np.flatnonzero(fresh & (c.probe == p) & (half == h))
            w[1:, rows] = rng.multinomial(len(rows), np.full(len(rows), 1 / len(rows)), size=draws)
    old = np.unique(c.cluster[~fresh])
    mult = rng.multinomial(len(old), np.full(len(old), 1 / len(old)), size=draws)
    w[1:, ~fresh] = mult[:, np.searchsorted(old, c.cluster[~fresh])]
    return w


def _sums(w: np.ndarray, c, k: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, V·pairs, pairs) per draw over the cells `rows`: rollouts, and V as half the mean ‖g_i − g_j‖² over
    pairs from different clusters (unbiased for independent clusters with one mean, no mean estimated; a bootstrap
    copy of a cluster is the same cluster, so pairs of copies are left out too)."""
    wt, kt, m = w[:, rows], k[np.ix_(rows, rows)], c.m[rows]
    n = wt @ m
    tot = _quad(wt, kt, wt)
    same = (wt ** 2) @ (m * c.q[rows] - np.diag(kt))
    pairs = n ** 2 - (wt ** 2) @ m ** 2
    return n, n * (wt @ c.q[rows]) - tot - same, pairs


def _within(w: np.ndarray, c, k: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(½ Σ ‖g_i − g_j‖² over ordered same-group pairs, their count) per draw over the cells `rows`."""
    m = c.m[rows]
    return w[:, rows] @ (m * c.q[rows] - k[rows, rows]), w[:, rows] @ (m * (m - 1))


def _pool_sums(w: np.ndarray, c, k: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, ‖Σ g‖²) over the cells `rows`, where the pairs between bootstrap copies of one cluster count at the mean
    inner product of distinct clusters: copies are not the independent clusters they stand for, and counting them
    as one cluster's own pairs would add the pool mean's variance to every draw (the draws sat above the estimate)."""
    wt, kt, m = w[:, rows], k[np.ix_(rows, rows)], c.m[rows]
    n = wt @ m
    diag = np.diag(kt)
    distinct = _quad(wt, kt, wt) - (wt ** 2) @ diag
    mean_pair = distinct / np.maximum(n ** 2 - (wt ** 2) @ m ** 2, 1e-300)
    return n, distinct + wt @ diag + ((wt ** 2 - wt) @ m ** 2) * mean_pair


def _statistics(c, k: np.ndarray, w: np.ndarray, half: np.ndarray, ages: np.ndarray, depths: np.ndarray,
                batch_size: int) -> dict:
    """Every estimate of the module doc for each row of w: arrays (D,) or (D, A)."""
    d, a = len(w), len(ages)
    sig_num, sig_den, v_num, v_den, n_age = (np.zeros((d, a)) for _ in range(5))
    eg2, cross, gf2 = (np.zeros((d, len(depths))) for _ in range(3))
    probes = np.unique(c.probe)
    norms = []
    for p in probes:
        at = c.probe == p
        fa, fb = (np.flatnonzero(at & (c.age == 0) & (half == h)) for h in (0, 1))
        f = np.concatenate([fa, fb])
        ma, mb = w[:, fa] @ c.m[fa], w[:, fb] @ c.m[fb]
        norm2 = _quad(w[:, fa], k[np.ix_(fa, fb)], w[:, fb]) / (ma * mb)
        norms.append(norm2)
        _, vf, pf = _sums(w, c, k, f)
        same_share = np.divide(*_within(w, c, k, f)) / (vf / pf)  # 1 − ρ_w: what same-group pairs see of V
        for i, age in enumerate(ages):
            rows = np.flatnonzero(at & (c.age == age))
            if not len(rows):
                continue
            n, vp, pairs = _sums(w, c, k, rows)
            within, within_pairs = _within(w, c, k, rows)
            cell = np.where(pairs > 0, vp / pairs, within / within_pairs / same_share)
            n_age[:, i] += n
            v_num[:, i] += np.where(np.isfinite(cell), cell * n, 0)  # weighted by rollouts
            v_den[:, i] += np.where(np.isfinite(cell), n, 0)
            if age > 0:
                sig_num[:, i] += _quad(w[:, rows], k[np.ix_(rows, f)], w[:, f]) / (ma + mb)
                sig_den[:, i] += n * norm2
        for j, h in enumerate(depths):
            rows = np.flatnonzero(at & (c.age >= 1) & (c.age <= h))
            n, tot = _pool_sums(w, c, k, rows)
            ss = w[:, rows] @ c.q[rows] - tot / n
            # exact over a batch drawn from this pool: its realised ‖ḡ_pool‖² and finite-population S²
            eg2[:, j] += tot / n ** 2 + ss / (n - 1) / batch_size * (1 - batch_size / n)
            cross[:, j] += _quad(w[:, rows], k[np.ix_(rows, f)], w[:, f]) / (ma + mb) / n
            gf2[:, j] += norm2
    retention = np.where(ages > 0, sig_num / sig_den, 1.0)
    variance = v_num / v_den
    s2_eff = np.where(retention > 0, variance / retention ** 2, np.nan)  # no signal left: not finite
    pool_ret = cross / gf2
    bv_eff = np.where(pool_ret > 0, eg2 / pool_ret ** 2 - gf2, np.nan) / len(probes)
    return {"norm2": np.mean(norms, 0), "retention": retention, "variance": variance, "s2_eff": s2_eff,
            "n": n_age, "bv": (eg2 - 2 * cross + gf2) / len(probes), "bv_eff": bv_eff}


def _fit(s2_eff: np.ndarray, n: np.ndarray, ages: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(σ̄²_eff at ages ≥ 1, α, growth) for one draw, over the ages where σ²_eff is finite (a draw can miss an age);
    NaN with fewer than two such ages or a fit that reaches 0."""
    old = (ages >= 1) & np.isfinite(s2_eff)
    bar = np.full((ages >= 1).sum(), np.nan)
    if old.sum() < 2 or np.any(s2_eff[old] <= 0):
        return bar, float("nan"), float("nan")
    growth = float(np.polyfit(np.log(ages[old]), np.log(s2_eff[old]), 1, w=np.sqrt(n[old]))[0] / 2)
    iso = isotonic(s2_eff[old], n[old])
    bar[old[ages >= 1]] = np.cumsum(iso * n[old]) / np.cumsum(n[old])
    return bar, float(np.polyfit(np.log(ages[old]), np.log(iso), 1)[0] / 2), growth


def interval(point: float, draws: np.ndarray) -> Interval:
    """95% percentile interval of the finite draws, widened to contain the point (flagged) if it misses it."""
    xs = draws[np.isfinite(draws)]
    if not np.isfinite(point) or len(xs) < 0.5 * len(draws):
        return Interval(float(point), float("nan"), float("nan"))
    lo, hi = np.percentile(xs, [2.5, 97.5])
    miss = not lo <= point <= hi
    return Interval(float(point), float(min(lo, point)), float(max(hi, point)), miss)


def effective(sk: Sketches, batch_size: int, draws: int = 200, seed: int = 0) -> Effective:
    """σ²_eff(τ), s(τ), V(τ), ‖∇F‖², σ̄²_eff, α and 𝒱(N_h) with 95% percentile cluster-bootstrap intervals.
    Needs ≥ 2 fresh clusters in each half at every probe point and buffer rollouts of ≥ 2 ages."""
    c = _cells(sk)
    ages = np.unique(c.age)
    fresh = c.age == 0
    if 0 not in ages or (ages >= 1).sum() < 2:
        raise ValueError("effective: needs the fresh set (age 0) and buffer rollouts of at least two ages ≥ 1")
    if min(np.sum(fresh & (c.probe == p)) for p in np.unique(c.probe)) < 4:
        raise ValueError("effective: every probe point needs ≥ 4 fresh groups (two per half)")
    half = _halves(c, fresh)
    k = c.s @ c.s.T
    pool = [np.array([c.m[(c.probe == p) & (c.age >= 1) & (c.age <= h)].sum() for p in np.unique(c.probe)])
            for h in ages[ages >= 1]]
    depths = np.array([h for h, n in zip(ages[ages >= 1], pool) if n.min() >= max(batch_size, 2)], int)
    w = _weights(c, fresh, half, draws, np.random.default_rng(seed))
    with np.errstate(divide="ignore", invalid="ignore"):  # a draw that misses a whole cell reads NaN there
        st = _statistics(c, k, w, half, ages, depths, batch_size)
    fits = [_fit(st["s2_eff"][r], st["n"][0], ages) for r in range(len(w))]
    bars = np.array([f[0] for f in fits])
    alphas = np.array([f[1] for f in fits])
    growth = np.array([f[2] for f in fits])

    def per_age(key: str) -> list[Interval]:
        return [interval(st[key][0, i], st[key][1:, i]) for i in range(st[key].shape[1])]

    mech = {}
    for name, base in MECHANISM.items():
        if sk.columns is not None and name in sk.columns:
            mech[name] = np.array([sk.columns[name][sk.age == a].sum() / max(sk.columns[base][sk.age == a].sum(),
                                   1e-300) for a in ages])
    return Effective(ages=ages, counts=st["n"][0], grad_norm2=interval(st["norm2"][0], st["norm2"][1:]),
                     retention=per_age("retention"), variance=per_age("variance"), sigma2_eff=per_age("s2_eff"),
                     sigma2_eff_bar=bars[0], alpha=interval(alphas[0], alphas[1:]),
                     growth=interval(growth[0], growth[1:]), pool_ages=depths,
                     pool_capacity=np.array([pool[list(ages[ages >= 1]).index(h)].mean() for h in depths]),
                     batch_variance=per_age("bv"), batch_variance_eff=per_age("bv_eff"), mechanism=mech,
                     draws_finite=float(np.mean(np.isfinite(alphas[1:]))), alpha_draws=alphas[1:])


def measured_capacity(eff: Effective) -> dict | None:
    """The plan from 𝒱 itself, over the FIFO depths measured: at the probe's split every depth costs the same
    compute a step, so the least batch noise per unit of signal (𝒱_eff) wins; `largest_not_worse` is the largest N
    whose interval reaches the best one's upper end (no clear loss). None without a finite 𝒱_eff."""
    vals = np.array([x.value for x in eff.batch_variance_eff])
    if not len(vals) or not np.isfinite(vals).any():
        return None
    best = int(np.nanargmin(vals))
    top = eff.batch_variance_eff[best].hi
    ok = [i for i, x in enumerate(eff.batch_variance_eff) if np.isfinite(x.lo) and x.lo <= top]
    return {"capacity": float(eff.pool_capacity[best]), "depth": int(eff.pool_ages[best]),
            "largest_not_worse": float(eff.pool_capacity[max(ok, default=best)]),
            "measured_up_to": float(eff.pool_capacity[-1])}


def by_use(sk: Sketches, batch_size: int, draws: int = 200, seed: int = 0) -> dict[str, Effective | None]:
    """σ²_eff on the buffer rollouts the learner never sampled and on those it did, each against the same fresh
    set: age's effect apart from use's. None where a stratum has fewer than two ages."""
    if sk.uses is None:
        return {}
    out = {}
    for name, keep in (("never_sampled", sk.uses == 0), ("sampled", sk.uses >= 1)):
        sub = sk.subset(keep | (sk.age == 0))
        try:
            out[name] = effective(sub, batch_size, draws, seed)
        except ValueError:
            out[name] = None
    return out

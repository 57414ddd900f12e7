"""From measured (μ, α, ρ) to a setting: Theorem 4.5's point, N at the config's split, the best integer split, an LR.

All with theory.plan(discrete=True): σ̄²(H) is the exact mean of σ(h)² = h^{2α} over the ages h = 1..H, and the
feasible point keeps N ≥ B. The best split is the integer (W, T) with the config's W + T that minimises the bound
per unit compute 𝒥 = σ̄²(x)(1 + y/μ)(1/y + 1/x + ρ) at y = μT/W and that split's best feasible horizon x.
Intervals on N: plan at each joint bootstrap draw of (α, ρ), the split held fixed. Pure python/numpy.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from replay_rl.analysis.theory import cost, plan

# below it σ² grows < 1.4% per doubling of age: no interior optimum in practice (the horizon runs to thousands)
ALPHA_MIN = 0.01
LR_RULE = ("heuristic, not measured: lr × replay ratio held at the config's (lr = config lr × y_config / y), so a "
           "rollout's summed step size stays what the config's LR gives; lower the LR as reuse rises (issue 19: "
           "1.5e-4 suits the baseline, 5e-5 did better at y ≈ 3.2). Replace with the frontier study's relation")


def lr_for(replay_ratio: float, config_lr: float, config_replay_ratio: float) -> float:
    """LR_RULE: config_lr · y_config / y."""
    return config_lr * config_replay_ratio / replay_ratio


def _sbar2(x: float, alpha: float) -> float:
    h = max(1, round(x))
    return float(np.mean(np.arange(1, h + 1, dtype=float) ** (2 * alpha)))


def _limit(alpha: float) -> str | None:
    if not math.isfinite(alpha) or alpha < ALPHA_MIN:
        return "unbounded"   # staleness adds (almost) no noise: the longest horizon wins
    if alpha >= 0.5:
        return "on_policy"   # noise grows faster than staleness saves: N = B, replay ratio 1
    return None


def at_split(mu: float, alpha: float, rho: float, batch_size: int, w: int, t: int, horizon_cap: float,
             multiple: int = 1) -> dict:
    """The best feasible N at the split W/T (y = μT/W fixed), rounded up to a multiple of `multiple`. α < ALPHA_MIN:
    the horizon is taken at horizon_cap (the longest age measured), flagged `unbounded`; α ≥ ½: N = B."""
    r = batch_size * (w / t) / mu
    y = batch_size / r
    limit = _limit(alpha)
    if limit == "unbounded":
        x = horizon_cap
    elif limit == "on_policy":
        x = y
    else:
        x = plan(mu, alpha, rho, batch_size, w / t, discrete=True).x_at_capacity
    n = max(batch_size, math.ceil(x * r / multiple - 1e-9) * multiple)
    return {"generators": w, "learners": t, "replay_ratio": y, "rollouts_per_step": r, "horizon": n / r,
            "capacity": n, "raised_to_batch": bool(x * r < batch_size), "limit": limit,
            "cost": cost(n / r, y, mu, rho, 1.0 if limit == "unbounded" else _sbar2(n / r, alpha))}


def best_split(mu: float, alpha: float, rho: float, batch_size: int, total: int, horizon_cap: float,
               multiple_of_t: bool, multiple: int = 1) -> dict:
    """The integer split W + T = total with the lowest 𝒥; multiple_of_t: a real cluster, where T must divide B
    and N (one shard per learner rank), else N rounds to `multiple`. None when α < ALPHA_MIN: with no growth of
    σ² the bound falls forever in y, so it names no split."""
    if _limit(alpha) == "unbounded":
        return None
    options = [at_split(mu, alpha, rho, batch_size, w, total - w, horizon_cap, (total - w) if multiple_of_t
                        else multiple) for w in range(1, total) if not multiple_of_t or batch_size % (total - w) == 0]
    if not options:
        raise ValueError(f"no split of {total} GPUs has a learner count dividing batch_size={batch_size}")
    return min(options, key=lambda o: o["cost"])


def _quantiles(xs: list[float]) -> list[float | None]:
    """95% interval of draws that may be inf (unbounded); JSON has no inf, so those come back as None."""
    arr = np.asarray(xs, float)
    if not len(arr):
        return [None, None]
    q = np.quantile(arr, [0.025, 0.975], method="inverted_cdf")  # actual draws: no inf − inf interpolation
    return [float(v) if math.isfinite(v) else None for v in q]


def recommend(mu: float, alpha: float, rho: float, batch_size: int, split: tuple[int, int], config_lr: float,
              config_replay_ratio: float, horizon_cap: float, alpha_draws=(), rho_draws=(),
              multiple: int = 1, real_cluster: bool = False) -> dict:
    """The probe's recommendation (module doc). split: the config's (W, T); multiple: N must divide by it (the
    config's learner ranks); real_cluster: the split also sets learner ranks, so T must divide B."""
    rho_used = min(max(rho, 0.0), 1.0)
    w, t = split
    here = at_split(mu, alpha, rho_used, batch_size, w, t, horizon_cap, t if real_cluster else multiple)
    best = best_split(mu, alpha, rho_used, batch_size, w + t, horizon_cap, real_cluster, multiple) or dict(here)
    for s in (here, best):
        s["lr"] = lr_for(s["replay_ratio"], config_lr, config_replay_ratio)
        s["extrapolated"] = s["limit"] is None and s["horizon"] > horizon_cap + 0.5
    theorem = None if _limit(alpha) else {k: v for k, v in asdict(plan(mu, alpha, rho_used, batch_size,
                                                                        discrete=True)).items() if v is not None}
    draws = [(a, min(max(r, 0.0), 1.0)) for a, r in zip(alpha_draws, rho_draws) if math.isfinite(a + r)]

    def n_at(a: float, r: float, s: dict) -> float:
        o = at_split(mu, a, r, batch_size, s["generators"], s["learners"], horizon_cap,
                     s["learners"] if real_cluster else multiple)
        return math.inf if o["limit"] == "unbounded" else o["capacity"]

    here["capacity_interval"] = _quantiles([n_at(a, r, here) for a, r in draws])
    best["capacity_interval"] = _quantiles([n_at(a, r, best) for a, r in draws])
    feasible = [plan(mu, a, r, batch_size, discrete=True) for a, r in draws if not _limit(a)]
    return {"mu": mu, "alpha": alpha, "rho": rho_used, "rho_clipped": rho_used != rho, "batch_size": batch_size,
            "theorem": theorem, "at_config_split": here, "best_split": best, "lr_rule": LR_RULE,
            "x_feasible_interval": _quantiles([p.x_feasible for p in feasible]),
            "y_feasible_interval": _quantiles([p.y_feasible for p in feasible]),
            "draws_unbounded": sum(_limit(a) == "unbounded" for a, _ in draws) / max(len(draws), 1),
            "draws_on_policy": sum(_limit(a) == "on_policy" for a, _ in draws) / max(len(draws), 1)}


def mu_direction(alpha: float, rho: float, batch_size: int, split: tuple[int, int], horizon_cap: float,
                 mus: tuple[float, float] = (2.0, 10.0), alpha_draws=(), rho_draws=()) -> dict:
    """The issue's direction check from one measured (α, ρ): recommendations at the smaller and the larger μ, and
    whether the smaller μ gives a smaller horizon x = N/R, replay ratio y and buffer N, at the theorem's feasible
    point (N = B·x/y), at the config's split and at each μ's best split. Under Theorem 4.5 x and y rise with μ
    but N = B·x/y falls at a fixed B (fewer, more reused rollouts per step: R = B/y), so `smaller_n` is expected
    False. `share_draws_*`: the fraction of bootstrap draws where x, y and N are smaller at the config's split."""
    lo, hi = (recommend(mu, alpha, rho, batch_size, split, 1.0, 1.0, horizon_cap) for mu in mus)
    out = {"mus": list(mus), "low": lo, "high": hi}
    if lo["theorem"] and hi["theorem"]:
        a, b = lo["theorem"], hi["theorem"]
        out["theorem"] = {"smaller_x": a["x_feasible"] < b["x_feasible"],
                          "smaller_y": a["y_feasible"] < b["y_feasible"],
                          "smaller_n": a["capacity_optimal_split"] < b["capacity_optimal_split"]}
    for where in ("at_config_split", "best_split"):
        a, b = lo[where], hi[where]
        out[where] = {"smaller_x": a["horizon"] < b["horizon"], "smaller_y": a["replay_ratio"] < b["replay_ratio"],
                      "smaller_n": a["capacity"] < b["capacity"]}
    w, t = split
    pairs = [tuple(at_split(mu, a, min(max(r, 0), 1), batch_size, w, t, horizon_cap) for mu in mus)
             for a, r in zip(alpha_draws, rho_draws) if math.isfinite(a + r)]
    for key, name in (("horizon", "x"), ("replay_ratio", "y"), ("capacity", "n")):
        out[f"share_draws_smaller_{name}_at_config_split"] = (
            sum(p[0][key] < p[1][key] for p in pairs) / len(pairs) if pairs else None)
    return out


def mu_direction_from_probe(result: dict, mus: tuple[float, float] = (2.0, 10.0)) -> dict:
    """mu_direction on a probe.json object's measured (α, ρ), draws, batch size, split and horizon."""
    draws = [(a, r) for a, r in zip(result["draws"]["alpha"], result["draws"]["rho"])
             if a is not None and r is not None]
    run = result["run"]
    return mu_direction(result["alpha"]["value"], result["rho"]["value"], run["batch_size"], tuple(run["split"]),
                        run["horizon"], mus, [a for a, _ in draws], [r for _, r in draws])

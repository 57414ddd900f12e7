"""Staleness as policy drift, an LR bracket and the W/T line, from a probe.json object (issue 30, item 6). Pure python.

Steps of age say little across learning rates: a rollout 12 steps old at 1e-4 has drifted as far as one 24 steps
old at 5e-5. The probe measures KL(π_b‖π_θ) per age (the k3 estimate over tokens, effective.MECHANISM "kl"), so:
    KL(τ)     ≈ c·τ^β, least squares of log KL on log τ over the ages ≥ 1 measured (read past the last age measured,
                it is extrapolated and says so)
    mean age  of a rollout sampled uniformly from a FIFO of horizon x = N/R versions: (x + 1)/2
    LR bracket, two rules and the span between them; both are heuristics, neither is measured to be the best LR:
      - replay ratio (recommend.LR_RULE): lr · y held at the config's, so a rollout's summed step stays the same;
      - drift: KL ∝ lr² at a fixed age (second order, ½Δθᵀ F Δθ, with Adam's step ∝ lr), so the LR that gives the
        mean sampled rollout at N the KL it has at the config's own N is lr · (KL(age_config)/KL(age_N))^½.
"""

from __future__ import annotations

import math

import numpy as np


def kl_by_age(result: dict) -> list[tuple[int, float]]:
    """(age, mean KL(π_b‖π_θ) per token) for the ages ≥ 1 the probe measured; empty without the mechanism columns."""
    e = result.get("effective") or {}
    return [(a["age"], a["kl_mean"]) for a in e.get("ages", [])
            if a["age"] >= 1 and a.get("kl_mean") is not None and math.isfinite(a["kl_mean"])]


def kl_fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(c, β) of KL(τ) ≈ c·τ^β over the positive points; None with fewer than two."""
    pos = [(a, k) for a, k in points if k > 0]
    if len(pos) < 2:
        return None
    beta, log_c = np.polyfit(np.log([a for a, _ in pos]), np.log([k for _, k in pos]), 1)
    return float(math.exp(log_c)), float(beta)


def kl_at(fit: tuple[float, float], age: float) -> float:
    c, beta = fit
    return c * max(age, 1.0) ** beta


def mean_age(capacity: float, rollouts_per_step: float) -> float:
    """Mean age in learner steps of a rollout sampled uniformly from a FIFO of `capacity` (horizon x = N/R)."""
    return (capacity / rollouts_per_step + 1) / 2


def lr_bracket(result: dict, capacity: float, config_capacity: float) -> dict:
    """The two LR rules at N = `capacity` (module doc) and the bracket they span; the drift rule is None without a
    KL fit. `config_capacity`: the N the config runs at, the drift rule's reference."""
    run, rec = result["run"], result["recommendation"]
    r = run["rollouts_per_step"]
    by_ratio = rec["at_config_split"]["lr"]  # LR_RULE at the config's split, where every N has the same y
    fit = kl_fit(kl_by_age(result))
    a_n, a_cfg = mean_age(capacity, r), mean_age(config_capacity, r)
    by_drift = None if fit is None else run["lr"] * math.sqrt(kl_at(fit, a_cfg) / kl_at(fit, a_n))
    rules = [x for x in (by_ratio, by_drift) if x is not None]
    return {"capacity": capacity, "horizon": capacity / r, "mean_age": a_n,
            "kl_mean_age": None if fit is None else kl_at(fit, a_n),
            "extrapolated": bool(kl_by_age(result)) and a_n > max(a for a, _ in kl_by_age(result)),
            "lr_by_replay_ratio": by_ratio, "lr_by_drift": by_drift, "bracket": [min(rules), max(rules)]}


def split_line(result: dict) -> str:
    """Whether the W/T split was searched, and why not when it was not."""
    rec, st = result["recommendation"], result["status"]["status"]
    w, t = result["run"]["split"]
    if st != "ok":
        return (f"W/T: not searched ({st}): the bound's search over splits needs σ²_eff to grow with age; here it "
                f"does not or is not resolved, so it names no split. The pilot runs at the config's {w}/{t}")
    if rec["at_config_split"]["limit"] == "unbounded" or rec["best_split"] == rec["at_config_split"]:
        return f"W/T: not searched: α < 0.01, the bound falls for ever in y and names no split; config's {w}/{t} kept"
    return f"W/T: searched over the integer splits with W + T = {w + t} at the measured (μ, α, ρ)"


def drift_lines(result: dict, capacities: list[float], config_capacity: float) -> list[str]:
    """The terminal's lines: KL per age, then per N its horizon in steps and in KL and the LR bracket."""
    points = kl_by_age(result)
    fit = kl_fit(points)
    if fit is None:
        return ["drift: no KL(π_b‖π_θ) per age measured (probe.json predates the mechanism columns)"]
    shown = points if len(points) <= 4 else [points[0], points[len(points) // 2], points[-1]]
    lines = ["drift: KL(π_b‖π_θ) per token by age " + ", ".join(f"τ={a}: {k:.2g}" for a, k in shown)
             + f"; fit KL ≈ {fit[0]:.2g}·τ^{fit[1]:.2f}"]
    for n in capacities:
        b = lr_bracket(result, n, config_capacity)
        lines.append(f"  N={n:.0f}: horizon {b['horizon']:.1f} steps, mean age {b['mean_age']:.1f} ↔ KL "
                     f"{b['kl_mean_age']:.2g}{' (extrapolated)' if b['extrapolated'] else ''}; lr bracket "
                     f"[{b['bracket'][0]:.3g}, {b['bracket'][1]:.3g}] (replay-ratio rule "
                     f"{b['lr_by_replay_ratio']:.3g}, drift rule {b['lr_by_drift']:.3g})")
    lines.append(f"  lr bracket: a heuristic, not measured; its ends hold lr·y, or the KL of the mean sampled rollout "
                 f"at the config's N = {config_capacity:.0f}, fixed (replay_rl/probe/drift.py)")
    return lines

"""What a person gets from `replay-rl probe`: probe.json, sigma2.png, a short table and one line to paste."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from replay_rl.probe.estimators import Estimates

RHO_ESTIMATOR = ("ρ = N·Σ_d n_d·d·c(d) / Σ_d n_d·d², least squares through 0 of c(d) on d/N (Assumption 4.3: "
                 "corr(ε_i, ε_j) ≤ ρ|t_i − t_j|/N); c(d) the pooled uncentred correlation of the errors of buffer "
                 "rollouts inserted d versions apart, ḡ's noise removed; N the probe buffer's rollouts")
RHO_V_ESTIMATOR = ("ρ_𝒱 = R·c̄, c̄ the pooled correlation over every pair of distinct buffer rollouts (any ages, "
                   "same group included), R = N/H: the ρ at which Theorem 4.4's ρ/R term equals the measured "
                   "covariance of a batch's distinct items; recommendation.with_rho_variance plans with it")
SIGNAL_NOTE = ("⟨E g | τ, ∇F⟩ / ‖∇F‖²: the share of the fresh mean gradient a rollout of age τ still carries")
KAPPA_NOTE = ("Assumption 4.2's bias constant, ‖E ε‖ ≤ κ‖θ_t − θ_{t_i}‖ (least squares through 0 over (point, age) "
              "cells, weights' drift from the sketch). Informative only: Theorem 4.5 takes η → 0, where the κ term "
              "of Theorem 4.4 vanishes; its step condition η ≤ R/(2√2κN) is for SGD, not Adam's lr")


def _finite(x):
    """JSON has no inf or NaN: None instead."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def paste_line(setting: dict, emulated_mu: float | None) -> str:
    """-s overrides for the setting. An emulated run's split lives in cluster.emulate (its W/T paces generation),
    with the μ it was computed for (so that the line also loads over the embedded default); a real cluster's in
    cluster.generators/learners."""
    line = f"-s replay.capacity={setting['capacity']} -s learner.lr={setting['lr']:.3g} "
    if emulated_mu is None:
        return line + f"-s cluster.generators={setting['generators']} -s cluster.learners={setting['learners']}"
    return line + (f"-s cluster.emulate.mu={emulated_mu:g} -s cluster.emulate.generators={setting['generators']} "
                   f"-s cluster.emulate.learners={setting['learners']}")


def assemble(est: Estimates, data, rec: dict, header: dict) -> dict:
    """The probe.json object: header (config, settings, run), the constants with intervals, the recommendation."""
    k = est.kappa
    return _finite({
        **header,
        "mu": data.mu,
        "alpha": {**est.alpha.as_dict(), "log_scale": est.log_scale,
                  "fit": "log σ²(τ) = log_scale + 2α·log τ, least squares over ages 1..H"},
        "rho": {**est.rho.as_dict(), "capacity_n": data.sketches.capacity, "estimator": RHO_ESTIMATOR,
                "corr_by_distance": est.corr_by_distance, "corr_same_group": est.corr_same_group,
                "corr_same_time_other_groups": est.corr_same_time},
        "rho_variance": {**est.rho_variance.as_dict(), "estimator": RHO_V_ESTIMATOR},
        "signal_by_age": {"note": SIGNAL_NOTE,
                          "ages": [{"age": int(a), **x.as_dict()} for a, x in zip(est.ages, est.signal)]},
        "kappa": None if k is None else {**k.as_dict(), "bias2_share_by_age": est.bias2_share, "note": KAPPA_NOTE},
        "sigma2": [{"age": int(a), **s.as_dict(), "rollouts": int(n)}
                   for a, s, n in zip(est.ages, est.sigma2, est.counts)],
        "recommendation": rec,
        "draws": {"alpha": est.alpha_draws.tolist(), "rho": est.rho_draws.tolist(),
                  "rho_variance": est.rho_variance_draws.tolist()},
    })


def _fmt(x, spec: str = ".3g") -> str:
    return "–" if x is None else format(x, spec)


def _n(x) -> str:
    """An interval end of N: None is an unbounded draw (probe.json has no inf)."""
    return "∞" if x is None else format(x, ".0f")


def table(result: dict) -> str:
    """A few lines for the terminal: constants with intervals, then the settings."""
    r, rec = result["run"], result["recommendation"]
    mu, a, rho, k = result["mu"], result["alpha"], result["rho"], result["kappa"]
    here = result["mu"]["measured_here"]
    lines = [f"probe: {r['task']}, B={r['batch_size']}, lr {r['lr']:.3g}, W/T {r['split'][0]}/{r['split'][1]}, "
             f"{len(r['probe_points'])} probe points over {r['steps']} steps, {result['wall_s']:.0f} s"
             + (f" ({r['stopped']})" if r["stopped"] else ""),
             f"{'':10}{'value':>9}  {'95% interval':<20}how",
             f"{'μ':10}{_fmt(mu['value']):>9}  [{_fmt(mu['lo'])}, {_fmt(mu['hi'])}]{'':<6}{mu['source']}; here "
             f"{_fmt(here['value'])} [{_fmt(here['lo'])}, {_fmt(here['hi'])}]",
             f"{'α':10}{_fmt(a['value']):>9}  [{_fmt(a['lo'])}, {_fmt(a['hi'])}]{'':<6}σ(τ) ∝ τ^α over ages "
             f"1..{r['horizon']}",
             f"{'ρ':10}{_fmt(rho['value']):>9}  [{_fmt(rho['lo'])}, {_fmt(rho['hi'])}]{'':<6}Assumption 4.3 at "
             f"N = {rho['capacity_n']:.0f}" + (" (clipped to [0, 1] for the plan)" if rec["rho_clipped"] else "")]
    rv = result["rho_variance"]
    lines.append(f"{'ρ_𝒱':10}{_fmt(rv['value']):>9}  [{_fmt(rv['lo'])}, {_fmt(rv['hi'])}]{'':<6}R × mean correlation "
                 "of a batch's distinct items (what the bound's ρ/R term needs)")
    if k is not None:
        lines.append(f"{'κ':10}{_fmt(k['value']):>9}  [{_fmt(k['lo'])}, {_fmt(k['hi'])}]{'':<6}bias, "
                     "informative (not in Theorem 4.5)")
    th = rec["theorem"]
    lines.append("theorem 4.5 (discrete): " + ("no interior optimum (α outside [0.01, ½))" if th is None else
                 f"x* = {th['x_star']:.3g}, y* = {th['y_star']:.3g}" + ("" if th["feasible"] else
                 f" (N < B: infeasible; best feasible x = y = {th['x_feasible']:.3g})")))
    for name, key in (("at your split", "at_config_split"), ("best split", "best_split")):
        s = rec[key]
        lo, hi = s["capacity_interval"]
        note = {"unbounded": " (α < 0.01: σ² does not grow with age over the ages measured, so the theorem has no "
                             "finite horizon; this is the longest horizon measured at the config's split, and the "
                             "interval is unbounded: a longer one may be better)",
                "on_policy": " (α ≥ ½: on-policy)"}.get(s["limit"], "")
        if s["raised_to_batch"]:
            note += " (raised to B)"
        elif s["extrapolated"]:
            note += f" (horizon {s['horizon']:.0f} > ages measured)"
        lines.append(f"{name:<14}W/T {s['generators']}/{s['learners']}: N = {s['capacity']} [{_n(lo)}, "
                     f"{_n(hi)}], replay ratio {s['replay_ratio']:.2f}, "
                     f"horizon {s['horizon']:.1f}, lr {s['lr']:.3g}{note}")
    alt = rec["with_rho_variance"]["at_config_split"]
    lines.append(f"{'with ρ_𝒱':<14}W/T {alt['generators']}/{alt['learners']}: N = {alt['capacity']} "
                 f"[{_n(alt['capacity_interval'][0])}, {_n(alt['capacity_interval'][1])}] (ρ_𝒱 for ρ)")
    lines += [f"paste: {rec['paste']}" + ("" if rec["paste_valid"] is True else f"  ({rec['paste_valid']})"),
              "lr: " + rec["lr_rule"].split(":")[0] + " (probe.json: lr_rule)"]
    return "\n".join(lines)


def plot_sigma2(est: Estimates, path: Path) -> Path:
    """σ²(τ) per age with its interval, the fitted power law over ages ≥ 1, and σ²(0) of the fresh set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ages = est.ages
    old = ages >= 1
    val = np.array([s.value for s in est.sigma2])
    lo = np.array([s.lo for s in est.sigma2])
    hi = np.array([s.hi for s in est.sigma2])
    ax.errorbar(ages[old], val[old], yerr=[np.maximum(val - lo, 0)[old], np.maximum(hi - val, 0)[old]], fmt="o",
                capsize=3, label="σ²(τ), buffer rollouts (95% bootstrap)")
    if np.isfinite(est.alpha.value):
        tau = np.linspace(1, ages.max(), 100)
        ax.plot(tau, np.exp(est.log_scale) * tau ** (2 * est.alpha.value), "-",
                label=f"fit (τ/τ₀)^{{2α}}, α = {est.alpha.value:.3f} [{est.alpha.lo:.3f}, {est.alpha.hi:.3f}]")
    if (~old).any():
        ax.axhline(val[~old][0], ls="--", color="gray", label=f"σ²(0), fresh set: {val[~old][0]:.3g}")
        ax.axhspan(lo[~old][0], hi[~old][0], color="gray", alpha=0.15)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("age τ (learner versions since generation)")
    ax.set_ylabel("E‖g_i − ∇F‖² (sketched)")
    ax.set_title("gradient error against age")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(result: dict, est: Estimates, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    js = out / "probe.json"
    js.write_text(json.dumps(result, indent=2, allow_nan=False))
    return [js, plot_sigma2(est, out / "sigma2.png")]

"""What a person gets from `replay-rl probe`: probe.json, sigma2.png, a short table and one line to paste."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from replay_rl.probe.effective import MECHANISM, Effective, measured_capacity
from replay_rl.probe.estimators import Estimates
from replay_rl.probe.drift import drift_lines, split_line
from replay_rl.probe.paired import paired_retention
from replay_rl.probe.pilot import command, horizon_capacity

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


EFFECTIVE_NOTE = ("σ²_eff(τ) = V(τ)/s(τ)²: the per-rollout variance around age τ's own mean over the share of ∇F "
                  "it still carries (s), ‖∇F‖² cross-fitted on two halves of the fresh groups; σ̄²_eff(x) the mean "
                  "of the isotonic fit over ages ≤ x; growth the unconstrained slope that status tests, alpha_local "
                  "the isotonic fit's; batch_variance 𝒱(N) = E‖ĝ_B − ∇F‖² over batches of B from the FIFO's youngest "
                  "versions (per_signal: per unit of the signal they carry). 95% percentile cluster bootstrap")


def effective_json(eff: Effective | None, strata: dict) -> dict | None:
    """probe.json's `effective` object (EFFECTIVE_NOTE); None when it could not be estimated (status says why)."""
    if eff is None:
        return None
    bar = dict(zip(eff.ages[eff.ages >= 1].tolist(), eff.sigma2_eff_bar.tolist()))
    ages = [{"age": int(a), "rollouts": float(n), "sigma2_eff": s.as_dict(), "retention": r.as_dict(),
             "variance": v.as_dict(), "sigma2_eff_bar": bar.get(int(a)),
             **{f"{k}_share" if k.startswith("clip") else f"{k}_mean": float(x[i]) for k, x in eff.mechanism.items()}}
            for i, (a, n, s, r, v) in enumerate(zip(eff.ages, eff.counts, eff.sigma2_eff, eff.retention,
                                                    eff.variance))]
    pools = [{"depth": int(h), "capacity": float(n), "value": x.as_dict(), "per_signal": y.as_dict()}
             for h, n, x, y in zip(eff.pool_ages, eff.pool_capacity, eff.batch_variance, eff.batch_variance_eff)]
    by_use = {k: None if e is None else [{"age": int(a), "sigma2_eff": s.as_dict(), "retention": r.as_dict()}
                                         for a, s, r in zip(e.ages, e.sigma2_eff, e.retention)]
              for k, e in strata.items()}
    return {"note": EFFECTIVE_NOTE, "grad_norm2": eff.grad_norm2.as_dict(), "growth": eff.growth.as_dict(),
            "alpha_local": eff.alpha.as_dict(), "draws_finite": eff.draws_finite, "ages": ages,
            "batch_variance": pools, "measured_capacity": measured_capacity(eff), "by_use": by_use,
            "mechanism": {k: f"Σ {k} / Σ {v}" for k, v in MECHANISM.items() if k in eff.mechanism}}


def _span(x: dict) -> str:
    """value [lo, hi]; the interval left out when the bootstrap gave none."""
    if x["lo"] is None or x["hi"] is None:
        return f"{_fmt(x['value'])} [–]"
    return f"{_fmt(x['value'])} [{_fmt(x['lo'])}, {_fmt(x['hi'])}]" + ("*" if x.get("stretched") else "")


def effective_lines(result: dict) -> list[str]:
    """The status and σ²_eff(τ), s(τ), V(τ), mechanism (clip: share of tokens clipped, cut: share of |ρA| the clip
    removed, mean r, KL(π_b‖π_θ)) and 𝒱(N) for the terminal."""
    e, st = result["effective"], result["status"]
    if e is None:
        return [f"status: {st['status']}: {st['reason']}"]
    lines = [f"status: {st['status']}: {st['reason']}",
             f"‖∇F‖² {_span(e['grad_norm2'])}, growth {_span(e['growth'])}, α (local, isotonic) "
             f"{_span(e['alpha_local'])}",
             f"{'age':>4} {'σ²_eff(τ)':<26}{'s(τ)':<24}{'V(τ)':<24}{'clip':>6} {'cut':>6} {'r':>6} {'KL':>8}"]
    for a in e["ages"]:
        lines.append(f"{a['age']:>4} {_span(a['sigma2_eff']):<26}{_span(a['retention']):<24}{_span(a['variance']):<24}"
                     f"{_fmt(a.get('clip_active_share'), '.3f'):>6} {_fmt(a.get('clip_removed_share'), '.3f'):>6} "
                     f"{_fmt(a.get('ratio_mean'), '.3f'):>6} "
                     f"{_fmt(a.get('kl_mean'), '.2g'):>8}")
    lines += [f"𝒱(N) N={p['capacity']:.0f}: {_span(p['value'])}, per unit of signal {_span(p['per_signal'])}"
              for p in e["batch_variance"]]
    lines += [f"paired τ {p['ages'][0]}→{p['ages'][1]}: Δs {_span(p['change'])} over the same {p['rollouts']} rollouts"
              for p in result.get("paired_retention", [])]
    if (m := e["measured_capacity"]) is not None:
        lines.append(f"𝒱 per unit of signal least at N={m['capacity']:.0f}; largest N not clearly worse "
                     f"{m['largest_not_worse']:.0f} (measured up to {m['measured_up_to']:.0f}, at this split)")
    return lines + ["(* an interval widened to contain its estimate)"] * any(
        "stretched" in str(a) for a in e["ages"])


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


def assemble(est: Estimates, data, rec: dict, header: dict, eff: Effective | None, strata: dict, status) -> dict:
    """The probe.json object: header (config, settings, run), the status, σ²_eff and 𝒱(N), the constants with
    intervals, the recommendation."""
    k = est.kappa
    return _finite({
        **header,
        "status": status.as_dict(),
        "effective": effective_json(eff, strata),
        "paired_retention": paired_retention(data.sketches),
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


def _n_interval(n: int, lo, hi) -> str:
    """[lo, hi] on N, None an unbounded draw; widened (and starred) where it misses N itself."""
    lo_v = n if lo is None or lo > n else lo
    hi_s = "∞" if hi is None else format(max(hi, n), ".0f")
    star = "*" if (lo is None or lo > n or (hi is not None and hi < n)) else ""
    return f"[{lo_v:.0f}, {hi_s}]{star}"


def _settings_lines(rec: dict) -> list[str]:
    """Theorem 4.5's point and N at the config's and the best split: printed only with status ok."""
    lines = []
    th = rec["theorem"]
    lines.append("theorem 4.5 (discrete): " + ("no interior optimum (α outside [0.01, ½))" if th is None else
                 f"x* = {th['x_star']:.3g}, y* = {th['y_star']:.3g}" + ("" if th["feasible"] else
                 f" (N < B: infeasible; best feasible x = y = {th['x_feasible']:.3g})")))
    for name, key in (("at your split", "at_config_split"), ("best split", "best_split")):
        s = rec[key]
        note = {"unbounded": " (α < 0.01: σ² does not grow with age over the ages measured, so the theorem has no "
                             "finite horizon; this is the longest horizon measured at the config's split, and the "
                             "interval is unbounded: a longer one may be better)",
                "on_policy": " (α ≥ ½: on-policy)"}.get(s["limit"], "")
        if s["raised_to_batch"]:
            note += " (raised to B)"
        elif s["extrapolated"]:
            note += f" (horizon {s['horizon']:.0f} > ages measured)"
        lines.append(f"{name:<14}W/T {s['generators']}/{s['learners']}: N = {s['capacity']} "
                     f"{_n_interval(s['capacity'], *s['capacity_interval'])}, replay ratio {s['replay_ratio']:.2f}, "
                     f"horizon {s['horizon']:.1f}, lr {s['lr']:.3g}{note}")
    alt = rec["with_rho_variance"]["at_config_split"]
    lines.append(f"{'with ρ_𝒱':<14}W/T {alt['generators']}/{alt['learners']}: N = {alt['capacity']} "
                 f"{_n_interval(alt['capacity'], *alt['capacity_interval'])} (ρ_𝒱 for ρ)")
    return lines


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
    if result["status"]["status"] == "ok":
        lines += _settings_lines(rec)
    else:  # the theorem's arithmetic stays in probe.json (recommendation); printed, it would read as advice
        lines.append(f"settings: none ({result['status']['status']}); the theorem's arithmetic is in probe.json")
    lines += effective_lines(result)
    shown = {round(horizon_capacity(result))} | ({rec["at_config_split"]["capacity"]} if rec["paste"] else set())
    lines += [split_line(result), *drift_lines(result, sorted(shown), r.get("capacity") or min(shown))]
    if rec["paste"] is None:  # no setting to paste: the pilot over N decides (pilot.py)
        lines.append(f"paste: none (status {result['status']['status']}); run the pilot (--max-capacity: 20·B here, "
                     f"set the most your memory holds): {command(result)}")
    else:
        lines.append(f"paste: {rec['paste']}" + ("" if rec["paste_valid"] is True else f"  ({rec['paste_valid']})"))
    lines.append("lr: " + rec["lr_rule"].split(":")[0] + " (probe.json: lr_rule)")
    return "\n".join(lines)


def plot_sigma2(est: Estimates, path: Path, eff: Effective | None = None) -> Path:
    """Left: σ²(τ) per age with its interval, the fitted power law over ages ≥ 1, and σ²(0) of the fresh set.
    Right (eff): σ²_eff(τ) with its interval, the isotonic σ̄²_eff, and s(τ) on its own axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, right) = plt.subplots(1, 2, figsize=(11, 4))
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
    if eff is not None:
        _plot_effective(eff, right)
    else:
        right.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_effective(eff: Effective, ax) -> None:
    val, lo, hi = (np.array([getattr(s, f) for s in eff.sigma2_eff]) for f in ("value", "lo", "hi"))
    ax.errorbar(eff.ages, val, yerr=[np.maximum(val - lo, 0), np.maximum(hi - val, 0)], fmt="o", capsize=3,
                label="σ²_eff(τ) = V/s² (95% bootstrap)")
    ax.plot(eff.ages[eff.ages >= 1], eff.sigma2_eff_bar, "-",
            label=f"σ̄²_eff (isotonic), α local {eff.alpha.value:.3f}")
    if np.any(val > 0):  # ratios over a retention near 0 span decades: on a linear axis all else reads as 0
        ax.set_yscale("log")
    ax.set_xlabel("age τ")
    ax.set_ylabel("noise per unit of retained signal")
    ax.set_title(f"‖∇F‖² = {eff.grad_norm2.value:.3g} [{eff.grad_norm2.lo:.3g}, {eff.grad_norm2.hi:.3g}]")
    ax.legend(fontsize=8, loc="upper left")
    twin = ax.twinx()
    r, rlo, rhi = (np.array([getattr(s, f) for s in eff.retention]) for f in ("value", "lo", "hi"))
    twin.errorbar(eff.ages + 0.15, r, yerr=[np.maximum(r - rlo, 0), np.maximum(rhi - r, 0)], fmt="s", color="C2",
                  capsize=2, label="s(τ), retention")
    twin.set_ylabel("s(τ)")
    twin.legend(fontsize=8, loc="lower right")


def write(result: dict, est: Estimates, out: Path, eff: Effective | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    js = out / "probe.json"
    js.write_text(json.dumps(result, indent=2, allow_nan=False))
    return [js, plot_sigma2(est, out / "sigma2.png", eff)]

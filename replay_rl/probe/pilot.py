"""The pilot over N, for when the probe cannot recommend (issue 30, item 5): `replay-rl probe --pilot`.

A coarse grid of real `replay-rl train` runs on the user's config, at its split W/T (so every N costs the same
compute a step and runs the same steps): N ∈ {the probe's horizon N, 10B, --max-capacity} × lr ∈ {config lr,
lr/2} × 2 seeds. It states before it starts what it costs and what difference it can resolve, then recommends the
largest N not clearly worse than the best.
    criterion   A_N = area under pass@1 against compute over the common budget (trapezoid, raw evals) / budget: a
                mean over every eval, so its noise falls as 1/√evals, where a reach or a final score rests on a few
                evals. Each N's LR is chosen on held-out seeds (study.side_curve), so the luckier LR flatters no N.
    noise       before: eval noise only, σ_e = √(p(1−p)/E) per eval (binomial over E problems, p = ½ the worst case),
                SE(A) = σ_e·√Σw² a seed, w the trapezoid weights of the evals after step 0 (step 0 is one model for
                every run); after: the pooled seed-to-seed variance of A over the (N, lr) cells (training noise
                included), never below that eval-noise floor at the measured mean accuracy.
    resolvable  (z_{1−(1−level)/2} + z_power)·SE(A_N − A_best): the true difference found at `level` (two-sided)
                with probability `power`; t quantiles on the pooled degrees of freedom after the runs.
    rule        N is clearly worse when A_N − A_best + t·SE < 0; the pilot recommends the largest N that is not.
Core module: numpy and the config; Ray only inside `run_arms`, which trains.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.metrics import read_metrics
from replay_rl.probe.drift import drift_lines, lr_bracket
from replay_rl.analysis.study import Curve, Side, budget_grid, side_curve, t_quantile

SEEDS = 2
LEVEL, POWER = 0.9, 0.8  # the study's two-sided 90%; 80% power for the difference stated up front
WORST_P = 0.5            # the eval accuracy at which binomial noise is largest


@dataclass(frozen=True)
class Arm:
    capacity: int
    lr: float
    seed: int
    cfg: RunConfig


def horizon_capacity(result: dict) -> float:
    """N at the probe's horizon: the rollouts of its H learner versions at the config's split, H·R."""
    return result["run"]["horizon"] * result["run"]["rollouts_per_step"]


def capacities(result: dict, batch_size: int, multiple: int, max_capacity: int) -> list[int]:
    """The grid over N: the probe's horizon N, 10B and max_capacity, each ≥ B and rounded up to a multiple of the
    learner ranks, duplicates dropped."""
    up = lambda n: max(batch_size, math.ceil(n / multiple - 1e-9) * multiple)  # noqa: E731
    return sorted({up(horizon_capacity(result)), up(10 * batch_size), up(max_capacity)})


def arms(cfg: RunConfig, config: str | None, overrides: list[str], caps: list[int], out: Path, steps: int,
         seeds: int = SEEDS) -> list[Arm]:
    """Every run of the grid: out/N{n}/lr{lr}/seed{s}, the config with only N, lr, seed and steps changed."""
    return [Arm(n, lr, s, RunConfig.load(config, [*overrides, f"replay.capacity={n}", f"learner.lr={lr}",
                                                  f"run.steps={steps}", f"run.seed={cfg.run.seed + s}",
                                                  f"run.output_dir={out / f'N{n}' / f'lr{lr:g}' / f'seed{s}'}"]))
            for n in caps for lr in (cfg.learner.lr, cfg.learner.lr / 2) for s in range(seeds)]


def eval_steps(steps: int, every: int) -> list[int]:
    """The steps a run evaluates at: 0, every k, and the last."""
    return sorted({0, *range(every, steps + 1, every), steps})


def auc_weights(x) -> np.ndarray:
    """Trapezoid weights of points x for the mean of a curve over [x_0, x_last]: Σ w·y = ∫y dx / (x_last − x_0)."""
    x = np.asarray(x, float)
    w = np.zeros(len(x))
    w[:-1] += np.diff(x) / 2
    w[1:] += np.diff(x) / 2
    return w / (x[-1] - x[0])


def eval_noise(eval_prompts: int, p: float = WORST_P) -> float:
    """Standard deviation of greedy pass@1 over eval_prompts problems at accuracy p."""
    return math.sqrt(p * (1 - p) / eval_prompts)


def area_se(x, eval_prompts: int, p: float = WORST_P) -> float:
    """SE of one seed's area A from eval noise alone, evals at x (steps or compute; step 0 carries none)."""
    return eval_noise(eval_prompts, p) * float(np.sqrt(np.sum(auc_weights(x)[1:] ** 2)))


def _q(prob: float, df: int | None) -> float:
    return NormalDist().inv_cdf(prob) if df is None else t_quantile(prob, max(df, 1))


def resolvable(se_diff: float, df: int | None = None, level: float = LEVEL, power: float = POWER) -> float:
    """The true difference in A found at `level` (two-sided) with probability `power` (module doc)."""
    return (_q((1 + level) / 2, df) + _q(power, df)) * se_diff


def step_rate(result: dict) -> tuple[float, str]:
    """Seconds per learner step measured by the probe's loop, and what that rate leaves out."""
    run = result["run"]
    return (run["seconds"]["steps"] / max(run["steps"], 1),
            f"the probe's {run['steps']} steps here, in one process: the trainer's start-up and evals not included")


def plan(result: dict, grid: list[Arm], eval_prompts: int, eval_every: int) -> dict:
    """What the pilot states before it starts: its grid, its cost and the difference it can resolve."""
    steps = grid[0].cfg.run.steps
    rate, source = step_rate(result)
    seeds = len({a.seed for a in grid})
    se = area_se(eval_steps(steps, eval_every), eval_prompts) * math.sqrt(2 / seeds)
    return {"capacities": sorted({a.capacity for a in grid}), "lrs": sorted({a.lr for a in grid}, reverse=True),
            "seeds": seeds, "runs": len(grid), "steps": steps, "learner_steps": len(grid) * steps,
            "seconds_per_step": rate, "rate_source": source, "wall_s": len(grid) * steps * rate,
            "eval_noise": eval_noise(eval_prompts), "evals": len(eval_steps(steps, eval_every)),
            "eval_prompts": eval_prompts, "resolvable_area": resolvable(se), "level": LEVEL, "power": POWER}


def area(curve: Curve, grid: np.ndarray) -> float:
    """A: the raw evals' mean over the budget grid (trapezoid); NaN when the run ends before the grid does."""
    v = curve.smoothed(grid, np.asarray)
    return float(np.sum(auc_weights(grid) * v))


def decide(sides: dict[int, Side], eval_prompts: int, level: float = LEVEL) -> dict:
    """The pilot's verdict from each N's {lr: seeds' curves} (module doc): A_N with each N's LR chosen on held-out
    seeds, the difference to the best N with its interval, clearly worse or not, and the largest N not clearly
    worse."""
    grid = budget_grid(list(sides.values()))
    areas = {n: np.array([[area(c, grid) for c in curves] for curves in side.values()]) for n, side in sides.items()}
    value, label = {}, {}
    for n, a in areas.items():
        v, lab = side_curve(a[:, :, None], list(range(a.shape[1])))
        value[n], label[n] = float(v[0]), list(sides[n])[int(lab[0])]
    cells = [row[np.isfinite(row)] for a in areas.values() for row in a]
    df = sum(len(c) - 1 for c in cells if len(c) > 1)
    var_seed = sum(float(((c - c.mean()) ** 2).sum()) for c in cells if len(c) > 1) / df if df else 0.0
    p_hat = float(np.nanmean(np.concatenate([a.ravel() for a in areas.values()])))
    # A is the trapezoid over a run's own evals (the grid holds them all): their weights, not the grid's, set its noise
    own = next(iter(next(iter(sides.values())).values()))[0].compute
    floor = area_se(own[own <= grid[-1]], eval_prompts, min(max(p_hat, 0.0), 1.0)) ** 2
    var = max(var_seed, floor)
    best = max(value, key=value.get)
    seeds = {n: a.shape[1] for n, a in areas.items()}
    rows = []
    for n in sorted(sides):
        se = math.sqrt(var * (1 / seeds[n] + 1 / seeds[best]))
        half = _q((1 + level) / 2, df or None) * se
        diff = value[n] - value[best]
        rows.append({"capacity": n, "lr": label[n], "area": value[n], "diff": diff, "ci": [diff - half, diff + half],
                     "clearly_worse": n != best and diff + half < 0, "resolvable": resolvable(se, df or None, level)})
    keep = [r["capacity"] for r in rows if not r["clearly_worse"]]
    return {"budget": float(grid[-1]), "best": best, "recommended": max(keep), "rows": rows, "df": df,
            "seed_sd": math.sqrt(var_seed), "eval_floor_sd": math.sqrt(floor), "mean_accuracy": p_hat,
            "level": level}


def command(result: dict) -> str:
    """The pilot's command line for this probe.json: its config, overrides and folder."""
    parts = ["replay-rl probe --pilot"] + ([f"-c {shlex.quote(result['config'])}"] if result.get("config") else [])
    parts += [f"-s {shlex.quote(o)}" for o in result.get("overrides", [])]
    parts += [f"--out {shlex.quote(result['run']['out'])}"] if result["run"].get("out") else []
    return " ".join(parts + [f"--max-capacity {20 * result['run']['batch_size']}"])


def plan_lines(p: dict, result: dict, config_capacity: int) -> list[str]:
    w, t = result["run"]["split"]
    return [f"pilot: N ∈ {p['capacities']} at W/T {w}/{t} × lr {p['lrs']} × {p['seeds']} seeds = {p['runs']} runs × "
            f"{p['steps']} steps = {p['learner_steps']} learner steps",
            f"pilot: cost ≥ {p['learner_steps']} × {p['seconds_per_step']:.2f} s = {p['wall_s'] / 60:.1f} min (rate: "
            f"{p['rate_source']}; re-estimated from the pilot's own runs as they finish)",
            "pilot: criterion: area under pass@1 against compute over the common budget, each N at the LR best on "
            "its other seed (replay_rl/probe/pilot.py)",
            f"pilot: resolves a difference in area of {p['resolvable_area']:.3f} ({p['level']:.0%} two-sided, "
            f"{p['power']:.0%} power) from eval noise alone: σ = {p['eval_noise']:.4f} an eval (binomial, p = ½, "
            f"{p['eval_prompts']} problems), {p['evals']} evals, {p['seeds']} seeds a side; seed-to-seed noise adds "
            "to it and is measured after the runs",
            "pilot: rule: the largest N whose area is not clearly below the best N's (its interval on the difference "
            "reaches 0)", *drift_lines(result, p["capacities"], config_capacity)]


def verdict_lines(d: dict) -> list[str]:
    lines = [f"pilot: over the common budget {d['budget']:.0f} (compute), mean pass@1 {d['mean_accuracy']:.3f}; "
             f"noise of an area a seed {max(d['seed_sd'], d['eval_floor_sd']):.4f} (seeds {d['seed_sd']:.4f} on "
             f"{d['df']} df, eval floor {d['eval_floor_sd']:.4f})",
             f"{'N':>8} {'lr':>9} {'area':>7} {'Δ vs best':>10} {d['level']:.0%} interval{'':>8}resolvable"]
    for r in d["rows"]:
        mark = "best" if r["capacity"] == d["best"] else "clearly worse" if r["clearly_worse"] else "not worse"
        ci = "(the reference)" if mark == "best" else f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
        lines.append(f"{r['capacity']:>8} {r['lr']:>9.3g} {r['area']:>7.3f} {r['diff']:>+10.3f} {ci:<17} "
                     f"{r['resolvable']:.3f}  {mark}")
    rec = next(r for r in d["rows"] if r["capacity"] == d["recommended"])
    return lines + [f"pilot: recommends N = {rec['capacity']}, the largest N not clearly worse than the best "
                    f"(N = {d['best']}); paste: -s replay.capacity={rec['capacity']} -s learner.lr={rec['lr']:.3g}"]


def finished_curve(cfg: RunConfig) -> Curve | None:
    """A run's eval curve up to its steps once it reached them (replay_stats.json written at its loop's end)."""
    out = Path(cfg.run.output_dir)
    if not (out / "replay_stats.json").is_file():
        return None
    rows = [r for r in read_metrics(out / "metrics.jsonl", "eval") if r["step"] <= cfg.run.steps]
    if not rows or rows[-1]["step"] < cfg.run.steps:
        return None
    return Curve(np.array([r["ledger/compute"] for r in rows]), np.array([r["eval/pass@1"] for r in rows]))


class ArmFailed(RuntimeError):
    """A pilot run that failed; its folder's error.log holds the traceback and its restarts' causes."""

    def __init__(self, arm: Arm, cause: Exception) -> None:
        super().__init__(f"N={arm.capacity} lr {arm.lr:g} seed {arm.seed}")
        self.arm, self.cause = arm, cause


def run_arms(grid: list[Arm], log, connect, train) -> dict[int, Side]:
    """Train every arm not finished in its folder (one Ray session for all), then read each one's curve.
    connect, train: the driver's (the CLI passes them in: the probe sits below the driver)."""
    owns = connect(grid[0].cfg)
    t0, trained = time.monotonic(), 0
    try:
        for i, arm in enumerate(grid):
            if finished_curve(arm.cfg) is None:
                try:
                    train(arm.cfg.model_copy(update={"run": arm.cfg.run.model_copy(update={"overwrite": True})}))
                except Exception as e:  # noqa: BLE001 - named by its arm: the finished arms stay for a rerun
                    raise ArmFailed(arm, e) from e
                trained += 1
            left = sum(finished_curve(a.cfg) is None for a in grid[i + 1:])
            spent = time.monotonic() - t0
            log(f"pilot: [{i + 1}/{len(grid)}] N={arm.capacity} lr {arm.lr:g} seed {arm.seed} done; {spent / 60:.1f} "
                f"min so far, ~{spent / max(trained, 1) * left / 60:.1f} min left at the rate measured so far")
    finally:
        if owns:
            import ray

            ray.shutdown()
    sides: dict[int, Side] = {}
    for arm in grid:
        sides.setdefault(arm.capacity, {}).setdefault(arm.lr, []).append(finished_curve(arm.cfg))
    return sides


def pilot(cfg: RunConfig, config: str | None, overrides: list[str], result: dict, out: Path,
          max_capacity: int | None, steps: int | None, plan_only: bool, echo, log, driver=None) -> dict:
    """Plan, state, run and decide; writes out/pilot.json. echo: the terminal; log: progress; driver: the
    (connect, train) pair that trains the arms (unused with plan_only)."""
    b = cfg.learner.batch_size
    caps = capacities(result, b, cfg.cluster.learners, max_capacity or 20 * b)
    grid = arms(cfg, config, overrides, caps, out, steps or cfg.run.steps)
    p = plan(result, grid, cfg.run.eval_prompts, cfg.run.eval_every)
    for line in plan_lines(p, result, cfg.replay.capacity):
        echo(line)
    report = {"plan": p, "probe_status": result["status"],
              "drift": [lr_bracket(result, n, cfg.replay.capacity) for n in caps]}
    if not plan_only:
        report["decision"] = decide(run_arms(grid, log, *driver), cfg.run.eval_prompts)
        for line in verdict_lines(report["decision"]):
            echo(line)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pilot.json").write_text(json.dumps(report, indent=1))
    return report

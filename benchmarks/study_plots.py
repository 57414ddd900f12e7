"""The compute-saved study's pictures: accuracy against paper-compute (Fig. 1 style) and against generated tokens,
entropy against steps, and a map of compute saved % over (μ, replay ratio). Returns the paths written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compute_saved import BASELINE, PAPER_MU, curve


def _band(ax, x_runs: list[np.ndarray], y_runs: list[np.ndarray], label: str) -> None:
    """Median and IQR over seeds, on the first run's x grid (runs of one config share their eval schedule)."""
    n = min(len(y) for y in y_runs)
    x = np.median([xr[:n] for xr in x_runs], axis=0)
    ys = np.array([y[:n] for y in y_runs])
    ax.plot(x, np.median(ys, 0), marker=".", label=label)
    ax.fill_between(x, np.percentile(ys, 25, 0), np.percentile(ys, 75, 0), alpha=0.2)


def plot_all(results: dict[str, list[dict]], table: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at_paper_mu = {n: r for n, r in results.items() if abs(r[0]["mu"] - PAPER_MU) < 1e-9}
    paths = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(str(out / name))

    def bands(name: str, x_of, y_of, xlabel: str, ylabel: str, title: str) -> None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for config, runs in at_paper_mu.items():
            _band(ax, [np.asarray(x_of(r), float) for r in runs], [np.asarray(y_of(r), float) for r in runs], config)
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.legend(fontsize=7)
        save(fig, name)

    bands("accuracy_vs_compute.png", lambda r: curve(r).compute, lambda r: r["pass@1"],
          f"compute (trainer-step equivalents, μ={PAPER_MU})", "held-out greedy pass@1",
          "accuracy vs compute: median and IQR over seeds")
    bands("accuracy_vs_tokens.png", lambda r: r["tokens"], lambda r: r["pass@1"], "generated completion tokens",
          "held-out greedy pass@1", "accuracy vs generation")
    bands("entropy_vs_steps.png", lambda r: r["train_steps"], lambda r: r["entropy"], "learner step",
          "entropy of training batches (nats/token)", "entropy vs steps")

    fig, ax = plt.subplots(figsize=(6, 4.5))
    pts = [(t["mu"], t["replay_ratio_median"], t["compute_saved_pct"], n) for n, t in table.items() if n != BASELINE]
    seen: dict[tuple[float, float], int] = {}
    for mu, y, saved, name in pts:
        dup = seen[(mu, round(y, 1))] = seen.get((mu, round(y, 1)), -1) + 1  # configs differing only in N
        shown = -100.0 if saved is None else saved  # never reached the baseline: bottom of the scale
        sc = ax.scatter([mu + 0.08 * dup], [y], c=[shown], cmap="RdYlGn", vmin=-100, vmax=100, s=120, edgecolors="k")
        ax.annotate(f"{name}: {'not reached' if saved is None else f'{saved:.0f}%'}", (mu, y), fontsize=6,
                    xytext=(8, 4 - 10 * dup), textcoords="offset points")
    if pts:
        fig.colorbar(sc, ax=ax, label="compute saved % vs baseline")
    ax.margins(x=0.3, y=0.15)  # room for the labels
    ax.set(xlabel="μ (generation / training cost of a batch)", ylabel="measured replay ratio (samples / insert)",
           title="where replay pays")
    save(fig, "saved_map.png")
    return paths



"""The compute-saved study's pictures: accuracy against paper-compute with each side's LR frontier (Figs. 1 and 4),
accuracy against generated tokens, entropy and batch reward against compute and pass@k at each row's best
LR, compute saved over accuracy targets, the compute saved over
(learning rate, N), and local diversity (overlap with the previous batch, steps between two uses). Returns the
paths written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replay_rl.study.table import BASELINE, PAPER_MU, on_policy


def _band(ax, x_runs: list[np.ndarray], y_runs: list[np.ndarray], label: str) -> None:
    """Median and IQR over seeds, on the first run's x grid (runs of one config share their eval schedule)."""
    n = min(len(y) for y in y_runs)
    x = np.median([xr[:n] for xr in x_runs], axis=0)
    ys = np.array([y[:n] for y in y_runs])
    ax.plot(x, np.median(ys, 0), marker="." if n <= 60 else None, lw=1 if n > 60 else 1.5, label=label)
    ax.fill_between(x, np.percentile(ys, 25, 0), np.percentile(ys, 75, 0), alpha=0.2)


def train_compute(run: dict) -> np.ndarray:
    """Compute at each learner step: the evals' compute interpolated over steps (the pace makes it linear)."""
    return np.interp(run["train_steps"], run["steps"], run["compute"])


def saved_vs_target(plt, headline: dict):
    """Compute saved to first reach each accuracy target, with its 90% interval (an open bound drawn to the edge)."""
    t = headline["targets"]
    x = np.array([r["target"] for r in t])
    y = np.array([np.nan if r["saved_pct"] is None else r["saved_pct"] for r in t])
    lo = np.array([-100 if r["saved_pct_ci"][0] is None else r["saved_pct_ci"][0] for r in t])
    hi = np.array([100 if r["saved_pct_ci"][1] is None else r["saved_pct_ci"][1] for r in t])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(x, y, "g.-", label="compute saved (buffer frontier vs baseline frontier)")
    ax.fill_between(x, np.where(np.isnan(y), np.nan, lo), np.where(np.isnan(y), np.nan, hi), color="g", alpha=0.2,
                    label="90% jackknife-t interval")
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xlabel="accuracy target (held-out greedy pass@1)", ylabel="compute saved %", ylim=(-100, 100),
           title="compute saved to first reach each target (LR chosen on held-out seeds)")
    ax.legend(fontsize=7)
    return fig


def pass_at_k_plot(plt, at_best: dict):
    """pass@k against k at equal compute (a third, two thirds and all of the budget every row reached; each run's
    pass@k interpolated there), each row at its best LR, median over seeds."""
    top = min(r["compute"][-1] for runs in at_best.values() for r in runs)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    for ax, budget in zip(axes, (top / 3, 2 * top / 3, top)):
        for name, runs in at_best.items():
            ks = sorted(int(k) for k in runs[0]["pass_at_k"])
            at = [np.median([np.interp(budget, r["compute"], r["pass_at_k"][str(k)]) for r in runs]) for k in ks]
            ax.plot(ks, at, marker="o", label=name)
        ax.set(xscale="log", xlabel="k", title=f"compute {budget:.0f}")
    axes[0].set_ylabel("sampled pass@k (median over seeds)")
    axes[0].legend(fontsize=7)
    fig.suptitle("pass@k at equal compute from run.eval_k samples a problem (k = 1: their mean, not greedy), "
                 "each row at its best LR")
    return fig


def plot_all(results: dict[str, list[dict]], table: dict, curves: dict, headline: dict, headline_curves: dict,
             out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at_paper_mu = [n for n in results if abs(table[n]["mu"] - PAPER_MU) < 1e-9]
    at_best = {n: [r for r in results[n] if f"{r['lr']:g}" == table[n]["best_lr"]] for n in at_paper_mu}
    paths = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(str(out / name))

    fig, ax = plt.subplots(figsize=(8, 5))
    base = curves[BASELINE]
    ax.plot(base["grid"], base["base_curve"], "k-", lw=2.5, label="baseline frontier (best LR per budget)")
    for name in at_paper_mu:
        if name != BASELINE:
            ax.plot(curves[name]["grid"], curves[name]["cfg_curve"], lw=1.2, label=f"{name} frontier")
    if headline:
        ax.plot(headline_curves["grid"], headline_curves["cfg_curve"], "g--", lw=2.5,
                label=f"headline buffer frontier ({', '.join(headline['rows'])})")
        ax.axhline(headline["threshold"], color="grey", ls=":",
                   label=f"98% of the baseline frontier's best ({headline['threshold']:.3f})")
    ax.set(xlabel=f"compute (trainer-step equivalents, μ={PAPER_MU})", ylabel="held-out greedy pass@1 (seeds smoothed, "
           "LR chosen on held-out seeds)", title="accuracy vs compute: frontiers over learning rates")
    ax.legend(fontsize=7)
    save(fig, "accuracy_vs_compute.png")

    def bands(name: str, x_of, y_of, xlabel: str, ylabel: str, title: str) -> None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for config, runs in at_best.items():
            _band(ax, [np.asarray(x_of(r), float) for r in runs], [np.asarray(y_of(r), float) for r in runs],
                  f"{config} (lr {table[config]['best_lr']})")
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.legend(fontsize=7)
        save(fig, name)

    bands("accuracy_vs_tokens.png", lambda r: r["tokens"], lambda r: r["pass@1"], "generated completion tokens",
          "held-out greedy pass@1", "accuracy vs generation, each row at its best LR (median, IQR)")
    # at equal compute: replay takes ~2.4x more (smaller) steps for the same compute, so a steps axis misleads
    bands("entropy_vs_compute.png", train_compute, lambda r: r["entropy"], f"compute (μ={PAPER_MU})",
          "entropy of training batches (nats/token)", "entropy vs compute, each row at its best LR")
    if all("reward" in r for runs in at_best.values() for r in runs):
        bands("reward_vs_compute.png", train_compute, lambda r: r["reward"], f"compute (μ={PAPER_MU})",
              "mean reward of training batches", "batch reward vs compute, each row at its best LR")
    if headline and headline.get("targets"):
        save(saved_vs_target(plt, headline), "saved_vs_target.png")
    if all(r.get("pass_at_k") for runs in at_best.values() for r in runs):
        save(pass_at_k_plot(plt, at_best), "pass_at_k.png")

    # compute saved over (LR, N): every row at μ=5.28 (its sampler in its label) against the baseline frontier
    rows = sorted((table[n]["capacity"], n) for n in at_paper_mu if n != BASELINE)
    lrs = sorted({float(lr) for _, n in rows for lr in table[n]["by_lr"]})
    if rows and lrs:
        grid = np.full((len(rows), len(lrs)), np.nan)
        fig, ax = plt.subplots(figsize=(1.6 * len(lrs) + 3, 0.7 * len(rows) + 2))
        for i, (_, n) in enumerate(rows):
            for lr, d in table[n]["by_lr"].items():
                j, s = lrs.index(float(lr)), d["saved_vs_base_frontier_pct"]
                grid[i, j] = -100 if s is None else s
                ax.text(j, i, "not\nreached" if s is None else f"{s:.0f}%", ha="center", va="center", fontsize=8)
        im = ax.imshow(grid, cmap="RdYlGn", vmin=-100, vmax=100, aspect="auto")
        fig.colorbar(im, ax=ax, label="compute saved % vs baseline frontier")
        ax.set_xticks(range(len(lrs)), [f"{lr:g}" for lr in lrs])
        ax.set_yticks(range(len(rows)), [f"{row_n(table[n])} ({n})" for _, n in rows], fontsize=7)
        ax.set(xlabel="learning rate",
               title="compute saved to reach 98% of the baseline frontier's best (blank: not run)")
        save(fig, "saved_map.png")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name, runs in at_best.items():
        if name == BASELINE:
            continue
        steps = [np.asarray([x for x in r["overlap_prev"] if x is not None], float) for r in runs]
        if all(len(s) for s in steps):
            n = min(len(s) for s in steps)
            med = np.median([s[:n] for s in steps], 0)
            w = min(25, n)  # a 25-step running mean: per step the share jumps with each insert
            a1.plot(np.arange(w - 1, n), np.convolve(med, np.ones(w) / w, "valid"), lw=1.2, label=name)
        h = np.sum([np.asarray(r["since_last_use_hist"], float) for r in runs], axis=0)
        if h.sum():
            a2.plot(np.arange(len(h)), h / h.sum(), marker=".", label=name)
    a1.set(xlabel="learner step", ylabel="share of the batch in the previous batch",
           title="buffer/overlap_prev (25-step mean)", ylim=(0, 1))
    a2.set(xlabel="learner steps between two uses of a rollout", ylabel="share of reuses", xscale="symlog",
           title="since-last-use distribution")
    for a in (a1, a2):
        a.legend(fontsize=7)
    save(fig, "diversity.png")
    return paths


def row_n(row: dict) -> str:
    """A row's buffer for a label: N=capacity, or "once" for an on-policy row (its capacity bounds a backlog)."""
    return "once" if on_policy(row) else f"N={row['capacity']}"

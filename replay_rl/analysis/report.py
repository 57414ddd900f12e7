"""Pictures of one or more runs, from the files a run writes (metrics.jsonl, replay_stats.json, config.json):
accuracy, the learner's batch statistics, the buffer's age and reuse, the compute ledger and weight sync, and
(rules.png) the adaptive reuse rules' signals and actions when a run used any.
Several runs share axes, labelled by their folder names. `replay-rl report` and the end of `train` call this."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replay_rl.metrics import read_metrics

PLOTS = ("accuracy.png", "learner.png", "buffer.png", "ledger.png")
# the adaptive reuse rules' signals and actions (rules.png), drawn when a run logged any of them
RULE_PANELS = (("reuse/capacity|reuse/schedule_capacity", "train", "sampling window (rollouts, all shards)"),
               ("reuse/grad_norm|reuse/entropy_drop", "train", "controller signal"),
               ("reuse/signal_z", "train", "signal z-score vs recent calm steps"),
               ("reuse/controller_scale|reuse/controller_action", "train", "controller scale; action −1/0/+1"),
               ("trust/m2|trust/m2_max", "train", "trust region: mean (log ρ)², largest rollout's"),
               ("trust/masked_fraction|trust/ess", "train", "trust region: masked token share; rollout ESS"))


@dataclass
class RunRecord:
    name: str
    train: list[dict]
    evals: list[dict]
    stats: dict | None  # replay_stats.json: absent until a run finishes
    eval_k: int

    @classmethod
    def load(cls, run_dir: Path) -> "RunRecord":
        metrics = run_dir / "metrics.jsonl"
        if not metrics.is_file():
            raise FileNotFoundError(f"{run_dir}: no metrics.jsonl; pass a run folder (run.output_dir)")
        stats = run_dir / "replay_stats.json"
        config = run_dir / "config.json"
        k = json.loads(config.read_text())["run"]["eval_k"] if config.is_file() else 4
        return cls(run_dir.resolve().name, read_metrics(metrics, "train"), read_metrics(metrics, "eval"),
                   json.loads(stats.read_text()) if stats.is_file() else None, k)

    def series(self, key: str, rows: str = "train") -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of `key` over the rows that carry it."""
        src = self.train if rows == "train" else self.evals
        pts = [(r["step"], r[key]) for r in src if r.get(key) is not None]
        return (np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)) if pts else \
            (np.zeros(0), np.zeros(0))


def accuracy_panels(k: int) -> list[tuple[str, str, str]]:
    """Greedy pass@1 beside the sampled pass@k; at k = 1 that is eval/pass@1_sampled (eval/pass@1 is greedy)."""
    sampled = f"eval/pass@{k}" if k > 1 else "eval/pass@1_sampled"
    return [("eval/pass@1", "eval", "pass@1 (greedy)"), (sampled, "eval", f"pass@{k} (sampled)")]


def write_report(run_dirs: list[str | Path], out: str | Path) -> list[Path]:
    """Write the PNGs for `run_dirs` into `out`; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [RunRecord.load(Path(d)) for d in run_dirs]
    if len({r.name for r in runs}) < len(runs):  # seed0, seed0: label by parent/name
        for run, d in zip(runs, run_dirs):
            run.name = "/".join(Path(d).resolve().parts[-2:])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def grid(name: str, panels: list[tuple[str, str, str]], title: str) -> None:
        """panels: (metric keys separated by '|', rows 'train' | 'eval', y label); a line per run and key."""
        cols = 2 if len(panels) > 1 else 1
        fig, axes = plt.subplots((len(panels) + 1) // cols, cols, figsize=(6 * cols, 3.2 * ((len(panels) + 1) // cols)),
                                 squeeze=False)
        for ax, (keys, rows, ylabel) in zip(axes.flat, panels):
            for run in runs:
                for key in keys.split("|"):
                    x, y = run.series(key, rows)
                    label = run.name if "|" not in keys else f"{run.name} {key}"
                    ax.plot(x, y, marker="." if rows == "eval" else None, lw=1.2, label=label)
            if "|" in keys:
                ax.legend(fontsize=7)
            ax.set_xlabel("learner step")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        axes.flat[0].legend(fontsize=8)
        fig.suptitle(title)
        save(fig, name)

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)

    grid("accuracy.png", accuracy_panels(runs[0].eval_k),
         "held-out accuracy (step 0 = the model RL started from)")
    grid("learner.png", [("batch/reward_mean", "train", "batch reward"),
                         ("batch/entropy", "train", "entropy (nats/token)"), ("batch/loss", "train", "loss"),
                         ("batch/clip_fraction", "train", "clip fraction"),
                         # GRPO learns nothing from a group whose rewards are all equal, though it fills batch slots:
                         # the trained rows' share, and the fresh groups' since the start (cumulative); beside them
                         # the share of groups made from a replayed prompt (generation.prompt_replay), which aims at
                         # the prompts whose groups differ
                         ("batch/zero_variance_share|ledger/zero_variance_share_fresh|ledger/prompt_replay_share",
                          "train", "zero-variance and prompt-replayed shares")], "learner batches")
    buffer_plot(runs, plt, save)
    grid("ledger.png", [("ledger/compute", "train", "compute (trainer-step equivalents)"),
                        ("buffer/replay_ratio", "train", "replay ratio (samples / inserts)"),
                        ("ledger/mu|ledger/gamma", "train", "μ and γ = (1+W/T)/(1+μ)"),
                        ("sync/publish_s", "train", "weight publish (s)")], "compute ledger and weight sync")
    rules = [p for p in RULE_PANELS if any(run.series(key)[0].size for run in runs for key in p[0].split("|"))]
    if rules:
        grid("rules.png", rules, "adaptive reuse rules: signals and actions")
    return written


def buffer_plot(runs: list[RunRecord], plt, save) -> None:
    """Age of the rollouts sampled, per step and over the run, and how often a rollout was used before eviction."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.4))
    for run in runs:
        axes[0].plot(*run.series("batch/age_mean"), lw=1.2, label=run.name)
        if run.stats:
            for ax, key in ((axes[1], "age_hist"), (axes[2], "reuse_hist")):
                hist = np.asarray(run.stats[key], float)
                # the last bin counts everything above it: with it filled (N = 20B here) there is no bin after it
                top = min(max(int(np.flatnonzero(hist).max()) + 2 if hist.any() else 2, 3), len(hist))
                ax.step(np.arange(top), hist[:top] / max(hist.sum(), 1), where="mid", label=run.name)
    labels = [("learner step", "batch age (versions)"), ("age when sampled (versions)", "share of samples"),
              ("times used before eviction", "share of evicted rollouts")]
    for ax, (xlabel, ylabel) in zip(axes, labels):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("replay buffer: staleness and reuse")
    save(fig, "buffer.png")

"""TRL beside our runs on the SmolLM2 preset's task (issue 42, item 4): held-out greedy pass@1 against learner steps,
rollouts generated, the compute ledger and wall-clock seconds, from TRL's evals.json (benchmarks/peer_trl.py) and
our runs' metrics.jsonl (`replay-rl train -c configs/smollm2_135m_cpu.yaml ...`). Writes a table and a plot.

    python benchmarks/peer_compare.py --trl DIR/seed0 --ours on-policy=RUN1 replay=RUN2 --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from replay_rl.metrics import read_metrics  # noqa: E402

AXES = (("step", "learner step"), ("rollouts", "rollouts generated"), ("compute", "compute (trainer-step equivalents)"),
        ("wall_s", "wall-clock s (this box)"))


def ours(run: Path) -> list[dict]:
    return [{"step": r["step"], "pass@1": r["eval/pass@1"], "pass@1_sampled": r["eval/pass@1_sampled"],
             "rollouts": r["ledger/k_inf"], "compute": r["ledger/compute"], "wall_s": r["ledger/wall_s"],
             "cut": r.get("eval/truncated_share")} for r in read_metrics(run / "metrics.jsonl", "eval")]


def trl(folder: Path) -> list[dict]:
    got = json.loads((folder / "evals.json").read_text())
    per_step = got["train_s"] / max(e["step"] for e in got["evals"])  # training time only: evals ran after it
    return [{"step": e["step"], "pass@1": e["pass@1"], "pass@1_sampled": e["pass@1_sampled"],
             "rollouts": e["rollouts"], "compute": e["compute"], "wall_s": e["step"] * per_step,
             "cut": e.get("truncated_share")} for e in got["evals"]]


def cut(row: dict) -> str:
    return "" if row["cut"] is None else f"{row['cut']:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trl", nargs="+", required=True, help="peer_trl.py seed folders")
    ap.add_argument("--ours", nargs="+", required=True, help="LABEL=RUN_DIR of our runs")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    curves = {f"TRL GRPOTrainer ({Path(f).name})": trl(Path(f)) for f in args.trl}
    curves |= {f"replay-rl {label} ({Path(run).name})": ours(Path(run))
               for label, run in (item.split("=", 1) for item in args.ours)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(AXES), figsize=(5 * len(AXES), 3.6))
    for ax, (key, label) in zip(axes, AXES):
        for name, rows in curves.items():
            ax.plot([r[key] for r in rows], [r["pass@1"] for r in rows], marker="o", label=name)
        ax.set_xlabel(label)
        ax.set_ylabel("held-out greedy pass@1")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "side_by_side.png", dpi=100)
    lines = ["| run | step | greedy pass@1 | sampled pass@1 | cut share | rollouts | compute | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in curves.items():
        lines += [f"| {name} | {r['step']} | {r['pass@1']:.3f} | {r['pass@1_sampled']:.3f} | "
                  f"{cut(r)} | {r['rollouts']:.0f} | "
                  f"{r['compute']:.0f} | {r['wall_s']:.0f} |" for r in rows]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "curves.json").write_text(json.dumps(curves, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

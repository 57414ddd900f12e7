"""The lines a person reads at the end of a run: did RL help, what it cost, where it resumed from, where the files
are."""

from __future__ import annotations

from pathlib import Path

from replay_rl.driver.run_folder import step_of
from replay_rl.driver.trackers import look_line
from replay_rl.metrics import read_metrics


def closing_summary(cfg, final: dict) -> str:
    """final: what trainer.train returned (the last train row, output_dir, and resumed_from for a resumed run)."""
    out = Path(final["output_dir"])
    evals = read_metrics(out / "metrics.jsonl", "eval")
    first, last = evals[0], evals[-1]
    lines = [
        f"pass@1 (greedy, {int(last['eval/eval_problems'])} held-out problems): {first['eval/pass@1']:.3f} at step "
        f"{first['step']} → {last['eval/pass@1']:.3f} at step {last['step']}",
        f"compute: {final['ledger/compute']:.0f} trainer-step equivalents = (K_train {final['ledger/k_train']} + "
        f"μ {final['ledger/mu']:.2f} × K_inf {final['ledger/k_inf']}) / B; replay ratio "
        f"{final['buffer/replay_ratio']:.2f}, γ {final['ledger/gamma']:.2f}",
        f"files: {out}/metrics.jsonl, {out}/final_model/ (score it: replay-rl eval {out}/final_model)",
        look_line(cfg, out)]
    if resumed := final.get("resumed_from"):
        # a resumed run's lines would otherwise read as a fresh run's (the step-0 row is the earlier command's)
        at = step_of(Path(resumed))
        lines.insert(0, f"resumed from {resumed}: this command ran steps {at + 1}–{final['step']}; the lines below "
                        f"cover the whole run from step 0")
    return "\n".join(lines)

"""Peak learner memory against learner.micro_batch_tokens: one loss + backward over a rank batch, split as the
learner splits it (learner/batching.py), on a random-init model of SmolLM2-135M's shape (no download).

    python benchmarks/learner_memory.py                       # 8 rollouts × 256 tokens, budgets none/1024/512/256
    python benchmarks/learner_memory.py --rollouts 16 --tokens 512

Each budget runs in its own process, so its peak RSS (ru_maxrss) is its own. Prints JSON, writes a PNG beside it.
Plain torch, no DeepSpeed: the accumulation is the learner's, the ZeRO partitioning (which shards parameters,
gradients and optimizer state, not activations) is not measured here.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SMOLLM2_135M = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    intermediate_size=1536, vocab_size=49152, max_position_embeddings=2048)


def one_budget(rollouts: int, tokens: int, budget: int | None, chunk: int | None) -> dict:
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from replay_rl.config import GrpoLossConfig
    from replay_rl.learner.batching import micro_batches, to_learner_inputs
    from replay_rl.learner.logprobs import final_hidden_states, token_logprobs
    from replay_rl.learner.losses import grpo_loss
    from replay_rl.rollout import Rollout, RolloutBatch

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M))
    rng = np.random.default_rng(0)
    prompt = tokens // 4
    batch = RolloutBatch.from_rollouts([
        Rollout(rng.integers(0, 49152, prompt).astype(np.int32), rng.integers(0, 49152, tokens - prompt).astype(np.int32),
                -rng.random(tokens - prompt).astype(np.float32), 1.0, 0.5, 0.5, True, 0, 0, 0, 0, 0, 0)
        for _ in range(rollouts)])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    parts = micro_batches(batch, budget)
    n_tokens = float(np.diff(batch.completion_offsets).sum())
    for rows in parts:
        inp = to_learner_inputs(batch.take(rows), 0, "cpu", n_tokens, float(len(batch)))
        hidden = final_hidden_states(model, model.lm_head, inp.input_ids, inp.attention_mask)
        logp, _ = token_logprobs(hidden, model.lm_head, inp.input_ids, chunk, mask=inp.loss_mask)
        loss, _ = grpo_loss(GrpoLossConfig(), logp, inp)
        loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"micro_batch_tokens": budget, "logprob_chunk_tokens": chunk, "micro_batches": len(parts),
            "peak_rss_gib": peak / 2**20, "step_extra_gib": (peak - before) / 2**20,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    from replay_rl.config import LearnerConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256, help="prompt + completion tokens per rollout")
    ap.add_argument("--budgets", default="none,1024,512,256")
    ap.add_argument("--logprob-chunk", default=str(LearnerConfig().logprob_chunk_tokens),
                    help="learner.logprob_chunk_tokens (default: the learner's), or none: one lm_head call")
    ap.add_argument("--out", default="runs/bench/learner_memory")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        chunk = None if args.logprob_chunk == "none" else int(args.logprob_chunk)
        print(json.dumps(one_budget(args.rollouts, args.tokens, None if args.one == "none" else int(args.one), chunk)))
        return
    rows = []
    for b in args.budgets.split(","):
        proc = subprocess.run([sys.executable, __file__, "--rollouts", str(args.rollouts), "--tokens", str(args.tokens),
                               "--logprob-chunk", args.logprob_chunk, "--one", b],
                              capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"budget {b}: {rows[-1]['micro_batches']} micro-batches, peak {rows[-1]['peak_rss_gib']:.2f} GiB",
              file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "learner_memory", "model": "SmolLM2-135M shape, random init, fp32",
              "rollouts": args.rollouts, "tokens_per_rollout": args.tokens, "rows": rows}
    (out / "results.json").write_text(json.dumps(report, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [str(r["micro_batch_tokens"] or "whole batch") for r in rows]
    ax.bar(labels, [r["step_extra_gib"] for r in rows])
    ax.set_xlabel("learner.micro_batch_tokens")
    ax.set_ylabel("peak memory added by the step (GiB)")
    ax.set_title(f"{args.rollouts} rollouts × {args.tokens} tokens, SmolLM2-135M shape")
    fig.tight_layout()
    fig.savefig(out / "learner_memory.png", dpi=100)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""Peak learner memory and tokens/s of one loss + backward over a rank batch, for the learner's memory settings
(learner.logprob_chunk_tokens, learner.activation_checkpointing, learner.micro_batch_tokens), split as the learner
splits it (learner/batching.py), on a random-init model of a real model's shape (no download).

    python benchmarks/learner_memory.py                          # SmolLM2-135M shape, 8 rollouts × 256 tokens
    python benchmarks/learner_memory.py --shape qwen3-0.6b --rollouts 2 --settings before,chunked
    python benchmarks/learner_memory.py --settings chunked:512,chunked:256

A setting is NAME[:micro_batch_tokens]: `before` (the full (B, L, V) fp32 logits, as the learner had them),
`chunked` (the learner's default lm_head chunks), `recompute` (chunks + activation checkpointing). Each runs in its
own process, so its peak RSS (ru_maxrss) is its own. A shape whose weights, gradients and Adam state cannot fit in
the free memory is skipped up front with one line. Prints JSON, writes a table and a PNG beside it. Plain torch,
no DeepSpeed: the accumulation is the learner's, the ZeRO partitioning (which shards parameters, gradients and
optimizer state, not activations) is not measured here.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {
    "smollm2-135m": ("llama", dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                   intermediate_size=1536, vocab_size=49152, max_position_embeddings=2048)),
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                 head_dim=128, intermediate_size=3072, vocab_size=151936, max_position_embeddings=4096,
                                 tie_word_embeddings=True)),
}
SETTINGS = {"before": dict(chunk=None, recompute=False), "chunked": dict(chunk="default", recompute=False),
            "recompute": dict(chunk="default", recompute=True)}
DEFAULT_SETTINGS = "before,chunked,recompute,chunked:1024,chunked:512,chunked:256"


def build_model(shape: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, dims = SHAPES[shape]
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **dims))


def one_setting(shape: str, rollouts: int, tokens: int, setting: str, chunk_tokens: int | None) -> dict:
    import numpy as np
    import torch

    from replay_rl.config import GrpoLossConfig, LearnerConfig
    from replay_rl.learner.batching import micro_batches, to_learner_inputs
    from replay_rl.learner.logprobs import final_hidden_states, token_logprobs
    from replay_rl.learner.losses import grpo_loss
    from replay_rl.rollout import Rollout, RolloutBatch

    name, _, budget = setting.partition(":")
    spec, budget = SETTINGS[name], int(budget) if budget else None
    chunk = (chunk_tokens or LearnerConfig().logprob_chunk_tokens) if spec["chunk"] == "default" else None
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = build_model(shape)
    if spec["recompute"]:  # learner.activation_checkpointing, as the engine sets it
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    vocab, rng = model.config.vocab_size, np.random.default_rng(0)
    prompt = tokens // 4
    batch = RolloutBatch.from_rollouts([
        Rollout(rng.integers(0, vocab, prompt).astype(np.int32), rng.integers(0, vocab, tokens - prompt).astype(np.int32),
                -rng.random(tokens - prompt).astype(np.float32), 1.0, 0.5, 0.5, True, 0, 0, 0, 0, 0, 0)
        for _ in range(rollouts)])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    parts = micro_batches(batch, budget)
    n_tokens = float(np.diff(batch.completion_offsets).sum())
    saved = SavedBytes({p.untyped_storage().data_ptr() for p in model.parameters()})
    for rows in parts:
        inp = to_learner_inputs(batch.take(rows), 0, "cpu", n_tokens, float(len(batch)))
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
            hidden = final_hidden_states(model, model.get_output_embeddings(), inp.input_ids, inp.attention_mask)
            logp, _ = token_logprobs(hidden, model.get_output_embeddings(), inp.input_ids, chunk, mask=inp.loss_mask)
        loss, _ = grpo_loss(GrpoLossConfig(), logp, inp)
        loss.backward()
        saved.micro_batch_done()
    seconds, peak = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"setting": setting, "logprob_chunk_tokens": chunk, "activation_checkpointing": spec["recompute"],
            "micro_batch_tokens": budget, "micro_batches": len(parts), "peak_rss_gib": peak / 2**20,
            "step_extra_gib": (peak - before) / 2**20, "saved_for_backward_gib": saved.most / 2**30,
            "seconds": seconds, "tokens_per_s": rollouts * tokens / seconds}


class SavedBytes:
    """What autograd keeps for the backward of the forward (the model's trunk and the log-prob head, not the
    parameters): the bytes of the distinct storages saved, the most over micro-batches. The part of the peak that
    only recomputing (activation checkpointing) or smaller micro-batches can lower. It leaves out the inputs that
    checkpoints keep themselves: the chunked head's (hidden size × 4 bytes a token) and, under activation
    checkpointing, each layer's (as much again a layer)."""

    def __init__(self, parameters: set[int]) -> None:
        self.parameters, self.storages, self.most = parameters, {}, 0

    def pack(self, t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.parameters:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return t

    def micro_batch_done(self) -> None:
        self.most, self.storages = max(self.most, sum(self.storages.values())), {}


def fits(shape: str) -> str | None:
    """Why the shape cannot fit here (fp32 weights, gradients and two Adam moments: 16 bytes a parameter, the
    least a learner step holds), or None."""
    import psutil

    kind, dims = SHAPES[shape]
    h, layers, vocab, inter = dims["hidden_size"], dims["num_hidden_layers"], dims["vocab_size"], dims["intermediate_size"]
    params = vocab * h + layers * (4 * h * h + 3 * h * inter)  # about: attention as 4h², MLP as 3·h·inter
    need, free = 16 * params / 2**30, psutil.virtual_memory().available / 2**30
    return f"{shape} needs ≥ {need:.1f} GiB for its weights and optimizer state; {free:.1f} GiB free" \
        if need > 0.8 * free else None


def markdown(report: dict) -> str:
    lines = [f"{report['model']}, {report['rollouts']} rollouts × {report['tokens_per_rollout']} tokens\n",
             "| setting | lm_head chunk | activation ckpt | micro-batches | peak RSS (GiB) | step extra (GiB) "
             "| saved for backward (GiB) | tokens/s |", "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['setting']} | {r['logprob_chunk_tokens'] or 'none (full logits)'} | "
                     f"{'on' if r['activation_checkpointing'] else 'off'} | {r['micro_batches']} | "
                     f"{r['peak_rss_gib']:.2f} | {r['step_extra_gib']:.2f} | {r['saved_for_backward_gib']:.2f} | "
                     f"{r['tokens_per_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256, help="prompt + completion tokens per rollout")
    ap.add_argument("--settings", default=DEFAULT_SETTINGS, help="NAME[:micro_batch_tokens],... NAME in "
                    + ", ".join(SETTINGS))
    ap.add_argument("--logprob-chunk", type=int, help="learner.logprob_chunk_tokens of the chunked settings "
                    "(default: the learner's)")
    ap.add_argument("--out", default="runs/bench/learner_memory")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one_setting(args.shape, args.rollouts, args.tokens, args.one, args.logprob_chunk)))
        return
    if unknown := [s for s in args.settings.split(",") if s.partition(":")[0] not in SETTINGS]:
        sys.exit(f"--settings: unknown {unknown}; names are {', '.join(SETTINGS)}, each optionally :TOKENS")
    if why := fits(args.shape):
        print(f"skipped: {why}", file=sys.stderr)
        return
    rows = []
    for setting in args.settings.split(","):
        proc = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--rollouts", str(args.rollouts),
                               "--tokens", str(args.tokens), "--one", setting]
                              + (["--logprob-chunk", str(args.logprob_chunk)] if args.logprob_chunk else []), capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"setting {setting}: exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"{setting}: {rows[-1]['micro_batches']} micro-batches, peak {rows[-1]['peak_rss_gib']:.2f} GiB, "
              f"{rows[-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "learner_memory", "model": f"{args.shape} shape, random init, fp32",
              "rollouts": args.rollouts, "tokens_per_rollout": args.tokens, "rows": rows}
    (out / "results.json").write_text(json.dumps(report, indent=1))
    (out / "table.md").write_text(markdown(report))
    plot(report, out / "learner_memory.png")
    print(json.dumps(report, indent=1))


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([r["setting"] for r in report["rows"]], [r["peak_rss_gib"] for r in report["rows"]])
    ax.set_xlabel("setting (NAME[:micro_batch_tokens])")
    ax.set_ylabel("peak RSS of the step's process (GiB)")
    ax.set_title(f"{report['rollouts']} rollouts × {report['tokens_per_rollout']} tokens, {report['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

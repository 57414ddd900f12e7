"""Step-0 pass@1 of a real-model config before any training: is the task in reach (issue 32 asks 0.1–0.6)?

Greedy pass@1 on the first N held-out problems of the config's task, read with the task's own reward and the run's
prompt encoding (model.chat_template), and the share cut at max_new_tokens (scored 0); with --samples n also the
sampled pass@1 from n draws per problem at generation.temperature. The generator is the config's backend
(`-s generation.backend.type=vllm` in the vllm venv); --split train reads training problems instead of held-out
ones, so that a setting chosen from the numbers never looks at the eval set. Appends one JSON row per call to --out.

    nice -n 19 python benchmarks/smollm2_step0.py --model runs/models/smollm2-135m --name chat-just-number \\
        -c configs/smollm2_135m_cpu.yaml -s task.eval_size=200 --problems 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from replay_rl.config import RunConfig
from replay_rl.evaluation.passk import chunks, greedy_scores, score
from replay_rl.generation.backend import SamplingParams
from replay_rl.generation.factory import make_backend
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.tasks import make_task
from replay_rl.tasks.scoring import encode_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF model folder (built once by model.build=smollm2_135m)")
    ap.add_argument("--name", required=True, help="the variant's name in the results")
    ap.add_argument("-c", "--config", type=Path, default=None)
    ap.add_argument("-s", "--set", action="append", default=[], help="a dotted override, as `replay-rl -s`")
    ap.add_argument("--problems", type=int, default=200, help="held-out problems scored")
    ap.add_argument("--start", type=int, default=0, help="skip the first START held-out problems: a long measure runs "
                    "as slices (commands of under 10 min on a shared box), whose rows the summary adds up")
    ap.add_argument("--split", choices=("eval", "train"), default="eval", help="held-out problems, or training "
                    "problems drawn with seed START")
    ap.add_argument("--samples", type=int, default=0, help="draws per problem for the sampled pass@1; 0: greedy only")
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--show", type=int, default=0, help="greedy completions printed, to see how the model answers")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/smollm2_step0/rows.jsonl"))
    args = ap.parse_args()

    cfg = RunConfig.load(args.config, args.set)
    task, tok = make_task(cfg.task, cfg.task.split_seed), load_tokenizer(args.model)
    backend = make_backend(cfg.generation, cfg.model, args.model, bucket_mb=cfg.sync.bucket_mb, seed=cfg.run.seed)
    torch.manual_seed(cfg.run.seed)  # transformers samples from torch's global generator
    chat, cap = cfg.model.chat_template, cfg.generation.max_new_tokens
    problems = task.eval_problems()[args.start:args.start + args.problems] if args.split == "eval" else \
        task.sample_train(args.problems, np.random.default_rng(args.start))
    t0, cut = time.perf_counter(), []
    greedy = greedy_scores(backend, tok, task, problems, cap, args.batch, chat, cut)
    row = {"variant": args.name, "backend": cfg.generation.backend.type, "split": args.split, "start": args.start,
           "problems": len(problems), "distinct": len({p.key for p in problems}),
           "pass@1_greedy": float((greedy >= task.correct_threshold).mean()), "truncated_share": float(np.mean(cut)),
           "greedy_s": round(time.perf_counter() - t0, 1)}
    for p in problems[:args.show]:
        (c,), = backend.generate(encode_prompts(tok, [p], chat), SamplingParams(0.0, 1.0, cap, 1))
        print(f"{p.prompt!r} → {tok.decode(c.token_ids, skip_special_tokens=True)!r} (answer {p.answer})")
    if args.samples:
        t1, params = time.perf_counter(), SamplingParams(cfg.generation.temperature, cfg.generation.top_p, cap,
                                                         args.samples)
        s = np.concatenate([score(task, tok, chunk, backend.generate(encode_prompts(tok, chunk, chat), params))
                            for chunk in chunks(problems, max(1, args.batch // args.samples))])
        row |= {"pass@1_sampled": float((s >= task.correct_threshold).mean()), "samples": args.samples,
                "temperature": cfg.generation.temperature, "rewarded": int((s >= task.correct_threshold).sum()),
                "sampled_s": round(time.perf_counter() - t1, 1)}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    row |= {"max_new_tokens": cap, "chat_template": chat, "overrides": args.set, "config": str(args.config),
            "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

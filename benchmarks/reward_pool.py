"""How long a generator call waits on a slow reward, inline and in task.reward_threads threads.

    python benchmarks/reward_pool.py              # the word-problem example's call shape, a reward that sleeps 0.2 s

A reward that waits (a code sandbox, a verifier service) scores each completion in --sleep seconds. One generator call
of configs/smollm2_word_problems_cpu.yaml is prompts_per_call × group_size completions; this times
tasks.scoring.completion_rewards, the code a generator scores a call with, on such a call (real tokenizer of the
default tiny model, decoded as the generator decodes) at each thread count, --repeats times. Prints JSON, writes
results.json and table.md under --out. What it does not measure: scoring still sits between two generation calls
(it does not overlap the next call's generation).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def time_call(threads: int, sleep_s: float, repeats: int, tokenizer) -> tuple[int, list[float]]:
    from replay_rl.config import RunConfig
    from replay_rl.generation.backend import Completion
    from replay_rl.rollout import FINISH_STOP
    from replay_rl.tasks import make_task
    from replay_rl.tasks.scoring import completion_rewards

    reward = Path(tempfile.mkdtemp()) / "slow_reward.py"
    reward.write_text(f"import time\n\ndef reward(completion, answer, **columns):\n    time.sleep({sleep_s})\n"
                      "    return 1.0 if completion.strip() == answer else 0.0\n")
    cfg = RunConfig.load(str(ROOT / "configs/smollm2_word_problems_cpu.yaml"),
                         [f"task.reward={reward}:reward", f"task.reward_threads={threads}"])
    task = make_task(cfg.task, 0)
    n = cfg.generation.prompts_per_call * cfg.generation.group_size
    ids = np.asarray(tokenizer("12", add_special_tokens=False)["input_ids"], np.int32)
    call = [(p, Completion(ids, np.zeros(len(ids), np.float32), FINISH_STOP, 0)) for p in task.eval_problems()[:n]]
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        completion_rewards(task, tokenizer, call)
        seconds.append(time.perf_counter() - t0)
    return n, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sleep", type=float, default=0.2, help="seconds the reward waits per completion")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reward_pool")
    args = ap.parse_args()
    os.chdir(ROOT)  # the default model's build_dir is relative to the checkout
    from replay_rl.config import RunConfig
    from replay_rl.evaluation.warmstart import ensure_model
    from replay_rl.models.hf_folder import load_tokenizer

    tokenizer = load_tokenizer(ensure_model(RunConfig.load(None, [])))
    rows = []
    for threads in args.threads:
        n, s = time_call(threads, args.sleep, args.repeats, tokenizer)
        rows.append({"reward_threads": threads, "median_s": statistics.median(s), "min_s": min(s), "max_s": max(s)})
    result = {"command": "python benchmarks/reward_pool.py " + " ".join(sys.argv[1:]), "sleep_s": args.sleep,
              "completions_per_call": n, "repeats": args.repeats, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    table = ["| reward_threads | median s per call | min | max |", "|---|---|---|---|"]
    table += [f"| {r['reward_threads']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} |" for r in rows]
    (args.out / "table.md").write_text("\n".join(table) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

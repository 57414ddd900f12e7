"""Where does generation dominate? μ = (seconds to generate one rollout) / (seconds to train on one rollout),
measured in one process on this machine for several completion lengths, generation batch sizes and model widths.

The paper's GPUs sit at μ ≈ 5–7, where replay pays; this shows how far a CPU box is from that and which knobs move
it. Prints one JSON object. Usage: python benchmarks/mu_regimes.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from replay_rl.config import TinyModelSpec
from replay_rl.models.hf_folder import init_tiny_model_folder, load_model

GROUP = 16


def measure(model, prompt_len: int, completion_len: int, prompts_per_call: int, repeats: int) -> dict:
    vocab = model.config.vocab_size
    prompts = torch.randint(4, vocab, (prompts_per_call, prompt_len))
    model.eval()
    with torch.no_grad():
        model.generate(prompts, max_new_tokens=2, do_sample=True, num_return_sequences=GROUP, pad_token_id=0)
        t0 = time.perf_counter()
        for _ in range(repeats):
            out = model.generate(prompts, max_new_tokens=completion_len, min_new_tokens=completion_len,
                                 do_sample=True, num_return_sequences=GROUP, pad_token_id=0)
        gen_s = (time.perf_counter() - t0) / repeats / (prompts_per_call * GROUP)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = out[:GROUP]  # one learner sub-batch of 16 rollouts
    t0 = time.perf_counter()
    for _ in range(repeats):
        logits = model(batch).logits[:, :-1]
        loss = torch.log_softmax(logits.float(), -1).gather(-1, batch[:, 1:, None]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    train_s = (time.perf_counter() - t0) / repeats / GROUP
    return {"completion_len": completion_len, "prompts_per_call": prompts_per_call,
            "gen_ms_per_rollout": 1e3 * gen_s, "train_ms_per_rollout": 1e3 * train_s,
            # the cost model's μ estimated from seconds on this hardware (the ledger's `mu` is the config's)
            "mu_seconds": gen_s / train_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)  # as each role runs in the system
    rows = []
    for hidden, inter in ((128, 384), (384, 1152)):
        with tempfile.TemporaryDirectory() as d:
            model = load_model(init_tiny_model_folder(TinyModelSpec(hidden_size=hidden, intermediate_size=inter,
                                                                    max_position=256), d))
        for completion_len in (8, 32, 128):
            for ppc in (1, 4):
                rows.append({"hidden_size": hidden, **measure(model, 8, completion_len, ppc, args.repeats)})
    print(json.dumps({"benchmark": "mu_regimes", "group_size": GROUP, "results": rows}, indent=2))


if __name__ == "__main__":
    main()

"""A peer side by side: TRL's GRPOTrainer on the SmolLM2 preset's task, scored by our evaluator (issue 42, item 4).

TRL is trained with the preset's settings (configs/smollm2_135m_cpu.yaml): the same model folder, the same training
prompts' distribution (our task's train split, drawn by our sampler; never an eval problem), the chat template, 16
new tokens with a cut completion scoring 0 (our rollout_reward, called on TRL's completions), groups of 4, 16
completions a step, lr 1e-5 constant, temperature 1, no KL, each rollout used once (num_iterations 1), GRPO's
clipped ratio (ε 0.2) with a token mean over the batch (TRL's "dapo"; ours with learner.loss.aggregation=
global_token_mean, not the default rank_token_mean), grad clip 1.0. What differs: TRL normalises a group's advantages by its unbiased std (+1e-4), ours by the
population std (+1e-6), so TRL's advantages are 0.87× ours in a group of 4 (Adam takes most of a constant factor
out); TRL generates and trains in one process, ours in Ray actors.

Its checkpoints (every `--eval-every` steps) are scored with replay_rl's own evaluator on the preset's 200 held-out
problems, greedy and sampled pass@1, exactly as our runs' evals are. Each step's compute on our ledger's scale:
TRL is on-policy and generates every rollout it trains on, so after s steps K_train = K_inf = 16·s and compute =
(K_train + μ·K_inf)/B = s·(1 + μ), μ = 5.28 as the preset's emulated cluster.

    .tvenv/bin/python benchmarks/peer_trl.py --seed 0 --out benchmarks/results/peer_trl   # a venv with trl 1.16
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.evaluation.passk import evaluate_for_run
from replay_rl.generation.hf import HFBackend
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.tasks import make_task
from replay_rl.tasks.base import Problem, rollout_reward

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "configs" / "smollm2_135m_cpu.yaml"


def prompts_dataset(task, n: int, seed: int):
    """n training prompts as TRL's conversational rows, drawn from our train split by our sampler."""
    from datasets import Dataset

    problems = task.sample_train(n, np.random.default_rng(seed))
    return Dataset.from_list([{"prompt": [{"role": "user", "content": p.prompt}], "answer": p.answer, "key": p.key,
                               "text": p.prompt} for p in problems])


def reward_function(task, max_new_tokens: int, eos_id: int, group_size: int, log: list):
    """TRL's reward callable: our rollout_reward on each completion (0 when cut at max_new_tokens without EOS)."""
    def reward(prompts, completions, completion_ids, answer, key, text, **_):
        cuts = [len(ids) >= max_new_tokens and eos_id not in ids for ids in completion_ids]
        out = [rollout_reward(task, Problem(t, a, k), c[0]["content"] if isinstance(c, list) else c, cut)
               for c, cut, a, k, t in zip(completions, cuts, answer, key, text)]
        groups = np.array(out).reshape(-1, group_size)
        log.append({"reward_mean": float(np.mean(out)), "cut_share": float(np.mean(cuts)),
                    "zero_variance_share": float(np.mean([len(set(g)) == 1 for g in groups]))})
        return out
    return reward


def train_args(cfg: RunConfig, out: Path, seed: int, steps: int, every: int) -> dict:
    """GRPOConfig's settings for the preset's (peer_step.py takes the same)."""
    g = cfg.generation
    return dict(
        output_dir=str(out / "trl"), seed=seed, max_steps=steps, save_steps=every, save_only_model=True,
        per_device_train_batch_size=cfg.learner.batch_size, num_generations=g.group_size, steps_per_generation=1,
        num_iterations=1, max_completion_length=g.max_new_tokens, temperature=g.temperature, top_p=1.0, top_k=0,
        learning_rate=cfg.learner.lr, lr_scheduler_type="constant", warmup_steps=0, beta=0.0, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", max_grad_norm=cfg.learner.grad_clip, weight_decay=0.0,
        adam_beta1=cfg.learner.betas[0], adam_beta2=cfg.learner.betas[1], use_cpu=True, bf16=False,
        logging_steps=1, report_to="none", shuffle_dataset=False, disable_dropout=True)


def train_trl(cfg: RunConfig, model: Path, out: Path, seed: int, steps: int, every: int) -> tuple[list, float]:
    from trl import GRPOConfig, GRPOTrainer

    task = make_task(cfg.task, cfg.task.split_seed)
    tokenizer = load_tokenizer(model)
    g, b = cfg.generation, cfg.learner.batch_size
    args = GRPOConfig(**train_args(cfg, out, seed, steps, every))
    log: list = []
    trainer = GRPOTrainer(model=str(model), args=args, processing_class=tokenizer,
                          reward_funcs=reward_function(task, g.max_new_tokens, tokenizer.eos_token_id, g.group_size,
                                                       log),
                          train_dataset=prompts_dataset(task, steps * b // g.group_size, seed))
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    (out / "trl_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trainer.state.log_history))
    return log, train_s


def score(cfg: RunConfig, model: Path, tokenizer_from: Path) -> dict:
    """Our evaluator's row for one checkpoint (the preset's held-out problems, greedy and sampled pass@1)."""
    for f in tokenizer_from.glob("tokenizer*"):  # a checkpoint without its tokenizer files gets the model's
        if not (model / f.name).exists():
            shutil.copy(f, model / f.name)
    task = make_task(cfg.task, cfg.task.split_seed)
    return evaluate_for_run(HFBackend(str(model)), load_tokenizer(model), task, cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "peer_trl"))
    ap.add_argument("-s", "--set", action="append", default=[], help="a dotted override of the preset, as `replay-rl "
                    "-s`, given to both sides: the committed pilot ran at -s generation.temperature=1.0, the preset's "
                    "temperature then")
    args = ap.parse_args()
    cfg = RunConfig.load(str(PRESET), [*args.set, f"run.seed={args.seed}"])  # its evals draw as our seed-S runs
    model = Path(cfg.model.build_dir).resolve()
    out = Path(args.out) / f"seed{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    log, train_s = train_trl(cfg, model, out, args.seed, args.steps, args.eval_every)
    mu = cfg.cluster.emulate.mu
    evals = [{"step": 0, **score(cfg, model, model)}]
    for step in range(args.eval_every, args.steps + 1, args.eval_every):
        evals.append({"step": step, **score(cfg, out / "trl" / f"checkpoint-{step}", model)})
    for e in evals:
        e |= {"rollouts": e["step"] * cfg.learner.batch_size, "compute": e["step"] * (1 + mu)}
    (out / "steps.jsonl").write_text("".join(json.dumps({"step": i + 1, **r}) + "\n" for i, r in enumerate(log)))
    (out / "evals.json").write_text(json.dumps({"seed": args.seed, "train_s": train_s, "evals": evals}, indent=1))
    shutil.rmtree(out / "trl")  # the checkpoints: 0.5 GB each, scored above
    print(json.dumps({"seed": args.seed, "train_s": round(train_s), "pass@1": [round(e["pass@1"], 3) for e in evals]}))


if __name__ == "__main__":
    main()

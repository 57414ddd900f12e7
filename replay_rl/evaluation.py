"""pass@1 (greedy and sampled) and pass@k on a task's held-out split."""

from __future__ import annotations

from math import comb
from typing import Sequence

import numpy as np

from replay_rl.config import RunConfig
from replay_rl.generation.backend import GenerationBackend, SamplingParams
from replay_rl.tasks import Problem, Task, checked_reward


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator (Chen et al. 2021): 1 − C(n−c, k) / C(n, k), for n samples of which c are correct."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def score(task: Task, tokenizer, problems: Sequence[Problem], completions) -> np.ndarray:
    """(len(problems), n) rewards."""
    return np.array([[checked_reward(task, p, tokenizer.decode(c.token_ids, skip_special_tokens=True))
                      for c in group] for p, group in zip(problems, completions)])


def encode_prompts(tokenizer, problems: Sequence[Problem]) -> list[np.ndarray]:
    return [np.asarray(tokenizer(p.prompt, add_special_tokens=False)["input_ids"], np.int32) for p in problems]


def evaluate(backend: GenerationBackend, tokenizer, task: Task, *, n_problems: int, k: int, temperature: float,
             max_new_tokens: int, batch: int = 64) -> dict[str, float]:
    problems = task.eval_problems()[:n_problems]
    greedy, sampled = [], []
    for i in range(0, len(problems), batch):
        chunk = problems[i:i + batch]
        prompts = encode_prompts(tokenizer, chunk)
        greedy.append(score(task, tokenizer, chunk,
                            backend.generate(prompts, SamplingParams(0.0, 1.0, max_new_tokens, 1))))
        sampled.append(score(task, tokenizer, chunk,
                             backend.generate(prompts, SamplingParams(temperature, 1.0, max_new_tokens, k))))
    g, s = np.concatenate(greedy), np.concatenate(sampled)
    correct = (s >= task.correct_threshold).sum(axis=1)
    return {
        "pass@1": float((g[:, 0] >= task.correct_threshold).mean()),
        "pass@1_sampled": float((s >= task.correct_threshold).mean()),
        f"pass@{k}": float(np.mean([pass_at_k(k, int(c), k) for c in correct])),
        "mean_reward_greedy": float(g.mean()),
        "eval_problems": float(len(problems)),
    }


def evaluate_for_run(backend: GenerationBackend, tokenizer, task: Task, cfg: RunConfig,
                     k: int | None = None) -> dict[str, float]:
    """evaluate() with the run's eval settings (run.eval_prompts, run.eval_k, generation.eval_temperature)."""
    return evaluate(backend, tokenizer, task, n_problems=cfg.run.eval_prompts, k=k or cfg.run.eval_k,
                    temperature=cfg.generation.eval_temperature, max_new_tokens=cfg.generation.max_new_tokens)

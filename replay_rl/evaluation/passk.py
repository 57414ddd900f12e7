"""pass@1 (greedy and sampled) and pass@k for k = 2, 4, … up to the samples drawn, on a task's held-out split."""

from __future__ import annotations

from math import comb
from typing import Sequence

import numpy as np
import torch

from replay_rl.config import RunConfig
from replay_rl.generation.backend import GenerationBackend, SamplingParams
from replay_rl.rollout import FINISH_LENGTH
from replay_rl.tasks import Problem, Task
from replay_rl.tasks.scoring import encode_prompts, rewards_by_group


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator (Chen et al. 2021): 1 − C(n−c, k) / C(n, k), for n samples of which c are correct."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def score(task: Task, tokenizer, problems: Sequence[Problem], completions) -> np.ndarray:
    """(len(problems), n) rewards; a completion cut at max_new_tokens gets 0 (tasks.scoring.rewards_by_group), and
    one the reward does not apply to (None) counts as 0."""
    return np.nan_to_num(np.array(rewards_by_group(task, tokenizer, problems, completions)), nan=0.0)


def ks_reported(n: int) -> list[int]:
    """The k of each pass@k read off n samples: every power of two from 2 up to n, and n itself."""
    return sorted({2 ** i for i in range(1, n.bit_length()) if 2 ** i <= n} | ({n} if n > 1 else set()))


def chunks(problems: Sequence[Problem], batch: int):
    return (problems[i:i + batch] for i in range(0, len(problems), batch))


def greedy_scores(backend: GenerationBackend, tokenizer, task: Task, problems: Sequence[Problem],
                  max_new_tokens: int, batch: int = 64, chat: bool = False,
                  truncated: list[bool] | None = None) -> np.ndarray:
    """(len(problems),) reward of each problem's greedy completion. truncated: a list that gets, per problem,
    whether its completion was cut at max_new_tokens."""
    out = []
    for chunk in chunks(problems, batch):
        groups = backend.generate(encode_prompts(tokenizer, chunk, chat), SamplingParams(0.0, 1.0, max_new_tokens, 1))
        out.append(score(task, tokenizer, chunk, groups)[:, 0])
        if truncated is not None:
            truncated.extend(g[0].finish == FINISH_LENGTH for g in groups)
    return np.concatenate(out)


def greedy_accuracy(backend: GenerationBackend, tokenizer, task: Task, *, n_problems: int,
                    max_new_tokens: int, chat: bool = False) -> float:
    """Greedy pass@1 on the first n_problems of the held-out split: what a run reports as eval/pass@1."""
    g = greedy_scores(backend, tokenizer, task, task.eval_problems()[:n_problems], max_new_tokens, chat=chat)
    return float((g >= task.correct_threshold).mean())


def evaluate(backend: GenerationBackend, tokenizer, task: Task, *, n_problems: int, n: int, temperature: float,
             max_new_tokens: int, batch: int = 64, chat: bool = False) -> dict[str, float]:
    """Greedy pass@1, and from n samples per problem the sampled pass@1 and pass@k for each k of ks_reported(n)
    (unbiased: one draw of n samples serves every k, so pass@2..pass@n cost no more than pass@n).
    truncated_share: the share of greedy completions cut at max_new_tokens (scored 0)."""
    problems = task.eval_problems()[:n_problems]
    cut: list[bool] = []
    g = greedy_scores(backend, tokenizer, task, problems, max_new_tokens, batch, chat, cut)
    s = np.concatenate([score(task, tokenizer, chunk, backend.generate(
        encode_prompts(tokenizer, chunk, chat), SamplingParams(temperature, 1.0, max_new_tokens, n)))
        for chunk in chunks(problems, batch)])
    correct = (s >= task.correct_threshold).sum(axis=1)
    return {
        "pass@1": float((g >= task.correct_threshold).mean()),
        "pass@1_sampled": float((s >= task.correct_threshold).mean()),
        **{f"pass@{k}": float(np.mean([pass_at_k(n, int(c), k) for c in correct])) for k in ks_reported(n)},
        "mean_reward_greedy": float(g.mean()),
        "truncated_share": float(np.mean(cut)),
        "eval_problems": float(len(problems)),
    }


def evaluate_for_run(backend: GenerationBackend, tokenizer, task: Task, cfg: RunConfig,
                     k: int | None = None) -> dict[str, float]:
    """evaluate() with the run's eval settings (run.eval_prompts, n = run.eval_k, generation.eval_temperature).
    A transformers backend draws its samples from torch's generator, here seeded with run.seed (the caller's CPU
    generator, and the backend's GPU one, left as they were), so the same weights and seed give the same sampled
    pass@k in a run, in another run and in `replay-rl eval`, whatever else the process drew before (on a GPU, as far
    as its kernels repeat). A vLLM backend (run.eval_backend=generation) draws from its engine, seeded once at its
    start: its sampled values move from one eval to the next."""
    device = getattr(backend, "device", None)
    with torch.random.fork_rng(devices=[device] if getattr(device, "type", None) == "cuda" else []):
        torch.manual_seed(cfg.run.seed)
        return evaluate(backend, tokenizer, task, n_problems=cfg.run.eval_prompts, n=k or cfg.run.eval_k,
                        temperature=cfg.generation.eval_temperature, max_new_tokens=cfg.generation.max_new_tokens,
                        chat=cfg.model.chat_template)

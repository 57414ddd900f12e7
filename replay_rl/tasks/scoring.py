"""From a task's problems to what the learner trains on: the prompts' token ids, and each group of G completions
scored by the task's verifier into Rollouts with group-normalised advantages. The generator and the probe share it."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from replay_rl.rollout import FINISH_LENGTH, Rollout, group_advantages
from replay_rl.tasks.base import Problem, Task, rollout_reward


def encode_prompts(tokenizer, problems: Sequence[Problem], chat: bool = False) -> list[np.ndarray]:
    """Token ids of each prompt. chat (model.chat_template): the prompt as one user message through the tokenizer's
    chat template with the generation prompt appended, tokenized by the template itself (its special tokens are
    tokens, not text; no second BOS), so the model answers as the assistant instead of continuing the user."""
    if chat:
        return [np.asarray(tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}], tokenize=True,
                                                         add_generation_prompt=True, return_dict=False), np.int32)
                for p in problems]
    return [np.asarray(tokenizer(p.prompt, add_special_tokens=False)["input_ids"], np.int32) for p in problems]


def completion_rewards(task: Task, tokenizer, items: Sequence[tuple[Problem, object]]) -> list[float]:
    """The reward of each (problem, completion), decoded here and scored in the task's pool when it has one
    (task.reward_threads: a reward that waits on a sandbox or a service scores a call's completions at once); one
    cut at max_new_tokens gets 0 (tasks.rollout_reward). The generator, the probe and the evals all score here."""
    texts = [(p, tokenizer.decode(c.token_ids, skip_special_tokens=True), c.finish == FINISH_LENGTH) for p, c in items]
    scored = task.pool.map(lambda t: rollout_reward(task, *t), texts) if task.pool is not None else \
        (rollout_reward(task, *t) for t in texts)
    return list(scored)


def rewards_by_group(task: Task, tokenizer, problems: Sequence[Problem], groups) -> list[np.ndarray]:
    """groups[i]: problem i's completions; each group's rewards (NaN where the reward does not apply), every
    completion of the call scored in one completion_rewards, so a task's pool takes them all at once."""
    flat = iter(completion_rewards(task, tokenizer, [(p, c) for p, group in zip(problems, groups) for c in group]))
    return [np.array([next(flat) for _ in group], np.float64) for group in groups]


def score_groups(task: Task, tokenizer, problems: Sequence[Problem], prompts: Sequence[np.ndarray], groups,
                 group_ids: Iterable[int], versions: Callable[[object], tuple[int, int, int]],
                 generator_id: int, ddof: int = 0) -> list[Rollout]:
    """groups[i]: problem i's completions (backend.Completion). versions(completion): its (policy_version,
    last_version, created_step). ddof: the advantage's std (generation.advantage_std; 0 population, 1 sample).
    Rollouts are built by keyword: two of the 13 fields swapped by position would go unnoticed."""
    rollouts, scored = [], rewards_by_group(task, tokenizer, problems, groups)
    for prompt, group, gid, group_rewards in zip(prompts, groups, group_ids, scored):
        rewards, advantages, baseline = applicable_advantages(group_rewards, ddof)
        for c, r, a in zip(group, rewards, advantages):
            oldest, newest, created = versions(c)
            rollouts.append(Rollout(
                prompt_ids=prompt, completion_ids=c.token_ids, behavior_logprobs=c.logprobs, reward=float(r),
                advantage=float(a), baseline=baseline, correct=bool(r >= task.correct_threshold), group_id=gid,
                policy_version=oldest, last_version=newest, created_step=created, generator_id=generator_id,
                finish=c.finish))
    return rollouts


def applicable_advantages(rewards: np.ndarray, ddof: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """A group's (rewards, advantages, baseline) where NaN marks a reward that does not apply (the reward returned
    None): its advantage is 0 and its reward 0, and the others are normalised among themselves."""
    applies = ~np.isnan(rewards)
    advantages = np.zeros(len(rewards), np.float32)
    if not applies.any():
        return np.zeros(len(rewards)), advantages, 0.0
    advantages[applies] = group_advantages(rewards[applies], ddof=ddof)
    return np.where(applies, rewards, 0.0), advantages, float(rewards[applies].mean())


def zero_variance_groups(rollouts: Sequence[Rollout], group_size: int) -> int:
    """How many of score_groups' groups (G rollouts each, in order) had all their rewards equal: their advantages
    are all 0, so GRPO learns nothing from them."""
    return sum(len({r.reward for r in rollouts[i:i + group_size]}) == 1 for i in range(0, len(rollouts), group_size))

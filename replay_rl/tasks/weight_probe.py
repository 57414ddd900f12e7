"""The weight-path check's probe set: a few training prompts, each followed by its reference answer and EOS, drawn
by a fixed seed so that the learner and every generator build the same token sequences without exchanging them."""

from __future__ import annotations

import numpy as np

from replay_rl.tasks.base import Task
from replay_rl.tasks.scoring import encode_prompts

PROBE_PROMPTS = 4
PROBE_SEED = 2604_08706  # the paper's arXiv number: any fixed seed, never the run's, so resumed runs probe alike


def weight_probe(task: Task, chat_template: bool, tokenizer, n: int = PROBE_PROMPTS) -> list[np.ndarray]:
    """n token sequences (prompt, answer, EOS). Every token after the first is scored, so the prompt's positions
    count as well as the answer's: a few hundred positions through every layer and the head."""
    problems = task.sample_train(n, np.random.default_rng(PROBE_SEED))
    prompts = encode_prompts(tokenizer, problems, chat_template)
    return [np.concatenate([prompt, np.asarray(tokenizer(p.answer, add_special_tokens=False)["input_ids"], np.int32),
                            np.asarray([tokenizer.eos_token_id], np.int32)]).astype(np.int32)
            for p, prompt in zip(problems, prompts)]

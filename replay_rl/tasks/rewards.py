"""Rewards a dataset task can name in task.reward, each `f(completion, answer, **columns) -> float`."""

from __future__ import annotations

from replay_rl.tasks.jsonl_math import extract_answer, normalise_answer


def boxed_match(completion: str, answer: str, **columns) -> float:
    """1 when the completion's last \\boxed{} (or, without one, its last number) equals the answer after light
    normalisation (commas, spaces, `$`, a trailing period; numbers compared as floats), else 0."""
    pred = extract_answer(completion)
    return 1.0 if pred is not None and pred.strip() and normalise_answer(pred) == normalise_answer(answer) else 0.0

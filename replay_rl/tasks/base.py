"""Task protocol: procedurally generated or loaded problems with a verifiable reward in [0, 1]."""

from __future__ import annotations

import hashlib
import math
import re
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Problem:
    prompt: str   # text the model continues
    answer: str   # reference answer the verifier compares against (a demonstration for synthetic tasks)
    key: str      # stable identity used for the train/eval split
    # a dataset row's other columns, handed to a user's reward by name (task.type=dataset)
    columns: dict = field(default_factory=dict, compare=False, repr=False)


class Task(Protocol):
    name: str
    correct_threshold: float  # reward at or above this counts as a correct rollout
    pool: Executor | None  # where a call's completions are scored at once (a user's reward that waits); None: inline

    def sample_train(self, n: int, rng: np.random.Generator) -> list[Problem]: ...
    def eval_problems(self) -> list[Problem]: ...
    def reward(self, problem: Problem, completion: str) -> float | None: ...  # None: not applicable
    def demonstration(self, problem: Problem) -> str | None: ...  # a correct completion, for the warm start


class RewardError(RuntimeError):
    """A reward function returned something that is not a float in [0, 1]."""


def checked_reward(task: Task, problem: Problem, completion: str) -> float:
    """task.reward, but a bad value fails loudly, naming the task and problem, instead of corrupting advantages.
    None (the reward does not apply to this completion) is NaN: left out of its group's advantage."""
    r = task.reward(problem, completion)
    if r is None:
        return math.nan
    if not isinstance(r, (int, float, np.floating)) or not math.isfinite(float(r)) or not 0.0 <= float(r) <= 1.0:
        raise RewardError(f"task {task.name!r}: reward for prompt {problem.prompt!r} is {r!r}; "
                          "a reward function must return a finite float in [0, 1]")
    return float(r)


def in_eval_split(key: str, seed: int, eval_fraction: float) -> bool:
    """Deterministic, seed-dependent split: the same problem is always on the same side for a given seed."""
    h = int.from_bytes(hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest(), "little")
    return (h % 1_000_000) < eval_fraction * 1_000_000


def sample_disjoint(draw, n: int, rng: np.random.Generator, keep, max_tries: int = 100) -> list[Problem]:
    """Draw problems with `draw(rng)` until n satisfy `keep` (the split predicate)."""
    out: list[Problem] = []
    for _ in range(n * max_tries):
        p = draw(rng)
        if keep(p):
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError("task too small for its train/eval split: raise the difficulty knob or lower eval_size")


def unique_eval_set(draw, size: int, seed: int, fraction: float) -> list[Problem]:
    rng = np.random.default_rng(seed + 7919)
    seen: dict[str, Problem] = {}
    misses = 0  # a small problem space has fewer than `size` eval problems: stop once new ones stop appearing
    while len(seen) < size and misses < 20_000:
        p = draw(rng)
        if in_eval_split(p.key, seed, fraction) and p.key not in seen:
            seen[p.key], misses = p, 0
        else:
            misses += 1
    return list(seen.values())


def exact_match(completion: str, answer: str) -> float:
    return 1.0 if completion.strip() == answer.strip() else 0.0


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(completion: str) -> str | None:
    """The last number written, thousands commas dropped and a trailing ".0" kept as a number: "= 1,234." → "1234"."""
    found = _NUMBER.findall(completion)
    return found[-1].replace(",", "") if found else None


def last_number_match(completion: str, answer: str) -> float:
    n = last_number(completion)
    return 1.0 if n is not None and float(n) == float(answer) else 0.0


def rollout_reward(task: Task, problem: Problem, completion: str, truncated: bool) -> float:
    """The reward of one completion: 0 when it was cut at max_new_tokens (no EOS: it had not finished, and a
    last-number reader would score a number it was still writing), else the task's checked reward."""
    return 0.0 if truncated else checked_reward(task, problem, completion)

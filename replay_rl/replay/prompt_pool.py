"""Which prompts a generator's next call draws (generation.prompt_replay): fresh training prompts, or, with prompt
replay, some prompts again whose last group had mixed outcomes, so fresh compute goes where GRPO still gets a
gradient. The buffer replays rollouts; this replays prompts, each generated anew from the newest weights.

A generator keeps its own pool: what it admits are prompts it drew from the task's training split, so an eval
prompt never enters it. The pool is not checkpointed: a replaced or resumed generator starts with an empty one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np


class PromptSource(Protocol):
    replayed: int  # prompts drawn from the pool so far (0 without prompt replay)

    def draw(self, n: int, rng: np.random.Generator) -> list[Any]:
        """The n problems of the next call."""
        ...

    def observe(self, problems: Sequence[Any], rewards: Sequence[Sequence[float]]) -> None:
        """Each drawn problem's group of rewards, once scored."""
        ...


class FreshPrompts:
    """Every call's prompts fresh from the training split."""

    def __init__(self, task) -> None:
        self.task, self.replayed = task, 0

    def draw(self, n: int, rng: np.random.Generator) -> list[Any]:
        return self.task.sample_train(n, rng)

    def observe(self, problems: Sequence[Any], rewards: Sequence[Sequence[float]]) -> None:
        pass


@dataclass
class _Entry:
    problem: Any
    spread: float  # the population std of its last group's rewards: sqrt(p(1-p)) for 0/1 rewards, highest at p = 0.5
    visits: int    # times generated again from the pool
    order: int     # admission order: among equals, the oldest goes first and the newest is evicted last


class PromptReplay:
    """Up to `share` of each call's prompts from the pool, the rest fresh. A prompt is admitted when its group's
    rewards differ; the pool serves first the prompts nearest a 50% pass rate (the largest spread of rewards), then
    the least visited, then the oldest. A prompt leaves when it is drawn, and comes back only if its new group
    still differs (a prompt all solved or all failed graduates) and it was drawn fewer than max_visits times. A full
    pool admits a prompt in place of its lowest-spread one, if the newcomer's is higher. Prompts are told apart by
    their key: a dataset task hands out the same problem again, which must update its entry, not add a copy."""

    def __init__(self, task, share: float, capacity: int, max_visits: int) -> None:
        self.task, self.share, self.capacity, self.max_visits = task, share, capacity, max_visits
        self.pool: dict[str, _Entry] = {}
        self._out: dict[str, _Entry] = {}  # drawn from the pool and not yet observed, by key
        self._admitted = self.replayed = 0

    def draw(self, n: int, rng: np.random.Generator) -> list[Any]:
        k = min(len(self.pool), replayed_per_call(self.share, n))
        taken = sorted(self.pool.values(), key=lambda e: (-e.spread, e.visits, e.order))[:k]
        for e in taken:
            self._out[e.problem.key] = self.pool.pop(e.problem.key)
        self.replayed += k
        return [e.problem for e in taken] + (self.task.sample_train(n - k, rng) if n > k else [])

    def observe(self, problems: Sequence[Any], rewards: Sequence[Sequence[float]]) -> None:
        for problem, group in zip(problems, rewards):
            spread = float(np.std(np.nan_to_num(np.asarray(group, float))))
            if (drawn := self._out.pop(problem.key, None)) is not None:  # generated again from the pool
                drawn.spread, drawn.visits = spread, drawn.visits + 1
                if spread > 0 and drawn.visits < self.max_visits:
                    self._admit(drawn)
            elif (pooled := self.pool.get(problem.key)) is not None:  # drawn fresh while in the pool
                pooled.spread = spread
                if spread == 0:
                    del self.pool[problem.key]
            elif spread > 0:
                self._admitted += 1
                self._admit(_Entry(problem, spread, 0, self._admitted))

    def _admit(self, entry: _Entry) -> None:
        if len(self.pool) >= self.capacity:
            lowest = min(self.pool.values(), key=lambda e: (e.spread, -e.order))
            if lowest.spread >= entry.spread:
                return
            del self.pool[lowest.problem.key]
        self.pool[entry.problem.key] = entry


def replayed_per_call(share: float, prompts_per_call: int) -> int:
    """The most prompts a call takes from the pool (a hair's tolerance: 0.29 of 100 is 29, not 28)."""
    return math.floor(share * prompts_per_call + 1e-9)


def prompt_source(task, prompt_replay) -> PromptSource:
    """generation.prompt_replay's source (None: fresh prompts only)."""
    if prompt_replay is None:
        return FreshPrompts(task)
    return PromptReplay(task, prompt_replay.share, prompt_replay.capacity, prompt_replay.max_visits)

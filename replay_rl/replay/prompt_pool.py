"""Which prompts a generator's next call draws (generation.prompt_replay): fresh training prompts, or, with prompt
replay, some prompts again whose last group had mixed outcomes, so fresh compute goes where GRPO still gets a
gradient. The buffer replays rollouts; this replays prompts, each generated anew from the newest weights.

A generator keeps its own pool: what it admits are prompts it drew from the task's training split, so an eval
prompt never enters it. The pool is not checkpointed: a replaced or resumed generator starts with an empty one."""

from __future__ import annotations

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
    pool admits a prompt in place of its lowest-spread one, if the newcomer's is higher."""

    def __init__(self, task, share: float, capacity: int, max_visits: int) -> None:
        self.task, self.share, self.capacity, self.max_visits = task, share, capacity, max_visits
        self.pool: list[_Entry] = []
        self._out: dict[int, _Entry] = {}  # id(problem) -> its entry, for the problems drawn and not yet observed
        self._admitted = self.replayed = 0

    def draw(self, n: int, rng: np.random.Generator) -> list[Any]:
        self.pool.sort(key=lambda e: (-e.spread, e.visits, e.order))
        k = min(len(self.pool), int(self.share * n))
        taken, self.pool = self.pool[:k], self.pool[k:]
        self._out |= {id(e.problem): e for e in taken}
        self.replayed += k
        return [e.problem for e in taken] + (self.task.sample_train(n - k, rng) if n > k else [])

    def observe(self, problems: Sequence[Any], rewards: Sequence[Sequence[float]]) -> None:
        for problem, group in zip(problems, rewards):
            before = self._out.pop(id(problem), None)
            visits = before.visits + 1 if before else 0
            spread = float(np.std(np.nan_to_num(np.asarray(group, float))))
            if spread > 0 and visits < self.max_visits:
                self._admit(_Entry(problem, spread, visits, before.order if before else self._admitted))
                self._admitted += before is None

    def _admit(self, entry: _Entry) -> None:
        if len(self.pool) >= self.capacity:
            lowest = min(self.pool, key=lambda e: (e.spread, -e.order))
            if lowest.spread >= entry.spread:
                return
            self.pool.remove(lowest)
        self.pool.append(entry)


def prompt_source(task, prompt_replay) -> PromptSource:
    """generation.prompt_replay's source (None: fresh prompts only)."""
    if prompt_replay is None:
        return FreshPrompts(task)
    return PromptReplay(task, prompt_replay.share, prompt_replay.capacity, prompt_replay.max_visits)

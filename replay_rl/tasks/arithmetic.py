"""Multi-digit addition: "12+34=" → "46". Exact match or the last number written; difficulty = digits per operand."""

from __future__ import annotations

import numpy as np

from replay_rl.config import ArithmeticTaskConfig
from replay_rl.tasks.base import Problem, exact_match, in_eval_split, last_number_match, sample_disjoint, unique_eval_set

EVAL_FRACTION = 0.1


class ArithmeticTask:
    name = "arithmetic"
    correct_threshold = 1.0
    pool = None

    def __init__(self, cfg: ArithmeticTaskConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        self._eval = unique_eval_set(self._draw, cfg.eval_size, seed, EVAL_FRACTION)

    def _draw(self, rng: np.random.Generator) -> Problem:
        xs = rng.integers(0, 10 ** self.cfg.digits, size=self.cfg.operands)
        expr = "+".join(str(int(x)) for x in xs)
        # the key is the sum as the default prompt writes it, so the split does not depend on the wording
        return Problem(prompt=self.cfg.prompt_template.format(expr=expr), answer=str(int(xs.sum())), key=expr + "=")

    def sample_train(self, n: int, rng: np.random.Generator) -> list[Problem]:
        return sample_disjoint(self._draw, n, rng, lambda p: not in_eval_split(p.key, self.seed, EVAL_FRACTION))

    def eval_problems(self) -> list[Problem]:
        return self._eval

    def reward(self, problem: Problem, completion: str) -> float:
        read = last_number_match if self.cfg.answer == "last_number" else exact_match
        return read(completion, problem.answer)

    def demonstration(self, problem: Problem) -> str:
        return problem.answer

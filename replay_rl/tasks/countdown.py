"""Countdown: reach the target with the given numbers, each at most once, using + - * and parentheses.

Prompt "3 5 7:22=" → e.g. "3*5+7". The verifier parses the expression with `ast` (no eval), checks the multiset of
numbers used, and compares the value exactly (fractions, so 7/2*2 is fine and float error is impossible).
"""

from __future__ import annotations

import ast
from collections import Counter
from fractions import Fraction

import numpy as np

from replay_rl.config import CountdownTaskConfig
from replay_rl.tasks.base import Problem, in_eval_split, sample_disjoint, unique_eval_set

EVAL_FRACTION = 0.1
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b}


def evaluate(expr: str) -> tuple[Fraction, list[int]] | None:
    """Value and the integer literals used, or None when expr is not a plain arithmetic expression."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    used: list[int] = []

    def walk(node) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError("not allowed")

    try:
        return walk(tree), used
    except (ValueError, ZeroDivisionError):
        return None


class CountdownTask:
    name = "countdown"
    correct_threshold = 1.0
    pool = None

    def __init__(self, cfg: CountdownTaskConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        self._eval = unique_eval_set(self._draw, cfg.eval_size, seed, EVAL_FRACTION)

    def _draw(self, rng: np.random.Generator) -> Problem:
        while True:
            nums = [int(x) for x in rng.integers(1, self.cfg.max_number + 1, size=self.cfg.numbers)]
            ops = rng.choice(["+", "-", "*"], size=len(nums) - 1)
            expr = str(nums[0]) + "".join(f"{o}{n}" for o, n in zip(ops, nums[1:]))
            value, _ = evaluate(expr)
            if value > 0:
                shown = sorted(nums)
                prompt = " ".join(map(str, shown)) + f":{int(value)}="
                return Problem(prompt=prompt, answer=expr, key=prompt)

    def sample_train(self, n: int, rng: np.random.Generator) -> list[Problem]:
        return sample_disjoint(self._draw, n, rng, lambda p: not in_eval_split(p.key, self.seed, EVAL_FRACTION))

    def eval_problems(self) -> list[Problem]:
        return self._eval

    def reward(self, problem: Problem, completion: str) -> float:
        numbers_part, target_part = problem.prompt.rstrip("=").split(":")
        result = evaluate(completion)
        if result is None:
            return 0.0
        value, used = result
        allowed = Counter(int(x) for x in numbers_part.split())
        if Counter(used) - allowed:  # used a number not offered, or one more often than offered
            return 0.0
        return 1.0 if value == int(target_part) else 0.0

    def demonstration(self, problem: Problem) -> str:
        return problem.answer

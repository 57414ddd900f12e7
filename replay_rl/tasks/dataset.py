"""Your own data and reward (task.type=dataset): the rows of a JSONL or parquet file, a prompt made from their
columns, and a reward function you name, called as `f(completion, answer, **columns)`. The held-out rows are a file
of their own (a dataset's test split) or a seeded share of the training file."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from replay_rl.config import DatasetTaskConfig
from replay_rl.tasks.base import Problem, in_eval_split
from replay_rl.tasks.jsonl_math import load_rows
from replay_rl.tasks.reward_hook import RewardHookError, check_signature, checked_value, load_reward


def problem_from_row(row: dict, line: int, cfg: DatasetTaskConfig, field: str, path: str) -> Problem:
    """One checked row: its prompt made, its answer present and not empty, its other columns kept for the reward."""
    if not isinstance(row, dict):
        raise ValueError(f"{field} {path} (row {line}): a row must be a JSON object of columns, not "
                         f"{type(row).__name__}")
    if cfg.answer_field not in row:
        raise KeyError(f"task.answer_field: {cfg.answer_field!r} is not a column of {path} (row {line}); its columns "
                       f"are {sorted(row)}")
    try:
        prompt = cfg.prompt_template.format(**row)
    except KeyError as e:
        raise KeyError(f"task.prompt_template names {e.args[0]!r}, not a column of {path} (row {line}); its columns "
                       f"are {sorted(row)}") from None
    except (IndexError, AttributeError, ValueError, TypeError) as e:  # {0}, {a.b}, a stray brace
        raise ValueError(f"task.prompt_template {cfg.prompt_template!r} cannot be filled from row {line} of {path} "
                         f"({type(e).__name__}: {e}); name columns as {{column}} and double a literal brace") from None
    answer = str(row[cfg.answer_field]).strip()
    if not prompt.strip() or not answer:
        raise ValueError(f"{field} {path}:{line}: empty {'prompt' if answer else 'answer'}; remove the row or fill "
                         "it in")
    return Problem(prompt, answer, prompt, {k: v for k, v in row.items() if k != cfg.answer_field})


def problems(cfg: DatasetTaskConfig, field: str, path: str) -> list[Problem]:
    rows = load_rows(Path(path), field)
    if not rows:
        raise ValueError(f"{field} {path}: no rows")
    return [problem_from_row(r, n, cfg, field, path) for n, r in enumerate(rows, 1)]


class DatasetTask:
    name = "dataset"

    def __init__(self, cfg: DatasetTaskConfig, seed: int) -> None:
        self.spec, self.correct_threshold = cfg.reward, cfg.correct_threshold
        rows = problems(cfg, "task.path", cfg.path)
        if cfg.eval_path is not None:
            self._train, self._eval = rows, problems(cfg, "task.eval_path", cfg.eval_path)
        else:
            self._eval = [p for p in rows if in_eval_split(p.key, seed, cfg.eval_fraction)]
            self._train = [p for p in rows if not in_eval_split(p.key, seed, cfg.eval_fraction)]
            if not self._train or not self._eval:
                raise ValueError(f"task.eval_fraction={cfg.eval_fraction} leaves an empty split of {len(rows)} "
                                 "rows; add rows, change task.eval_fraction, or give task.eval_path")
        self._fn = load_reward(cfg.reward)
        self.pool = ThreadPoolExecutor(cfg.reward_threads, "reward") if cfg.reward_threads > 1 else None
        # the call every rollout makes, tried now on the first training row (its answer as the completion): a
        # mismatch with the data fails before Ray starts, not in a generator mid-run
        first = self._train[0]
        check_signature(self._fn, cfg.reward, first.columns)
        self.reward(first, first.answer)

    def sample_train(self, n: int, rng: np.random.Generator) -> list[Problem]:
        return [self._train[i] for i in rng.integers(0, len(self._train), size=n)]

    def eval_problems(self) -> list[Problem]:
        return self._eval

    def reward(self, problem: Problem, completion: str) -> float | None:
        where = f"prompt {problem.prompt[:60]!r}"
        try:
            value = self._fn(completion, problem.answer, **problem.columns)
        except Exception as e:  # noqa: BLE001 - the user's code: one line naming it and the row, not its traceback
            raise RewardHookError(f"task.reward {self.spec!r} raised {type(e).__name__} for {where}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''}") from None
        return checked_value(value, self.spec, where)

    def demonstration(self, problem: Problem) -> str | None:
        return None  # a reference answer is not a completion in the data's format: no warm start from it

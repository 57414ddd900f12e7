"""A user's own math dataset (JSONL or parquet with question/answer fields: GSM8K, OpenR1-Math, MATH ...).

The answer checker uses math-verify when installed (`pip install replay-rl[math]`) and otherwise compares the last
\\boxed{} (or last number) of the completion with the reference after light normalisation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from replay_rl.config import JsonlMathTaskConfig
from replay_rl.tasks.base import Problem, in_eval_split

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def load_rows(path: Path, field: str = "task.path") -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{field} {str(path)!r} not found; point it at a .jsonl or .parquet file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError(f"{field} is parquet: install pyarrow (pip install 'replay-rl[math]')") from e
        return pq.read_table(path).to_pylist()
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{field} {path}:{n}: not valid JSON ({e.msg})") from None
    return rows


def problem_from_row(row: dict, line: int, cfg: JsonlMathTaskConfig) -> Problem:
    """One checked row: both fields present and non-empty, so no problem is unanswerable (an empty gold answer could
    never be rewarded, and would only add zero-advantage groups)."""
    for name, field in (("question_field", cfg.question_field), ("answer_field", cfg.answer_field)):
        if field not in row:
            raise KeyError(f"task.{name}: {field!r} is not a column of {cfg.path} (row {line}); "
                           f"its columns are {sorted(row)}")
    question, answer = str(row[cfg.question_field]).strip(), reference_answer(row[cfg.answer_field])
    if not question or not answer:
        empty = "question" if not question else "answer"
        raise ValueError(f"task.path {cfg.path}:{line}: empty {empty}; remove the row or fill it in")
    return Problem(cfg.prompt_template.format(question=row[cfg.question_field]), answer, str(row[cfg.question_field]))


def reference_answer(raw: object) -> str:
    text = str(raw)
    if "####" in text:  # GSM8K puts the final answer after ####
        text = text.split("####")[-1]
    return last_boxed(text) or text.strip()


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth < 0:
            return text[i:j].strip()  # may be "": the caller treats an empty box as no answer
    return None


def extract_answer(completion: str) -> str | None:
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def normalise_answer(s: str) -> str:
    s = s.strip().strip("$").replace(",", "").replace(" ", "").rstrip(".")
    try:
        return repr(float(s))
    except ValueError:
        return s


class JsonlMathTask:
    name = "jsonl_math"
    correct_threshold = 1.0
    pool = None

    def __init__(self, cfg: JsonlMathTaskConfig, seed: int) -> None:
        rows = load_rows(Path(cfg.path))
        if not rows:
            raise ValueError(f"task.path {cfg.path}: no rows")
        problems = [problem_from_row(r, n, cfg) for n, r in enumerate(rows, 1)]
        self._eval = [p for p in problems if in_eval_split(p.key, seed, cfg.eval_fraction)]
        self._train = [p for p in problems if not in_eval_split(p.key, seed, cfg.eval_fraction)]
        if not self._train or not self._eval:
            raise ValueError(f"task.eval_fraction={cfg.eval_fraction} leaves an empty split of {len(rows)} rows; "
                             "add rows or change task.eval_fraction")
        try:
            from math_verify import parse, verify
            self._verify = lambda gold, pred: bool(verify(parse(f"${gold}$"), parse(f"${pred}$")))
        except ImportError:
            self._verify = None

    def sample_train(self, n: int, rng: np.random.Generator) -> list[Problem]:
        return [self._train[i] for i in rng.integers(0, len(self._train), size=n)]

    def eval_problems(self) -> list[Problem]:
        return self._eval

    def reward(self, problem: Problem, completion: str) -> float:
        pred = extract_answer(completion)
        if pred is None or not pred.strip():  # an empty box is no answer, whatever a checker makes of it
            return 0.0
        if self._verify is not None:
            return 1.0 if self._verify(problem.answer, pred) else 0.0
        return 1.0 if normalise_answer(pred) == normalise_answer(problem.answer) else 0.0

    def demonstration(self, problem: Problem) -> str:
        return f" \\boxed{{{problem.answer}}}"

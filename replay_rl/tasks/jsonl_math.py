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


def load_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"task.path {str(path)!r} not found; point it at a .jsonl or .parquet file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError("task.path is parquet: install pyarrow (pip install 'replay-rl[math]')") from e
        return pq.read_table(path).to_pylist()
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"task.path {path}:{n}: not valid JSON ({e.msg})") from None
    return rows


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
            return text[i:j].strip()
    return None


def extract_answer(completion: str) -> str | None:
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def _normalise(s: str) -> str:
    s = s.strip().strip("$").replace(",", "").replace(" ", "").rstrip(".")
    try:
        return repr(float(s))
    except ValueError:
        return s


class JsonlMathTask:
    name = "jsonl_math"
    correct_threshold = 1.0

    def __init__(self, cfg: JsonlMathTaskConfig, seed: int) -> None:
        rows = load_rows(Path(cfg.path))
        if not rows:
            raise ValueError(f"task.path {cfg.path}: no rows")
        for field in (cfg.question_field, cfg.answer_field):
            if field not in rows[0]:
                raise KeyError(f"task.{'question' if field == cfg.question_field else 'answer'}_field: {field!r} "
                               f"is not a column of {cfg.path}; columns are {sorted(rows[0])}")
        problems = [Problem(cfg.prompt_template.format(question=r[cfg.question_field]),
                            reference_answer(r[cfg.answer_field]), str(r[cfg.question_field])) for r in rows]
        self._eval = [p for p in problems if in_eval_split(p.key, seed, cfg.eval_fraction)]
        self._train = [p for p in problems if not in_eval_split(p.key, seed, cfg.eval_fraction)]
        if not self._train or not self._eval:
            raise ValueError(f"task.eval_fraction={cfg.eval_fraction} leaves an empty split of {len(rows)} rows")
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
        if pred is None:
            return 0.0
        if self._verify is not None:
            return 1.0 if self._verify(problem.answer, pred) else 0.0
        return 1.0 if _normalise(pred) == _normalise(problem.answer) else 0.0

    def demonstration(self, problem: Problem) -> str:
        return f" \\boxed{{{problem.answer}}}"

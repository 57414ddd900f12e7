"""Tasks and their rewards: one section per task, chosen by `type`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, field_validator

from replay_rl.config.base import _Section


class _TaskCommon(_Section):
    split_seed: int = 0
    """Seed of the train/held-out split and of the eval set. Not run.seed: every run of a study (any seed, LR or
    buffer) and the warm start must share one held-out set, or a seed's eval problems were warm-start training data
    and runs would be scored on different problems (seen: step-0 pass@1 0.377 / 0.405 / 0.449 for seeds 0 / 1 / 2)."""


class ArithmeticTaskConfig(_TaskCommon):
    type: Literal["arithmetic"] = "arithmetic"
    """Integer sums (`12+34=`), reward 1 for the exact answer. The CPU testbed."""
    digits: int = Field(2, ge=1, le=6)
    """Difficulty knob: digits per operand."""
    operands: int = Field(2, ge=2, le=4)
    """Numbers added per problem; more is harder."""
    eval_size: int = Field(1000, ge=1)
    """Held-out problems (at most what the split holds: about 1000 for 2 digits)."""
    prompt_template: str = "{expr}="
    """The prompt text, with `{expr}` the sum (`12+34`). An instruct model is asked in words, e.g. "What is
    {expr}? Answer with just the number.", and model.chat_template wraps it as a user turn."""
    answer: Literal["exact", "last_number"] = "exact"
    """How a completion is read. exact: the whole completion, stripped, must be the sum (a model taught the
    format). last_number: the last number written ("12+34 = 46." reads 46), as a user reads a chatty answer."""

    @field_validator("prompt_template")
    @classmethod
    def _asks_the_sum(cls, template: str) -> str:
        # without {expr} every problem would get the same prompt; another {name} would fail at the first prompt
        try:
            asked = template.format(expr="12+34")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"{template!r} must hold only {{expr}} (write a literal brace as {{{{ or }}}}): {e!r}")
        if "12+34" not in asked:
            raise ValueError(f"{template!r} must hold {{expr}}, where the sum goes")
        return template


class CountdownTaskConfig(_TaskCommon):
    type: Literal["countdown"] = "countdown"
    """Combine the given numbers with + − × to reach the target; reward 1 for a valid expression."""
    numbers: int = Field(3, ge=2, le=5)
    """Difficulty knob: how many numbers must be combined."""
    max_number: int = Field(20, ge=2, le=99)
    """Largest number drawn; larger makes targets harder to hit. The problem space (distinct numbers + target) at
    3 numbers: 1386 problems at 9 (≈140 held out, eval noise σ ≈ 0.04), 15004 at 20 (≈1500 held out; solutions
    of 5–8 characters); 4 numbers ≤ 9: 12216 (7-character solutions)."""
    eval_size: int = Field(1000, ge=1)
    """Held-out problems for evaluation (at most what the split holds: about a tenth of the space above)."""


class JsonlMathTaskConfig(_TaskCommon):
    type: Literal["jsonl_math"] = "jsonl_math"
    """Math word problems from a local file, reward 1 when the last \\boxed{} matches the answer."""
    path: str
    """A .jsonl or .parquet file of math problems (GSM8K / OpenR1-Math style)."""
    question_field: str = "question"
    """Column holding the problem text."""
    answer_field: str = "answer"
    """Column holding the gold answer (a number or a LaTeX expression; `####` suffixes are read)."""
    eval_fraction: float = Field(0.05, gt=0, lt=1)
    """Share of rows held out for evaluation (a seeded split, the same every run)."""
    prompt_template: str = "{question}\nPut the final answer in \\boxed{{}}.\n"
    """Python format string for the prompt; `{question}` is replaced, literal braces are doubled."""


def absolute_if_file(path: str) -> str:
    """A file path made absolute where the config is read (Ray's actors do not share the driver's working
    directory); anything else as given, for its own check to name."""
    return str(Path(path).resolve()) if Path(path).is_file() else path


class DatasetTaskConfig(_TaskCommon):
    type: Literal["dataset"] = "dataset"
    """Your own data and reward: rows of a JSONL or parquet file, each scored by your function (`reward`)."""
    path: str
    """The training rows: a .jsonl or .parquet file, one problem per row."""
    eval_path: str | None = None
    """The held-out rows, from a file of their own (a dataset's test split). None: a seeded `eval_fraction` of
    `path`, the same in every run."""
    eval_fraction: float = Field(0.05, gt=0, lt=1)
    """Share of `path`'s rows held out for evaluation when `eval_path` is unset."""
    prompt_template: str = "{question}"
    """The prompt: a Python format string over the row's columns (`{question}`; a literal brace is doubled)."""
    answer_field: str = "answer"
    """The column handed to the reward as `answer` (the reference); every other column goes to it by its name."""
    reward: str = "replay_rl.tasks.rewards:boxed_match"
    """Your reward function, `package.module:function` or `path/to/file.py:function`, called as
    `f(completion, answer, **columns)` and returning a number in [0, 1], or None where it does not apply (left out
    of its group's advantage; 0 in evals). Checked before Ray starts on the first training row. The default: 1
    when the completion's last \\boxed{} (or last number) equals the answer."""
    correct_threshold: float = Field(1.0, gt=0, le=1)
    """A reward at or above this counts as a correct completion (pass@k, the reward-rate metrics)."""
    reward_threads: int = Field(1, ge=1, le=256)
    """How many of a generator call's completions (and of an eval's) are scored at once, in threads: raise it for a
    reward that waits (a sandbox, a service, a subprocess). A reward that computes in Python holds the GIL and gains
    nothing. Above 1 the reward must be thread-safe, and cannot time itself out with signals (SIGALRM works only in
    the main thread). 1: inline."""

    @field_validator("path", "eval_path")
    @classmethod
    def _absolute(cls, path: str | None) -> str | None:
        return None if path is None else absolute_if_file(path)

    @field_validator("reward")
    @classmethod
    def _module_and_function(cls, spec: str) -> str:
        where, _, name = spec.rpartition(":")
        if not where or not name.isidentifier():
            raise ValueError(f"{spec!r} must be package.module:function or path/to/file.py:function")
        return f"{absolute_if_file(where)}:{name}" if where.endswith(".py") else spec


TaskConfig = Annotated[
    Union[ArithmeticTaskConfig, CountdownTaskConfig, JsonlMathTaskConfig, DatasetTaskConfig],
    Field(discriminator="type")
]

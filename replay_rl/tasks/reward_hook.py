"""A user's reward function, named by `package.module:function` or `path/to/file.py:function` (task.reward), called
as `f(completion, answer, **columns)` for a number in [0, 1], or None where it does not apply. Every way it can be
wrong is one line naming it: an import that fails, a name that is not a function, a signature the row's columns do
not fit, a value that is neither a number in [0, 1] nor None."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
from pathlib import Path
from typing import Callable

RewardFn = Callable[..., float]


class RewardHookError(ValueError):
    """The reward function cannot be had or called as task.reward promises (one line, naming it)."""


def load_reward(spec: str) -> RewardFn:
    where, _, name = spec.rpartition(":")
    try:
        module = _module_from_file(where) if where.endswith(".py") else importlib.import_module(where)
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises on import is the one line
        raise RewardHookError(f"task.reward {spec!r}: importing {where} failed: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise RewardHookError(f"task.reward {spec!r}: {where} has no function {name!r}"
                              + ("" if fn is None else f" ({name} is a {type(fn).__name__})"))
    return fn


def _module_from_file(path: str):
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no file {path}")
    # one module per file, under a name no package uses: two runs' reward.py files stay apart
    name = "replay_rl_reward_" + hashlib.blake2b(str(file.resolve()).encode(), digest_size=6).hexdigest()
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before it runs: a dataclass in it looks its module up there
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def check_signature(fn: RewardFn, spec: str, columns: dict) -> None:
    """The call a row makes must bind: completion and answer by position, the other columns by name."""
    if clash := sorted({"completion", "answer"} & set(columns)):
        raise RewardHookError(f"task.reward {spec!r}: the data's column {clash[0]!r} would arrive twice (the reward "
                              "takes completion and answer by position); rename the column"
                              + (", or set task.answer_field=answer" if clash[0] == "answer" else ""))
    try:
        inspect.signature(fn).bind("", "", **columns)
    except TypeError as e:
        raise RewardHookError(f"task.reward {spec!r}: cannot be called as f(completion, answer, **columns) with "
                              f"this data's columns {sorted(columns)}: {e}; add **columns to its parameters") from None
    except ValueError:  # a builtin without a signature: the first call tells
        pass


def checked_value(value: object, spec: str, where: str) -> float | None:
    """value as a float, None (not applicable) as is, or one line: a non-number, NaN or a value outside [0, 1]."""
    if value is None:
        return None
    try:  # a bool is 0 or 1; a one-element array or tensor is its number
        number = float(value) if isinstance(value, (int, float)) or hasattr(value, "__float__") else None
    except (TypeError, ValueError):
        number = None
    if number is None:
        raise RewardHookError(f"task.reward {spec!r} returned {str(value)[:60]!r} ({type(value).__name__}) for "
                              f"{where}; it must return a number in [0, 1], or None where it does not apply")
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise RewardHookError(f"task.reward {spec!r} returned {number!r} for {where}; it must return a finite "
                              "number in [0, 1]")
    return number

"""A reward in a user's own file, named in the config as task.reward: examples/word_problem_reward.py:reward.

replay-rl calls it as reward(completion, answer, **columns): `answer` is the row's answer column, and every other
column of the row (here `question` and `operation`) arrives by name. It returns a number in [0, 1]."""

import re


def reward(completion: str, answer: str, **columns) -> float:
    """1 for the right number as the last number written; 0.1 for another number (the format, not the sum); 0 for
    none."""
    numbers = re.findall(r"-?\d+", completion.replace(",", ""))
    if not numbers:
        return 0.0
    return 1.0 if int(numbers[-1]) == int(answer) else 0.1

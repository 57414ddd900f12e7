"""Tasks with verifiable rewards; `make_task` picks one by the config's `type`."""

from __future__ import annotations

from replay_rl.config import TaskConfig
from replay_rl.tasks.base import Problem, RewardError, Task, checked_reward, rollout_reward

__all__ = ["Problem", "RewardError", "Task", "checked_reward", "make_task", "rollout_reward"]


def make_task(cfg: TaskConfig, seed: int) -> Task:
    match cfg.type:
        case "arithmetic":
            from replay_rl.tasks.arithmetic import ArithmeticTask
            return ArithmeticTask(cfg, seed)
        case "countdown":
            from replay_rl.tasks.countdown import CountdownTask
            return CountdownTask(cfg, seed)
        case "jsonl_math":
            from replay_rl.tasks.jsonl_math import JsonlMathTask
            return JsonlMathTask(cfg, seed)
        case "dataset":
            from replay_rl.tasks.dataset import DatasetTask
            return DatasetTask(cfg, seed)

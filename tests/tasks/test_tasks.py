import json
import math
from pathlib import Path

import numpy as np
import pytest

from replay_rl.config import ArithmeticTaskConfig, CountdownTaskConfig, JsonlMathTaskConfig, RunConfig
from replay_rl.tasks import Problem, RewardError, checked_reward, make_task
from replay_rl.tasks.countdown import evaluate


def test_arithmetic_reward_and_split():
    task = make_task(ArithmeticTaskConfig(digits=2), seed=0)
    p = Problem("12+34=", "46", "12+34=")
    assert task.reward(p, "46") == 1.0 and task.reward(p, " 46 ") == 1.0
    assert task.reward(p, "47") == 0.0 and task.reward(p, "4") == 0.0 and task.reward(p, "") == 0.0
    evals = {q.key for q in task.eval_problems()}
    train = {q.key for q in task.sample_train(2000, np.random.default_rng(1))}
    assert len(evals) == 1000 and not evals & train
    assert all(task.reward(q, task.demonstration(q)) == 1.0 for q in task.eval_problems())
    assert [q.key for q in make_task(ArithmeticTaskConfig(digits=2), 0).eval_problems()] == \
        [q.key for q in task.eval_problems()]  # split is a function of the seed
    assert {q.key for q in make_task(ArithmeticTaskConfig(digits=2), 1).eval_problems()} != evals


def test_countdown_verifier():
    task = make_task(CountdownTaskConfig(numbers=3), seed=0)
    p = Problem("3 5 7:22=", "3*5+7", "3 5 7:22=")
    assert task.reward(p, "3*5+7") == 1.0 and task.reward(p, "7+5*3") == 1.0
    assert task.reward(p, "3*5+8") == 0.0        # a number not offered
    assert task.reward(p, "7+7+7+1") == 0.0      # reuse / foreign numbers
    assert task.reward(p, "3*5") == 0.0          # wrong value
    assert task.reward(p, "__import__('os')") == 0.0 and task.reward(p, "3*") == 0.0
    assert evaluate("7/2*2")[0] == 7 and evaluate("1/0") is None
    assert all(task.reward(q, task.demonstration(q)) == 1.0 for q in task.eval_problems())


def test_countdown_config_holds_out_1000_distinct_solvable_problems():
    cfg = RunConfig.load(Path(__file__).parents[2] / "configs" / "tiny_cpu_countdown.yaml")
    task = make_task(cfg.task, seed=0)
    evals = task.eval_problems()
    keys = {q.key for q in evals}
    assert len(keys) == len(evals) >= 1000
    train = {q.key for q in task.sample_train(5000, np.random.default_rng(1))}
    assert not keys & train
    assert all(task.reward(q, task.demonstration(q)) == 1.0 for q in evals)  # solvable by construction
    # the demonstration and its EOS fit the completion budget: 3 numbers ≤ 20 are 5–8 characters
    assert max(len(task.demonstration(q)) for q in evals) + 1 <= cfg.generation.max_new_tokens


def test_jsonl_math_loader_and_checker(tmp_path):
    rows = [{"question": f"What is {i}+{i}?", "answer": f"Double it.\n#### {2 * i}"} for i in range(200)]
    path = tmp_path / "gsm.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    task = make_task(JsonlMathTaskConfig(path=str(path), eval_fraction=0.1), seed=0)
    assert 5 < len(task.eval_problems()) < 40
    p = next(q for q in task.eval_problems())
    assert task.reward(p, f"so the answer is \\boxed{{{p.answer}}}") == 1.0
    assert task.reward(p, f"... {p.answer}") == 1.0            # last number, no box
    assert task.reward(p, "\\boxed{-1}") == 0.0 and task.reward(p, "no idea") == 0.0
    with pytest.raises(KeyError, match="task.answer_field: 'solution'"):
        make_task(JsonlMathTaskConfig(path=str(path), answer_field="solution"), seed=0)
    with pytest.raises(FileNotFoundError, match="task.path"):
        make_task(JsonlMathTaskConfig(path=str(tmp_path / "nope.jsonl")), seed=0)


class BrokenTask:
    name = "broken"
    correct_threshold = 1.0

    def reward(self, problem, completion):
        return {"a": 1.5, "b": float("nan"), "c": "1", "none": None}[completion]


@pytest.mark.parametrize("completion", ["a", "b", "c"])
def test_bad_reward_values_fail_loudly(completion):
    with pytest.raises(RewardError, match="task 'broken'.*finite float in \\[0, 1\\]"):
        checked_reward(BrokenTask(), Problem("x", "y", "x"), completion)


def test_a_reward_that_does_not_apply_is_nan_not_an_error():
    assert math.isnan(checked_reward(BrokenTask(), Problem("x", "y", "x"), "none"))


def test_jsonl_math_empty_box_never_scores(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(50)))
    task = make_task(JsonlMathTaskConfig(path=str(path), eval_fraction=0.2), seed=0)
    p = task.eval_problems()[0]
    for hack in ("\\boxed{}", "\\boxed{   }", f"{p.answer} then \\boxed{{}}"):
        assert task.reward(p, hack) == 0.0, hack
    assert task.reward(p, f"\\boxed{{ {p.answer} }}") == 1.0


@pytest.mark.parametrize("bad_row, message", [
    ({"question": "q", "answer": ""}, r"m.jsonl:3: empty answer"),
    ({"question": "q", "answer": "#### "}, r"m.jsonl:3: empty answer"),
    ({"question": "  ", "answer": "4"}, r"m.jsonl:3: empty question"),
])
def test_jsonl_math_rejects_empty_fields_at_load(tmp_path, bad_row, message):
    rows = [{"question": "a", "answer": "1"}, {"question": "b", "answer": "2"}, bad_row]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=message):
        make_task(JsonlMathTaskConfig(path=str(path)), seed=0)


def test_jsonl_math_names_the_row_missing_a_field(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"question": "a", "answer": "1"}) + "\n" + json.dumps({"question": "b"}))
    with pytest.raises(KeyError, match=r"task.answer_field: 'answer' is not a column .* \(row 2\)"):
        make_task(JsonlMathTaskConfig(path=str(path)), seed=0)


def test_arithmetic_asked_in_words_is_read_by_its_last_number_on_the_same_split():
    words = make_task(ArithmeticTaskConfig(digits=2, prompt_template="What is {expr}? Answer with just the number.",
                                           answer="last_number"), seed=0)
    p = words.eval_problems()[0]
    assert p.prompt.startswith("What is ") and p.key.endswith("=")
    assert [q.key for q in words.eval_problems()] == [q.key for q in make_task(ArithmeticTaskConfig(digits=2), 0)
                                                      .eval_problems()]  # the wording does not move the split
    assert words.reward(p, f"The answer is {p.answer}.") == 1.0 and words.reward(p, p.answer) == 1.0
    assert words.reward(p, f"{p.answer} - 1 = {int(p.answer) - 1}") == 0.0 and words.reward(p, "no idea") == 0.0
    assert words.reward(Problem("", "1234", ""), "= 1,234.") == 1.0


def test_zero_variance_groups_are_those_whose_rewards_are_all_equal():
    from replay_rl.rollout import Rollout
    from replay_rl.tasks.scoring import zero_variance_groups

    def group(rewards):
        return [Rollout(np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32), r, 0.0, 0.0, False,
                        0, 0, 0, 0, 0, 0) for r in rewards]

    rollouts = group([0, 0, 0]) + group([1, 0, 1]) + group([1, 1, 1]) + group([0.5, 0.5, 0.5])
    assert zero_variance_groups(rollouts, 3) == 3 and zero_variance_groups(group([1, 0, 1]), 3) == 0

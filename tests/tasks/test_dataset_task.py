"""task.type=dataset: your rows and your reward function. The shipped example (examples/word_problems, a reward in
its own file) scores completions through the generator's own scoring code with a real tokenizer, every other column
reaching the reward by name; each way a reward hook can be wrong is one line and exit 2 before Ray starts."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replay_rl.config import RunConfig
from replay_rl.generation.backend import Completion
from replay_rl.rollout import FINISH_STOP
from replay_rl.tasks import make_task
from replay_rl.tasks.scoring import score_groups

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "smollm2_word_problems_cpu.yaml"


def test_the_example_scores_completions_through_the_users_reward_with_every_column(warm_model, tmp_path):
    from replay_rl.models.hf_folder import load_tokenizer

    seen = tmp_path / "seen.py"  # a reward that records what it was given, as a user's would read it
    seen.write_text("import json\nCALLS = []\n\ndef reward(completion, answer, **columns):\n"
                    "    CALLS.append({'completion': completion, 'answer': answer, **columns})\n"
                    "    return 1.0 if completion.strip() == answer else 0.0\n")
    cfg = RunConfig.load(str(EXAMPLE), [f"task.reward={seen}:reward"])
    task = make_task(cfg.task, cfg.task.split_seed)
    assert len(task.eval_problems()) == 200  # the test file, not a share of the training file
    assert not {p.key for p in task.eval_problems()} & {p.key for p in task.sample_train(600, np.random.default_rng(0))}
    tokenizer = load_tokenizer(warm_model[0])
    problem = task.eval_problems()[0]
    texts = [problem.answer, "unknown"]
    ids = [np.asarray(tokenizer(t, add_special_tokens=False)["input_ids"], np.int32) for t in texts]
    group = [Completion(i, np.zeros(len(i), np.float32), FINISH_STOP, 0) for i in ids]
    (right, wrong) = score_groups(task, tokenizer, [problem], [np.zeros(1, np.int32)], [group], [0],
                                  lambda c: (0, 0, 0), 0)
    assert (right.reward, wrong.reward, right.correct, wrong.correct) == (1.0, 0.0, True, False)
    assert right.advantage > 0 > wrong.advantage
    calls = task._fn.__globals__["CALLS"]  # the reward module's own record
    assert calls[-1]["answer"] == problem.answer and calls[-1]["question"] in problem.prompt
    assert calls[-1]["operation"] in ("add", "subtract", "multiply") and calls[-1]["completion"] == "unknown"


def test_the_shipped_reward_file_gives_partial_credit_for_the_format():
    cfg = RunConfig.load(str(EXAMPLE), [])
    task = make_task(cfg.task, 0)
    problem = task.eval_problems()[0]
    assert [task.reward(problem, c) for c in (f"It is {problem.answer}.", "It is 1000.", "I do not know")] == [
        1.0, 0.1, 0.0]


def test_without_an_eval_file_a_seeded_share_of_the_rows_is_held_out():
    cfg = RunConfig.load(str(EXAMPLE), ["task.eval_path=null", "task.eval_fraction=0.1"])
    a, b = make_task(cfg.task, 0), make_task(cfg.task, 0)
    assert [p.key for p in a.eval_problems()] == [p.key for p in b.eval_problems()]
    assert 30 < len(a.eval_problems()) < 90


REWARDS = {  # a reward file's body → what its one line says
    "import error": ("import nosuchmodule\ndef reward(c, a, **k):\n    return 1.0\n",
                     "importing {file} failed: ModuleNotFoundError: No module named 'nosuchmodule'"),
    "no such function": ("def score(c, a, **k):\n    return 1.0\n", "has no function 'reward'"),
    "not a function": ("reward = 3\n", "has no function 'reward' (reward is a int)"),
    "wrong signature": ("def reward(completion, answer):\n    return 1.0\n",
                        "cannot be called as f(completion, answer, **columns) with this data's columns"),
    "a string": ("def reward(c, a, **k):\n    return '1'\n", "returned '1' (str)"),
    "NaN": ("def reward(c, a, **k):\n    return float('nan')\n", "returned nan"),
    "out of range": ("def reward(c, a, **k):\n    return 5\n", "returned 5.0"),
    "raises": ("def reward(c, a, **k):\n    return 1 / 0\n", "raised ZeroDivisionError"),
}


@pytest.mark.parametrize("case", sorted(REWARDS))
def test_each_reward_hook_mistake_is_one_line_before_ray(tmp_path, case):
    body, expected = REWARDS[case]
    file = tmp_path / "my_reward.py"
    file.write_text(body)
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-c", str(EXAMPLE),
                           "-s", f"task.reward={file}:reward", "-s", f"model.build_dir={tmp_path / 'model'}",
                           "-s", f"run.output_dir={tmp_path / 'run'}"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"task.reward '{file}:reward'") and expected.format(file=file) in lines[0], lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "model").exists()


@pytest.mark.parametrize("spec, expected", [
    ("no_colon", "must be package.module:function or path/to/file.py:function"),
    ("nosuch.module:reward", "task.reward 'nosuch.module:reward': importing nosuch.module failed"),
    ("missing_file.py:reward", "importing missing_file.py failed: FileNotFoundError"),
])
def test_a_reward_that_names_nothing_is_one_line(tmp_path, spec, expected):
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-c", str(EXAMPLE), "-s",
                           f"task.reward={spec}", "-s", f"model.build_dir={tmp_path / 'model'}"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and expected in line, line


@pytest.mark.parametrize("built", [False, True])
def test_a_tiny_model_cannot_be_warm_started_on_a_dataset(tmp_path, built):
    """Refused whether or not its build_dir holds a tiny model already (the default's does, after a first run)."""
    if built:
        (tmp_path / "m").mkdir()
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-c", str(EXAMPLE), "-s", "model.build=tiny",
                           "-s", f"model.build_dir={tmp_path / 'm'}"], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("model.build=tiny warm-starts on the task's own demonstrations")


def test_a_reward_file_with_a_dataclass_imports_and_a_bool_is_a_number(tmp_path):
    file = tmp_path / "typed.py"  # a dataclass looks its module up in sys.modules while the file runs
    file.write_text("from __future__ import annotations\nfrom dataclasses import dataclass\n\n@dataclass\n"
                    "class Verdict:\n    ok: bool\n\ndef reward(completion, answer, **columns):\n"
                    "    return Verdict(completion.strip() == answer).ok\n")
    task = make_task(RunConfig.load(str(EXAMPLE), [f"task.reward={file}:reward"]).task, 0)
    problem = task.eval_problems()[0]
    assert (task.reward(problem, problem.answer), task.reward(problem, "no")) == (1.0, 0.0)


def test_a_column_named_like_a_positional_argument_is_named(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}?", "solution": str(i), "answer": "x"}) + "\n"
                            for i in range(40)))
    cfg = RunConfig.load(str(EXAMPLE), [f"task.path={data}", f"task.eval_path={data}", "task.answer_field=solution"])
    with pytest.raises(ValueError, match="column 'answer' would arrive twice.*or set task.answer_field=answer"):
        make_task(cfg.task, 0)


def test_rows_that_do_not_fit_the_template_or_answer_are_named(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}?", "a": str(i)}) + "\n" for i in range(40)))
    for override, expected in (("task.answer_field=answer", "task.answer_field: 'answer' is not a column"),
                               ("task.answer_field=a", "task.prompt_template names 'question', not a column")):
        cfg = RunConfig.load(str(EXAMPLE), [f"task.path={data}", "task.eval_path=null", override])
        with pytest.raises(KeyError, match=expected):
            make_task(cfg.task, 0)
    for template in ("{0}", "{q.real}", "{q"):
        cfg = RunConfig.load(str(EXAMPLE), [f"task.path={data}", "task.eval_path=null", "task.answer_field=a",
                                            f"task.prompt_template='{template}'"])
        with pytest.raises(ValueError, match=r"task.prompt_template .* cannot be filled from row 1"):
            make_task(cfg.task, 0)
    listed = tmp_path / "lists.jsonl"
    listed.write_text('["q", "a"]\n')
    cfg = RunConfig.load(str(EXAMPLE), [f"task.path={listed}", "task.eval_path=null"])
    with pytest.raises(ValueError, match=r"row 1\): a row must be a JSON object of columns, not list"):
        make_task(cfg.task, 0)


def test_reward_threads_score_a_calls_completions_at_once(warm_model, tmp_path):
    """Eight completions meet at a barrier inside the reward: scored one after another, the first would wait there
    alone until the barrier breaks (BrokenBarrierError, named as the reward's exception); with reward_threads=8 all
    eight are in the reward together."""
    from replay_rl.models.hf_folder import load_tokenizer
    from replay_rl.tasks.scoring import completion_rewards

    file = tmp_path / "meet.py"  # the first-row check passes the answer as the completion: it skips the barrier
    file.write_text("import threading\nBARRIER = threading.Barrier(8, timeout=20)\n\n"
                    "def reward(completion, answer, **columns):\n    if completion == answer:\n        return 0.0\n"
                    "    BARRIER.wait()\n    return 1.0\n")
    cfg = RunConfig.load(str(EXAMPLE), [f"task.reward={file}:reward", "task.reward_threads=8"])
    task = make_task(cfg.task, 0)
    tokenizer = load_tokenizer(warm_model[0])
    ids = np.asarray(tokenizer("x", add_special_tokens=False)["input_ids"], np.int32)
    call = [(p, Completion(ids, np.zeros(len(ids), np.float32), FINISH_STOP, 0)) for p in task.eval_problems()[:8]]
    assert completion_rewards(task, tokenizer, call) == [1.0] * 8


def test_a_reward_that_does_not_apply_is_left_out_of_its_groups_advantage(warm_model, tmp_path):
    """None for one completion of four: its advantage and reward are 0, and the other three are normalised among
    themselves, as a group of three would be."""
    from replay_rl.models.hf_folder import load_tokenizer
    from replay_rl.rollout import group_advantages

    file = tmp_path / "partial.py"  # "1", "5", "9" score by value; nothing else applies
    file.write_text("def reward(completion, answer, **columns):\n"
                    "    return int(completion) / 10 if completion in ('1', '5', '9') else None\n")
    task = make_task(RunConfig.load(str(EXAMPLE), [f"task.reward={file}:reward"]).task, 0)
    tokenizer = load_tokenizer(warm_model[0])
    texts = ["x", "1", "5", "9"]
    ids = [np.asarray(tokenizer(t, add_special_tokens=False)["input_ids"], np.int32) for t in texts]
    group = [Completion(i, np.zeros(len(i), np.float32), FINISH_STOP, 0) for i in ids]
    rollouts = score_groups(task, tokenizer, [task.eval_problems()[0]], [np.zeros(1, np.int32)], [group], [0],
                            lambda c: (0, 0, 0), 0)
    assert [r.reward for r in rollouts] == pytest.approx([0.0, 0.1, 0.5, 0.9])
    assert rollouts[0].advantage == 0 and not rollouts[0].correct
    assert [r.advantage for r in rollouts[1:]] == pytest.approx(list(group_advantages(np.array([0.1, 0.5, 0.9]))))
    assert rollouts[1].baseline == pytest.approx(0.5)

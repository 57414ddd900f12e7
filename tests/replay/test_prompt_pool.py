"""Tier 0: prompt replay's pool (generation.prompt_replay) on the real arithmetic task: what it admits, what it
serves first, when a prompt leaves, and that the rest of a call stays fresh."""

import json

import numpy as np
import pytest

from replay_rl.config import ConfigError, RunConfig
from replay_rl.replay.prompt_pool import FreshPrompts, PromptReplay, prompt_source
from replay_rl.tasks import make_task

TASK = make_task(RunConfig.load("configs/tiny_cpu.yaml", []).task, 0)  # the study's arithmetic


def pool(share=0.5, capacity=8, max_visits=4) -> PromptReplay:
    return PromptReplay(TASK, share, capacity, max_visits)


def test_only_groups_with_mixed_rewards_are_admitted_and_the_nearest_a_half_come_back_first():
    p, rng = pool(share=1.0), np.random.default_rng(0)
    problems = p.draw(4, rng)  # an empty pool: all fresh
    assert p.replayed == 0 and len(problems) == 4
    p.observe(problems, [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
    # all solved and all failed teach GRPO nothing: only the mixed two, the 50% one first
    assert p.draw(4, rng)[:2] == [problems[3], problems[2]]
    assert p.replayed == 2


def test_a_call_takes_at_most_share_of_its_prompts_from_the_pool_and_the_rest_fresh():
    p, rng = pool(share=0.5), np.random.default_rng(1)
    first = p.draw(4, rng)
    p.observe(first, [[1, 0]] * 4)
    second = p.draw(4, rng)
    assert second[:2] == first[:2] and not set(map(id, second[2:])) & set(map(id, first))
    assert p.replayed == 2


def test_a_prompt_leaves_once_solved_or_after_max_visits():
    p, rng = pool(share=1.0, max_visits=2), np.random.default_rng(2)
    (x,) = p.draw(1, rng)
    p.observe([x], [[1, 0]])
    for _ in range(2):  # drawn again twice, mixed each time
        assert p.draw(1, rng) == [x]
        p.observe([x], [[1, 0]])
    assert p.draw(1, rng) != [x]  # its visits are used up
    y = p.draw(1, rng)[0]
    p.observe([y], [[1, 0]])
    assert p.draw(1, rng) == [y]
    p.observe([y], [[1, 1]])  # solved: it graduates
    assert p.draw(1, rng) != [y]


def test_a_full_pool_keeps_the_prompts_nearest_a_half():
    p, rng = pool(capacity=2), np.random.default_rng(3)
    problems = p.draw(3, rng)
    p.observe(problems, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])  # spreads 0.43, 0.5, 0.43
    assert set(p.pool) == {problems[0].key, problems[1].key}  # of the two equal ones, the oldest stays


def test_no_eval_prompt_enters_the_pool():
    p, rng = pool(share=0.5, capacity=1000), np.random.default_rng(4)
    for _ in range(50):
        drawn = p.draw(8, rng)
        p.observe(drawn, [[1, 0]] * len(drawn))
    held_out = {q.prompt for q in TASK.eval_problems()}
    assert p.pool and not {e.problem.prompt for e in p.pool.values()} & held_out


def test_a_dataset_task_that_hands_out_the_same_problem_again_keeps_one_entry_per_prompt(tmp_path):
    """A dataset task returns its cached rows, drawn with replacement: the pool must count visits per prompt, not
    admit a copy each time a pooled prompt is drawn fresh."""
    rows = [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(3)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": "What is 9+1?", "answer": "10"}) + "\n")
    task = make_task(RunConfig.load(None, ["task.type=dataset", f"task.path={tmp_path / 'train.jsonl'}",
                                           f"task.eval_path={tmp_path / 'test.jsonl'}"]).task, 0)
    p, rng = PromptReplay(task, share=0.5, capacity=256, max_visits=2), np.random.default_rng(0)
    for _ in range(30):
        drawn = p.draw(4, rng)
        p.observe(drawn, [[1, 0]] * len(drawn))  # every group mixed
    assert len(p.pool) <= 3 and all(e.visits < 2 for e in p.pool.values())
    assert p.replayed <= 30 * 2


def test_the_config_picks_the_source_and_refuses_a_share_under_one_prompt():
    assert isinstance(prompt_source(TASK, None), FreshPrompts)
    cfg = RunConfig.load(None, ["generation.prompt_replay={share: 0.5}"])
    assert isinstance(prompt_source(TASK, cfg.generation.prompt_replay), PromptReplay)
    with pytest.raises(ConfigError, match=r"generation.prompt_replay.share=0.25 of prompts_per_call=2 is under one"):
        RunConfig.load(None, ["generation.prompt_replay={share: 0.25}", "generation.prompts_per_call=2"])

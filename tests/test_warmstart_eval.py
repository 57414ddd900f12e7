import pytest

from replay_rl.evaluation import evaluate, pass_at_k
from replay_rl.generation.hf import HFBackend
from replay_rl.models import load_tokenizer
from replay_rl.tasks import make_task


def test_pass_at_k_estimator():
    assert pass_at_k(4, 0, 1) == 0 and pass_at_k(4, 4, 4) == 1
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)


def test_warmstart_lifts_accuracy_from_zero(tiny_cfg, init_model, warm_model):
    task = make_task(tiny_cfg.task, tiny_cfg.task.split_seed)
    tok = load_tokenizer(init_model)
    kw = dict(n_problems=100, k=4, temperature=1.0, max_new_tokens=tiny_cfg.generation.max_new_tokens)
    before = evaluate(HFBackend(str(init_model)), tok, task, **kw)
    path, stats = warm_model
    after = evaluate(HFBackend(path), tok, task, **kw)
    assert before["pass@1"] <= 0.02
    assert 0.1 <= after["pass@1"] <= 0.6, after
    assert stats["seconds"] < 240 and stats["eval_accuracy"] >= tiny_cfg.warmstart.target_accuracy
    assert after["pass@4"] >= after["pass@1_sampled"]

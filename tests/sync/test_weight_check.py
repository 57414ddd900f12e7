"""The weight-path check (sync/weight_check.py): the learner's probe log-probs against a generator's, with a real
tiny model and the transformers backend; a skipped stream (the negative control) must be named in one line."""

import numpy as np
import pytest
import torch

from replay_rl.generation.hf import HFBackend
from replay_rl.models.hf_folder import load_model, load_tokenizer
from replay_rl.models.scoring import sequence_logprobs
from replay_rl.sync.weight_check import WeightCheck, check_problem, gap_limit, probe_gap
from replay_rl.tasks import make_task
from replay_rl.tasks.weight_probe import weight_probe


def test_probe_gap_is_zero_for_equal_logprobs_and_reads_the_largest_token_gap():
    ref = [np.array([-1.0, -2.0]), np.array([-0.5])]
    assert probe_gap(ref, [a.copy() for a in ref]) == (0.0, 0.0, 0.0)
    abs_max, abs_mean, kl = probe_gap(ref, [np.array([-1.0, -2.3]), np.array([-0.5])])
    assert abs_max == pytest.approx(0.3) and abs_mean == pytest.approx(0.1) and kl > 0
    with pytest.raises(ValueError, match="different probe sets"):
        probe_gap(ref, [np.array([-1.0])])


def test_the_limit_and_its_statistic_follow_the_dtype():
    assert gap_limit(None, "float32") == ("abs_max", 1e-3) and gap_limit(0.5, "float32") == ("abs_max", 0.5)
    assert gap_limit(None, "bfloat16") == ("abs_mean", 0.05)  # a 16-bit token's gap is kernel noise: the mean
    check = WeightCheck(generator_id=3, version=17, abs_max=0.02, abs_mean=0.004, kl=1e-5, seconds=0.01)
    line = check_problem(check, "abs_max", 1e-3)
    assert "generator 3" in line and "version 17" in line and "sync.weight_check_limit=0.001" in line
    assert "\n" not in line and check_problem(check, "abs_max", 0.05) is None
    assert check_problem(check, "abs_mean", 0.01) is None and "abs_mean" in check_problem(check, "abs_mean", 0.001)


def test_the_probe_set_is_the_same_on_every_side_and_ends_at_eos(tiny_cfg, init_model):
    tok = load_tokenizer(init_model)
    # two sides, each with the task it built itself
    a, b = (weight_probe(make_task(tiny_cfg.task, tiny_cfg.task.split_seed), False, tok) for _ in range(2))
    assert len(a) == 4 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert all(s[-1] == tok.eos_token_id and s.dtype == np.int32 for s in a)
    problems_text = [tok.decode(s[:-1]) for s in a]
    assert all("=" in t for t in problems_text)  # an arithmetic prompt and its answer


def test_a_skipped_stream_is_named_and_every_loaded_one_passes(tiny_cfg, init_model):
    """Three versions streamed to the transformers backend agree with the learner's forward to fp32; a version
    the generator did not load (its weights one step behind, labelled new) is above the fp32 limit."""
    learner = load_model(init_model)
    generator = HFBackend(str(init_model))
    probe = weight_probe(make_task(tiny_cfg.task, tiny_cfg.task.split_seed), False, load_tokenizer(init_model))
    (statistic, limit), opt = gap_limit(None, "float32"), torch.optim.AdamW(learner.parameters(), lr=1e-3)
    torch.manual_seed(0)
    for version in (1, 2, 3):
        opt.zero_grad()  # one real optimizer step on a random objective, as the learner takes one
        learner(input_ids=torch.as_tensor(probe[0][None], dtype=torch.long)).logits.pow(2).mean().backward()
        opt.step()
        reference = sequence_logprobs(learner, probe, 0)
        if version != 3:  # version 3: the stream is skipped, the generator keeps version 2's weights
            generator.load_weights(learner.named_parameters(), version)
        check = WeightCheck(0, version, *probe_gap(reference, generator.score(probe)), 0.0)
        if version != 3:
            assert check.abs_max < 1e-5 and check_problem(check, statistic, limit) is None
        else:
            assert check.abs_max > limit and "version 3" in check_problem(check, statistic, limit)

"""The HF backend's log-prob recorder keeps one step's distribution, not every step's (HF's output_scores held
rows·steps·vocab floats: 80 GB for 128 rollouts of 1024 tokens at Qwen's 152k vocabulary)."""

import torch

from replay_rl.generation.hf import SampledLogprobs


def drive(recorder, prompt, drawn, scores):
    ids = prompt
    for step_scores, token in zip(scores, drawn.T):
        recorder(ids, step_scores)
        assert recorder.last.shape == step_scores.shape and all(p.dim() == 1 for p in recorder.picked)
        ids = torch.cat([ids, token[:, None]], 1)
    return ids


def test_each_drawn_token_gets_its_own_steps_log_prob_and_only_one_step_is_kept():
    torch.manual_seed(0)
    rows, steps, vocab = 3, 5, 11
    scores = torch.randn(steps, rows, vocab)
    drawn = torch.randint(0, vocab, (rows, steps))
    recorder = SampledLogprobs()
    drive(recorder, torch.zeros(rows, 2, dtype=torch.long), drawn, scores)
    want = torch.log_softmax(scores, -1).gather(-1, drawn.T[..., None]).squeeze(-1).T
    assert torch.allclose(recorder.result(drawn), want)


def test_a_step_run_past_the_end_and_undone_is_dropped():
    """HF's deferred stop check can run one decoding step more and crop it from the sequences."""
    torch.manual_seed(1)
    scores, drawn = torch.randn(4, 2, 7), torch.randint(0, 7, (2, 4))
    recorder = SampledLogprobs()
    drive(recorder, torch.zeros(2, 1, dtype=torch.long), drawn, scores)
    kept = drawn[:, :3]
    want = torch.log_softmax(scores[:3], -1).gather(-1, kept.T[..., None]).squeeze(-1).T
    assert recorder.result(kept).shape == (2, 3) and torch.allclose(recorder.result(kept), want)

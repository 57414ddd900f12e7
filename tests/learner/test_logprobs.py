"""The chunked log-prob head against the full-vocabulary computation it replaced, and packed rows against padded
ones, on the tiny model in fp32."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from replay_rl.config import TinyModelSpec
from replay_rl.learner.batching import to_learner_inputs
from replay_rl.learner.logprobs import final_hidden_states, token_logprobs
from replay_rl.learner.losses import processed_logits
from replay_rl.models.hf_folder import build_tiny_model
from replay_rl.rollout import Rollout, RolloutBatch

TOL = 1e-5


def full_vocab_logprobs(logits, input_ids, temperature, top_p):
    """The learner's function before chunking: (B, L, V) logits in fp32, their log-softmax, its exp."""
    logp_all = torch.log_softmax(processed_logits(logits[:, :-1], temperature, top_p), dim=-1)
    logp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def chunked(model, ids, attn, temperature, top_p, chunk, mask=None, packed=False):
    hidden = final_hidden_states(model, model.lm_head, ids, attn, packed)
    return token_logprobs(hidden, model.lm_head, ids, chunk, temperature, top_p, mask)


def reference(model, ids, attn, temperature, top_p):
    return full_vocab_logprobs(model(input_ids=ids, attention_mask=attn).logits, ids, temperature, top_p)


def batch(vocab, rows=3, length=13, seed=0):
    """Right-padded rows of different lengths, as learner/batching.py makes them."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (rows, length), generator=gen)
    attn = (torch.arange(length)[None] < length - 4 * torch.arange(rows)[:, None]).long()
    return ids * attn, attn


def grads_of(model, logp, weights):
    model.zero_grad()
    (logp * weights).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(TinyModelSpec(), vocab_size=100, pad_id=0, eos_id=1)


@pytest.mark.parametrize("temperature, top_p, chunk", [(1.0, 1.0, 7), (0.7, 1.0, 5), (1.3, 0.9, 4), (0.7, 0.8, 1),
                                                       (0.7, 0.9, None), (1.0, 0.95, 10_000)])
def test_chunked_head_equals_the_full_vocabulary_one(model, temperature, top_p, chunk):
    ids, attn = batch(100)
    weights = torch.randn(ids[:, 1:].shape, generator=torch.Generator().manual_seed(1))
    want_lp, want_ent = reference(model, ids, attn, temperature, top_p)
    want_grads = grads_of(model, want_lp, weights)
    lp, ent = chunked(model, ids, attn, temperature, top_p, chunk)
    grads = grads_of(model, lp, weights)
    # a target outside the nucleus has log π ≈ −1e4, where one fp32 step is 1e-3: compared relatively
    dropped = want_lp < -1000
    gaps = {"logp": (lp - want_lp)[~dropped].abs().max().item(), "entropy": (ent - want_ent).abs().max().item(),
            "grad": max((grads[n] - want_grads[n]).abs().max().item() for n in grads)}
    print(f"T={temperature} top_p={top_p} chunk={chunk}: max |Δ| {gaps}, dropped targets {dropped.sum().item()}")
    assert max(gaps.values()) <= TOL, gaps
    assert torch.allclose(lp[dropped], want_lp[dropped], rtol=1e-6, atol=0)
    assert not ent.requires_grad and all(g.abs().sum() > 0 for g in grads.values())
    assert dropped.any() == (top_p < 1)   # the nucleus did drop targets: a wrong mask would not pass unnoticed


def test_only_the_masked_positions_are_computed_and_the_rest_are_zero(model):
    ids, attn = batch(100)
    mask = attn[:, 1:].bool() & (torch.arange(12)[None] >= 3)   # completion targets: past a 3-token prompt
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2))
    want_lp, want_ent = reference(model, ids, attn, 0.7, 0.9)
    want_grads = grads_of(model, want_lp * mask, weights)
    lp, ent = chunked(model, ids, attn, 0.7, 0.9, 4, mask)
    grads = grads_of(model, lp, weights)
    assert (lp[~mask] == 0).all() and (ent[~mask] == 0).all()
    kept = mask & (want_lp > -1000)
    assert (lp - want_lp)[kept].abs().max() <= TOL and (ent - want_ent)[mask].abs().max() <= TOL
    assert max((grads[n] - want_grads[n]).abs().max().item() for n in grads) <= TOL


def test_a_batch_without_completion_tokens_still_reaches_the_model(model):
    ids, attn = batch(100)
    lp, _ = chunked(model, ids, attn, 1.0, 1.0, 4, torch.zeros(ids[:, 1:].shape, dtype=torch.bool))
    assert lp.shape == (3, 12) and (lp == 0).all() and lp.requires_grad  # DeepSpeed's backward hooks need a graph


def ragged_rollouts(vocab, lengths):
    """A batch of rollouts of the given (prompt, completion) lengths, random tokens."""
    rng = np.random.default_rng(3)
    return RolloutBatch.from_rollouts([
        Rollout(rng.integers(4, vocab, p).astype(np.int32), rng.integers(4, vocab, c).astype(np.int32),
                np.zeros(c, np.float32), 1.0, 1.0, 0.5, True, i, 0, 0, 0, 0, 0) for i, (p, c) in enumerate(lengths)])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_packed_rows_give_the_padded_logprobs_entropy_and_gradients(attention, temperature, top_p):
    """The rollouts run as one row attend only within themselves: a row that saw another rollout's tokens (or a
    boundary target that predicted the next rollout's first token) would be off by far more than fp32 noise."""
    model = build_tiny_model(TinyModelSpec(), vocab_size=100, pad_id=0, eos_id=1)
    model.set_attn_implementation(attention)
    inp = to_learner_inputs(ragged_rollouts(100, [(3, 9), (7, 1), (1, 4), (5, 6), (2, 2)]), pad_id=0)
    weights = torch.randn(inp.loss_mask.shape, generator=torch.Generator().manual_seed(4))
    got, shapes = {}, []
    seen = model.model.embed_tokens.register_forward_hook(lambda _m, args, _out: shapes.append(tuple(args[0].shape)))
    for packed in (False, True):
        lp, ent = chunked(model, inp.input_ids, inp.attention_mask, temperature, top_p, 4, inp.loss_mask, packed)
        got[packed] = lp, ent, grads_of(model, lp, weights)
    seen.remove()
    assert shapes == [(5, 12), (1, 40)]   # padded: 5 rows of the longest; packed: one row of the real tokens
    (want_lp, want_ent, want_grads), (lp, ent, grads) = got[False], got[True]
    kept = inp.loss_mask.bool() & (want_lp > -1000)   # a target outside the nucleus: compared relatively
    gaps = {"logp": (lp - want_lp)[kept].abs().max().item(), "entropy": (ent - want_ent).abs().max().item(),
            "grad": max((grads[n] - want_grads[n]).abs().max().item() for n in grads)}
    print(f"{attention} T={temperature} top_p={top_p}: packed vs padded max |Δ| {gaps}")
    assert max(gaps.values()) <= TOL, gaps
    assert torch.allclose(lp[~kept], want_lp[~kept], rtol=1e-6, atol=0)
    assert all(g.abs().sum() > 0 for g in grads.values())


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an op makes, forward and backward."""

    numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.numel = max([self.numel] + [t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)])
        return out


def test_no_tensor_grows_with_batch_times_vocabulary():
    vocab, chunk = 4096, 16   # chunk·V = 65k elements, the batch's B·(L−1)·V = 1M
    small = build_tiny_model(TinyModelSpec(hidden_size=16, num_heads=2, num_kv_heads=1, intermediate_size=32,
                                           num_layers=1), vocab_size=vocab, pad_id=0, eos_id=1)
    ids, attn = batch(vocab, rows=4, length=64)
    sizes = {}
    for name, run in [("chunked", lambda: chunked(small, ids, attn, 0.7, 0.9, chunk)),
                      ("full", lambda: reference(small, ids, attn, 0.7, 0.9))]:
        with LargestTensor() as probe:
            run()[0].sum().backward()
        sizes[name] = probe.numel
    assert sizes["full"] >= 4 * 63 * vocab   # the probe sees the full-vocabulary tensors where they exist
    assert sizes["chunked"] <= chunk * vocab, sizes   # the lm_head's (V, H) gradient is also ≤ chunk·V here

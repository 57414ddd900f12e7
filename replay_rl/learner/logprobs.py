"""π_θ(target) and entropy from the model's final hidden states, a chunk of positions at a time.

The full (B, L, V) logits in fp32, their log-softmax and its exp are each B·L·V·4 bytes: 10 GB apiece for
16 × 1024 tokens at a 152k vocabulary. Here the lm_head runs on at most `chunk_tokens` positions at once, each
chunk under activation checkpointing: its backward recomputes its logits rather than keeping every chunk's, so
forward and backward hold one chunk's (chunk_tokens, V) tensors. Checkpointing, not a hand-written backward,
because it calls the lm_head *module*: that stays right for a bias, bf16 and ZeRO-3, whose partitioned weight
only exists inside the module's call. The cost is one more lm_head product per token in backward.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint

from replay_rl.learner.losses import processed_logits


def final_hidden_states(model: Callable, lm_head: torch.nn.Module, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor, packed: bool = False) -> torch.Tensor:
    """model(input_ids, attention_mask) with lm_head made an identity: the (B, L, H) hidden states it would project.
    `model` may be the HF model or a DeepSpeed engine around it. The states come back as the model's own output
    (`.logits`), so an engine hooks its backward prologue on them as it would on logits. For models whose logits
    are exactly lm_head(h) (Llama, Qwen, SmolLM): one that rescales or soft-caps logits after the head would be
    applying that to h.
    packed: the rows' real tokens run as one row (1, tokens) without padding, positions restarting at each row's
    first token; from those positions transformers keeps attention within each row (a block-diagonal causal mask
    for sdpa and eager, varlen kernels for flash_attention_2). The states come back in the (B, L, H) layout, zero
    at padding, so the target of a row's last state is padding (masked out), never the next row's first token."""
    kept: list[torch.Tensor] = []

    def skip_product(_module, args):  # no (B, L, V) product: the head sees zero positions
        kept.append(args[0])
        return (args[0][..., :0, :],)

    handles = [lm_head.register_forward_pre_hook(skip_product),
               lm_head.register_forward_hook(lambda *_: kept[0])]
    try:
        # use_cache=False: no KV cache to build; with one, transformers would not look for packed rows
        if not packed:
            return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        real = attention_mask.bool()
        positions = attention_mask.cumsum(-1) - 1
        # no attention_mask: only without one does transformers read the rows' bounds from the positions
        states = model(input_ids=input_ids[real][None], position_ids=positions[real][None], use_cache=False).logits
        return states.new_zeros((*real.shape, states.shape[-1])).index_put((real,), states[0])
    finally:
        for h in handles:
            h.remove()


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, lm_head: torch.nn.Module, temperature: float,
                    top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, H) hidden states, (n,) targets → (n,) log π(target) and (n,) entropy (no grad)."""
    z = processed_logits(lm_head(hidden), temperature, top_p)   # (n, V) fp32
    lse = z.logsumexp(-1)
    logp = z.gather(-1, targets[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        entropy = lse - (torch.exp(z - lse[:, None]) * z).sum(-1)  # −Σ p·log p, with log p = z − lse
    return logp, entropy


def token_logprobs(hidden: torch.Tensor, lm_head: torch.nn.Module, input_ids: torch.Tensor, chunk_tokens: int | None,
                   temperature: float = 1.0, top_p: float = 1.0,
                   mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, H) final hidden states and (B, L) input_ids → (B, L−1) log π(target) and (B, L−1) entropy (no grad)
    of each predicting position, under generation's processing (temperature, top-p; losses.processed_logits), so
    that on fresh rollouts π_θ equals the behaviour. chunk_tokens: positions per lm_head call, each checkpointed
    (learner.logprob_chunk_tokens); None: one call over all of them, not checkpointed, keeping its (positions, V)
    logits for backward. mask: (B, L−1), the positions to compute (the loss's completion targets); the others
    get 0."""
    mask = torch.ones_like(input_ids[:, 1:], dtype=torch.bool) if mask is None else mask.bool()
    h, targets = hidden[:, :-1][mask], input_ids[:, 1:][mask]     # (n, H), (n,): only the positions asked for
    n = len(targets)
    parts, step = [], chunk_tokens or max(n, 1)
    # at least one (possibly empty) chunk: the output stays connected to the hidden states, so a DeepSpeed engine's
    # backward hooks on them fire even for a micro-batch without a completion token
    for s in range(0, max(n, 1), step):
        args = (h[s:s + step], targets[s:s + step], lm_head, temperature, top_p)
        # non-reentrant: the chunks stay in the one backward graph, so each weight's gradient is accumulated once
        # per backward, as ZeRO's per-parameter reduction expects (a reentrant backward per chunk would not)
        parts.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False) if chunk_tokens
                     else _chunk_logprobs(*args))
    logp, entropy = (torch.cat(x) for x in zip(*parts))
    zeros = torch.zeros(mask.shape, dtype=logp.dtype, device=logp.device)
    return zeros.masked_scatter(mask, logp), zeros.masked_scatter(mask, entropy)

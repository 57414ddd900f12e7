"""The learner: its loss (GRPO or AsymRE), optimizer and ZeRO stage; and how weights flow back."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from replay_rl.config.adaptive import TrustRegionConfig
from replay_rl.config.base import _Section


class StaleNegativesConfig(_Section):
    """Asymmetric staleness (μ-GRPO, AsymRE): a rollout whose update is negative (GRPO: its frozen advantage;
    AsymRE: r − (V̂ + δV)) and whose age (learner versions since the weights that made it) exceeds max_age gets
    `weight` on its loss terms (0: vetoed); positives keep full weight at any age. A stale negative pushes down a completion the current policy may no longer make:
    of replay's old data, the update most often wrong."""

    max_age: int = Field(ge=0)
    """Ages above this are stale. Under the emulated pace even on-policy rollouts are about one version old, so 0
    vetoes nearly every negative; the paper's FIFO at N = 10B reaches ages of ~30."""
    weight: float = Field(0.0, ge=0, le=1)
    """The stale negatives' weight: 0 vetoes them (their tokens still count in the loss's normaliser)."""


class _LossCommon(_Section):
    correction: Literal["none", "tis", "icepop", "mis"] = "none"
    """Off-policy correction on the ratio ρ = π_θ/π_behaviour (learner/corrections.py). none: the paper. tis:
    weight tokens by min(ρ, C), for heavy staleness with AsymRE (which has no clip). icepop: drop tokens with ρ
    outside [1/C, C], when a few tokens' ratios explode (engine/learner mismatch). mis: drop whole rollouts whose
    geometric-mean ratio is outside [1/C, C], when whole rollouts have drifted (very old replayed data)."""
    correction_cap: float = Field(2.0, gt=1)
    """C of the correction: the truncation of tis, the band [1/C, C] of icepop and mis. Lower corrects more and
    keeps less data (see correction/ess)."""
    trust_region: TrustRegionConfig | None = None
    """Mask rollouts whose importance ratios left a trust region (M2 or ESS bound; learner/trust_region.py), on
    top of the correction. None: off (paper)."""
    stale_negatives: StaleNegativesConfig | None = None
    """Down-weight or veto negative-advantage rollouts past an age, positives untouched. None: off (paper)."""


class GrpoLossConfig(_LossCommon):
    type: Literal["grpo"] = "grpo"
    """PPO-style clipped ratio on the frozen group advantage, no KL (the paper's main loss)."""
    eps_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip: the ratio π/π_behaviour is clipped at 1 − eps_low. Smaller is more conservative."""
    eps_high: float = Field(0.2, ge=0)
    """Upper clip at 1 + eps_high; DAPO raises it (e.g. 0.28) to keep exploring."""
    aggregation: Literal["rank_token_mean", "global_token_mean", "seq_mean"] = "rank_token_mean"
    """How token terms become one loss (the paper leaves it open). rank_token_mean: mean over each rank's completion
    tokens, then DeepSpeed's mean over ranks (TRL's bnpo; DAPO's token-mean only at T=1). global_token_mean: one
    mean over every rank's tokens (DAPO at any T; one extra all-reduce per step). seq_mean: mean over rollouts of
    each rollout's token mean (GRPO as first written: short completions weigh as much as long ones)."""


class AsymreLossConfig(_LossCommon):
    type: Literal["asymre"] = "asymre"
    """REINFORCE with a shifted baseline and no ratio (AsymRE, Arnal et al. 2025)."""
    baseline_shift: float = -0.1
    """δV: the baseline is the group's mean reward plus this (negative favours correct rollouts)."""
    aggregation: Literal["seq_sum", "token_mean"] = "seq_sum"
    """seq_sum: the paper's per-rollout mean of (r − (V̂ + δV))·Σ_t log π (longer rollouts weigh more);
    token_mean: the same weight on a mean over all completion tokens of the sub-batch (gradient scaled by 1/length)."""


class LearnerConfig(_Section):
    loss: Annotated[Union[GrpoLossConfig, AsymreLossConfig], Field(discriminator="type")] = GrpoLossConfig()
    """The policy loss, chosen by `type`: grpo or asymre."""
    batch_size: int = Field(128, ge=1)
    """B: rollouts per optimizer step over all learner ranks; each rank samples batch_size / learners."""
    lr: float = Field(5e-5, gt=0)
    """Adam learning rate. Higher learns faster and drifts further from the behaviour policy per step. Replay reuses
    each rollout B/R times, so it wants a lower LR than consume-once training: on the tiny testbed the frontier study
    found 5e-5 best for N = 10B (2.5e-5 to 1.5e-4 tried) and 1.5e-4 for the baseline (5e-5 to 3e-4 tried)."""
    warmup_steps: int = Field(0, ge=0)
    """The LR rises linearly over the first warmup_steps optimizer steps (lr/warmup_steps at step 1, lr from step
    warmup_steps on), then stays constant. 0: constant from the first step, as in the paper. A large model's first
    steps on fresh Adam moments are the ones peers warm up (OpenRLHF, verl: a few to tens of steps)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam (β1, β2)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW decoupled weight decay."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this; None: no clipping."""
    zero_stage: int = Field(2, ge=0, le=3)
    """DeepSpeed ZeRO stage: 0 replicates, 1 shards optimizer state, 2 also gradients, 3 also parameters."""
    micro_batch_tokens: int | None = Field(None, ge=1)
    """Most tokens per forward/backward: padded ones (rollouts × longest prompt+completion), or with pack_sequences
    the real ones. A rank's batch is split into micro-batches under this budget, accumulated into one optimizer step
    with the full batch's loss normalisation. Lower bounds activation memory and costs more passes. None: the
    whole rank batch in one pass."""
    draw_ahead: bool = True
    """Ask the shard for the next step's batch as a step ends, so that it is served while the weights publish, off
    the step's critical path (the ranks' sample wait at W=16, T=4: 20-24 → 11-12 ms a step, control_plane.py). The
    batch then lacks what arrives during the publish. Not before a checkpoint or the run's end, nor with
    run.rollout_budget (a stop no step foresees): a drawn batch would be missing from the buffer's snapshot."""
    drop_zero_advantage: bool = False
    """Train on the smaller batch: rollouts whose frozen advantage is 0 (under GRPO with 0/1 rewards, a group whose
    rewards were all equal, which teaches nothing) are left out of the loss and of its normalisers, pooled over the
    ranks, and the ledger charges only the rollouts trained (K_train). The on-policy side's fair equivalent of
    replay.sampler=effective (issue 43); with AsymRE it also drops the weight −baseline_shift that such rollouts
    get (+0.1 at the default: a push up). On this build they still run through the forward with a zero loss mask;
    the ledger charges what a learner that skips them spends (K_forward counts them). batch/trained_share reads the
    share kept."""
    pack_sequences: bool = False
    """Run each micro-batch's rollouts as one row without padding: positions restart at each rollout and attention
    stays within it (learner/logprobs.py final_hidden_states); log π, entropy and gradients equal the padded ones.
    No compute goes to padding, but only flash_attention_2's varlen kernels (model.attn_implementation) attend
    within each rollout alone. Off by default: sdpa and eager run the packed row's attention as one dense masked
    (tokens × tokens) product, so on CPU a tiny-model rank batch (64 rollouts of ~12 tokens) took 70 ms packed
    against 45 ms padded, and 64 rollouts of ~44 tokens 610 ms against 190 ms."""
    activation_checkpointing: bool = False
    """Recompute activations in backward instead of keeping them: less memory for about a third more compute."""
    logprob_chunk_tokens: int | None = Field(1024, ge=1)
    """Completion positions per lm_head call when taking log π and entropy (learner/logprobs.py): the fp32 logits
    held at once are this × vocabulary, in forward and backward, never the whole batch's; backward recomputes each
    chunk's lm_head product (one more per token). None: one call over all positions, logits kept for backward:
    fastest while batch × vocabulary fits."""


class _SyncCommon(_Section):
    every_steps: int = Field(1, ge=1)
    """Publish weights after every k optimizer steps."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds a weight transfer may take: a publish not done by then (a frozen broadcast member, a hung board or
    rank) is named and restarts every role (run.max_restarts); the broadcast group (sync.type=nccl, NCCL or gloo)
    times out its collectives after it too, and a resumed run's generators wait this long for their first
    weights. Raise it for big models."""
    bucket_mb: float = Field(256.0, gt=0)
    """Weights travel packed in buffers of about this many MiB, cast to model.dtype: a few large messages instead
    of one per tensor. The sender holds at most one bucket beyond the model; under ZeRO-3 ranks gather one
    bucket's parameters at a time."""
    weight_check: bool = True
    """The weight-path check: with each version the learner publishes its log-probs of a fixed probe set (4
    training prompts with their answers); every generator scores the same sequences once it has loaded that version
    and reports the gap (weight_check/* metrics, weight_checks.jsonl). Costs one short forward per sync on learner
    rank 0 (every rank under ZeRO-3; sync/publish_probe_s, inside publish_s) and on each generator."""
    weight_check_limit: float | None = Field(None, gt=0)
    """The probe-set gap accepted; above it a line names the generator and the version. Judged on the largest
    per-token |Δ log-prob| in float32 (default 1e-3; agreement measured to ≤ 6e-5) and on the mean per token in
    bfloat16 and float16, where one token's gap is kernel noise (default 0.05, not yet measured on a GPU)."""
    weight_check_fail: bool = False
    """Stop the run with that line instead of printing it and going on."""


class ObjectStoreSyncConfig(_SyncCommon):
    type: Literal["object_store"] = "object_store"
    """Weights go through a Ray object on a board actor that generators poll. Works everywhere."""


class NcclSyncConfig(_SyncCommon):
    """Broadcast group learner rank 0 → generators (OpenRLHF-style). backend=gloo runs the same path on CPU."""

    type: Literal["nccl"] = "nccl"
    """Learner rank 0 broadcasts to every generator over a collective group."""
    backend: Literal["nccl", "gloo"] = "nccl"
    """Collective backend: nccl on GPUs, gloo to run the same path on CPU."""


SyncConfig = Annotated[Union[ObjectStoreSyncConfig, NcclSyncConfig], Field(discriminator="type")]

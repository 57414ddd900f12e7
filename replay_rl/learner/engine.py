"""LearnerEngine: one DeepSpeed ZeRO rank's training step and weight access, with no Ray.

The Ray actor (worker.py) feeds it batches sampled from its replay shard and sends what it yields to the
generators; the GPU check (cluster/gpu_check.py) drives it directly on a machine without Ray. Only this module
imports DeepSpeed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from pathlib import Path

import numpy as np
import torch

from replay_rl.config import RunConfig
from replay_rl.learner.agreement import Mismatch
from replay_rl.learner.batching import MicroStats, micro_batches, to_learner_inputs
from replay_rl.learner.logprobs import final_hidden_states, token_logprobs
from replay_rl.learner.losses import LearnerInputs, make_loss
from replay_rl.learner.optimizer import make_optimizer, make_schedule
from replay_rl.models.digests import rank_files, sha256s
from replay_rl.models.hf_folder import load_model, load_tokenizer, save_model_folder
from replay_rl.models.scoring import sequence_logprobs
from replay_rl.rollout import RolloutBatch
from replay_rl.sync.plan import Bucket, plan_buckets


def deepspeed_config(cfg: RunConfig, on_gpu: bool) -> dict:
    return {
        "train_micro_batch_size_per_gpu": cfg.rank_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": cfg.learner.batch_size,
        "zero_optimization": {"stage": cfg.learner.zero_stage},
        "zero_allow_untested_optimizer": True,  # torch AdamW as the client optimizer (constant LR, as in the paper)
        "gradient_clipping": cfg.learner.grad_clip or 0.0,
        "bf16": {"enabled": on_gpu and cfg.model.dtype == "bfloat16"},
        "steps_per_print": 10**9,
    }


def skip_cpu_shared_memory_op() -> None:
    """DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce in init_distributed, which only its inference
    tensor parallelism calls (inference_all_reduce), never ZeRO training. The compile took 39 s idle on every fresh
    install, and a start killed mid-compile leaves torch's build lock behind, on which every later start waits
    forever (a CI run hung 90 min on it). Marked incompatible, the op is skipped, as where no compiler exists."""
    from deepspeed import ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        ops.__compatible_ops__[builder.NAME] = False


class LearnerEngine:
    def __init__(self, cfg: RunConfig, rank: int, model_path: str) -> None:
        torch.set_num_threads(1)
        self.cfg, self.rank, self.model_path = cfg, rank, model_path
        self.loss_fn = make_loss(cfg.learner.loss)
        self.pad_id = load_tokenizer(model_path).pad_token_id
        self.busy_s = 0.0

    @property
    def on_gpu(self) -> bool:
        return torch.cuda.is_available() and self.cfg.cluster.gpus_per_learner > 0

    def setup(self, master_addr: str, master_port: int, model: torch.nn.Module | None = None) -> None:
        """Join the learners' torch.distributed group (cluster.learners ranks; NCCL on GPUs, gloo on CPU) and build
        the engine around fp32 master weights: `model`, or model_path's (bf16 compute via DeepSpeed on GPU)."""
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
                          WORLD_SIZE=str(self.cfg.cluster.learners), LOCAL_RANK="0")
        import deepspeed

        if not self.on_gpu:
            skip_cpu_shared_memory_op()
        deepspeed.init_distributed(dist_backend="nccl" if self.on_gpu else "gloo")
        torch.manual_seed(self.cfg.run.seed)
        model = model if model is not None else load_model(self.model_path, "float32",
                                                           self.cfg.model.attn_implementation)
        if self.cfg.learner.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        opt = make_optimizer(model.parameters(), self.cfg.learner)
        self.engine, *_ = deepspeed.initialize(model=model, optimizer=opt,
                                               lr_scheduler=make_schedule(opt, self.cfg.learner),
                                               config=deepspeed_config(self.cfg, self.on_gpu))
        self.device = self.engine.device

    # ------------------------------------------------------------------ training
    def train_on(self, batch: RolloutBatch, ages: np.ndarray | None = None) -> dict[str, float]:
        """One optimizer step on this rank's batch, in micro-batches of at most learner.micro_batch_tokens tokens
        (padded, or real ones with learner.pack_sequences, which runs each micro-batch as one row without padding)
        whose gradients accumulate; each micro-batch's loss is normalised by the whole batch's counts.
        ages: each row's learner versions since its weights (None: unknown). Rows of age 0 were made by exactly the
        learner's current weights, on which π_θ must equal the stored behaviour log-probs: their gap is the live
        generator/learner agreement check (mismatch/*); learner.loss.stale_negatives reads the others."""
        t0 = time.perf_counter()
        self.engine.train()
        parts = self._micro_batches(batch)
        lengths, trained = np.diff(batch.completion_offsets), self._trained_rows(batch)
        own_tokens = float(lengths.sum())
        tokens, rollouts = self._loss_norms(float(lengths[trained].sum()), float(trained.sum()))
        loss_sum, entropy_sum, acc, gap = 0.0, 0.0, MicroStats(), Mismatch()
        fresh = np.zeros(len(batch), bool) if ages is None else ages == 0
        for i, rows in enumerate(parts):
            inp = to_learner_inputs(batch.take(rows), self.pad_id, self.device, tokens, rollouts,
                                    None if ages is None else ages[rows])
            self.engine.set_gradient_accumulation_boundary(i == len(parts) - 1)  # reduce and step on the last
            logp, entropy = self._logprobs(inp)
            entropy_sum += (entropy * inp.loss_mask).sum().item()
            fresh_rows = torch.as_tensor(fresh[rows], device=self.device)[:, None]
            gap.add(logp.detach(), inp.old_logprobs, inp.loss_mask * fresh_rows)
            # rows left out of the loss (learner.drop_zero_advantage) take no part in it: a zero loss mask
            inp.loss_mask = inp.loss_mask * torch.as_tensor(trained[rows], device=self.device)[:, None]
            loss, stats = self.loss_fn(logp, inp)
            self.engine.backward(loss)
            loss_sum += loss.item()
            acc.add(stats, inp.loss_mask.sum().item())
        lr = self.engine.get_lr()[0]  # the rate this step takes (a warmup's scheduler moves on in step())
        self.engine.step()
        self.busy_s += time.perf_counter() - t0
        grad_norm = self.engine.get_global_grad_norm()
        return acc.result() | gap.result() | {"loss": loss_sum, "entropy": entropy_sum / max(own_tokens, 1.0),
                               "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
                               "micro_batches": len(parts), "lr": lr, "trained_share": float(trained.mean()),
                               "rank_busy_s": self.busy_s}  # cumulative, this rank; the ledger sums ranks

    def _trained_rows(self, batch: RolloutBatch) -> np.ndarray:
        """(B,) bool: the rows the loss trains on. With learner.drop_zero_advantage, the ones whose frozen advantage
        is not 0 (the smaller batch; the ledger charges these); else every row."""
        if self.cfg.learner.drop_zero_advantage:
            return batch.advantage != 0
        return np.ones(len(batch), bool)

    def _logprobs(self, inp: LearnerInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """log π_θ and entropy at the completion targets, a learner.logprob_chunk_tokens chunk at a time."""
        head, g = self.engine.module.get_output_embeddings(), self.cfg.generation
        hidden = final_hidden_states(self.engine, head, inp.input_ids, inp.attention_mask,
                                     self.cfg.learner.pack_sequences)
        return token_logprobs(hidden, head, inp.input_ids, self.cfg.learner.logprob_chunk_tokens, g.temperature,
                              g.top_p, inp.loss_mask)

    def _loss_norms(self, tokens: float, rollouts: float) -> tuple[float, float]:
        """The token and rollout counts a rank divides its loss by: its own; or the mean over ranks, Σ_all / T, so
        that DeepSpeed's average over ranks of Σ_rank / (Σ_all / T) is Σ_all / Σ_all: the tokens for
        global_token_mean, and both counts with learner.drop_zero_advantage (ranks then hold unequal shares of the
        rows trained, and the step must be the smaller batch's, not a mean of unequal ranks' means)."""
        learner, ranks = self.cfg.learner, self.cfg.cluster.learners
        pool_tokens = learner.loss.aggregation == "global_token_mean" or learner.drop_zero_advantage
        if ranks == 1 or not pool_tokens:
            return tokens, rollouts
        import torch.distributed as dist

        total = torch.tensor([tokens, rollouts], dtype=torch.float64)
        dist.all_reduce(total)
        mean_tokens, mean_rollouts = (float(x) / ranks for x in total)
        return mean_tokens, mean_rollouts if learner.drop_zero_advantage else rollouts

    def _micro_batches(self, batch: RolloutBatch) -> list[np.ndarray]:
        """The batch's micro-batches under learner.micro_batch_tokens. All ranks run as many as the rank that needs
        most: ZeRO-3 gathers parameters in every forward, and ZeRO-2 reduces gradients in every backward, collectively
        (a rank with one micro-batch fewer left its peer waiting in a reduce for ever: a 2-rank SmolLM2 run hung)."""
        budget, packed = self.cfg.learner.micro_batch_tokens, self.cfg.learner.pack_sequences
        parts = micro_batches(batch, budget, packed=packed)
        if budget is None or self.cfg.cluster.learners == 1:
            return parts
        import torch.distributed as dist

        n = torch.tensor([len(parts)])
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        return parts if len(parts) == n.item() else micro_batches(batch, budget, int(n.item()), packed)

    # ------------------------------------------------------------------ weights
    def full_state(self) -> dict[str, torch.Tensor]:
        """Full parameters, gathered across ZeRO partitions (a collective: every rank must call it)."""
        import deepspeed

        module = self.engine.module
        gathered = (deepspeed.zero.GatheredParameters(list(module.parameters()))
                    if self.cfg.learner.zero_stage == 3 else contextlib.nullcontext())
        with gathered:
            return {n: p.detach().to("cpu", copy=True) for n, p in module.named_parameters()}

    @functools.cached_property
    def weight_plan(self) -> list[Bucket]:
        """The buckets the weights travel in: every parameter, in the generators' dtype (model.dtype), from full
        shapes that ZeRO-3 knows without gathering. Names and shapes never change, so it is planned once."""
        dtype = self.cfg.model.dtype
        specs = [(n, tuple(getattr(p, "ds_shape", p.shape)), dtype if p.is_floating_point() else
                  str(p.dtype).removeprefix("torch.")) for n, p in self.engine.module.named_parameters()]
        return plan_buckets(specs, int(self.cfg.sync.bucket_mb * 2**20))

    def bucket_tensors(self, plan: list[Bucket]):
        """Each bucket's parameters in turn, gathered one bucket at a time under ZeRO-3 (a collective: every rank
        walks the plan); only rank 0 gets the tensors, which stay valid until it asks for the next bucket."""
        import deepspeed

        params = dict(self.engine.module.named_parameters())
        for bucket in plan:
            group = [params[n] for n in bucket.names]
            gathered = (deepspeed.zero.GatheredParameters(group) if self.cfg.learner.zero_stage == 3
                        else contextlib.nullcontext())
            with gathered:
                yield [p.detach() for p in group] if self.rank == 0 else None

    def probe_logprobs(self, sequences: list[np.ndarray]) -> list[np.ndarray]:
        """The weight-path check's reference: log-probs of the probe set under the weights now held, in the
        module's dtype (on GPUs DeepSpeed's bf16 module, the dtype published; a CPU learner stays fp32). A forward:
        under ZeRO-3 every rank must call it."""
        module, training = self.engine.module, self.engine.module.training
        module.eval()
        try:
            return sequence_logprobs(module, sequences, self.pad_id)
        finally:
            module.train(training)

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str, tag: str) -> dict[str, str]:
        """DeepSpeed engine state (weights + optimizer) on all ranks; rank 0 also writes an HF model folder. Returns
        the sha256 of each file this rank wrote (relative to path), each fsynced: the checkpoint's manifest."""
        self.engine.save_checkpoint(path, tag=tag)
        state = self.full_state()
        if self.rank == 0:
            model = load_model(self.model_path, "float32")
            model.load_state_dict(state, strict=False)
            save_model_folder(model, load_tokenizer(self.model_path), Path(path) / "hf_model")
        return sha256s(Path(path), rank_files(Path(path), self.rank), sync=True)

    def load(self, path: str, tag: str) -> None:
        # the LR is set from the restored step count, not from a saved schedule: a checkpoint from before
        # learner.warmup_steps (or with another) resumes at this run's rate for its step
        load_path, _ = self.engine.load_checkpoint(path, tag=tag, load_lr_scheduler_states=False)
        if load_path is None:
            raise FileNotFoundError(f"run.resume_from={path}: no DeepSpeed checkpoint with tag {tag!r}")
        schedule = self.engine.lr_scheduler
        if schedule is not None:
            schedule.last_epoch = self.engine.global_steps - 1
            schedule.step()
        else:  # the optimizer's saved groups carry the rate of their last step, perhaps a warmup's
            for group in self.engine.optimizer.param_groups:
                group["lr"] = self.cfg.learner.lr

"""The same update? TRL's GRPOTrainer and replay-rl's learner take K steps on the same K batches (issue 42).

Both trainers start from the SmolLM2 preset's weights and are given the same K batches, each 4 training prompts × 4
completions sampled once by our HFBackend from the starting weights at temperature 1, scored by our task, with our
frozen group-normalised advantages and behaviour log-probs (so batches 2..K are stale and the ratio clip acts, as it
would on both sides alike). Ours: one LearnerEngine rank (DeepSpeed ZeRO-2 on gloo, torch AdamW), as a run's learner
with learner.loss.aggregation=global_token_mean. TRL's: GRPOTrainer._compute_loss (loss_type "dapo", ε 0.2, β 0) on
the same tokens, advantages and behaviour log-probs, then HF's clip (torch clip_grad_norm_) and the optimizer
GRPOTrainer builds from the GRPOConfig that benchmarks/peer_trl.py trains with. Prints each step's loss and
pre-clip gradient norm on both sides and, after the K steps, how far apart the two updates are.

Random draws play no part after the batches are made: what differs, if anything, is the computation of one update.

    /work/tvenv/bin/python benchmarks/peer_step.py --steps 3 --out benchmarks/results/peer_trl/step   # trl 1.16
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_trl import PRESET, train_args  # noqa: E402

from replay_rl.config import RunConfig  # noqa: E402
from replay_rl.evaluation.warmstart import ensure_model  # noqa: E402
from replay_rl.generation.backend import sampling_params  # noqa: E402
from replay_rl.generation.hf import HFBackend  # noqa: E402
from replay_rl.models.hf_folder import load_model, load_tokenizer  # noqa: E402
from replay_rl.rollout import RolloutBatch  # noqa: E402
from replay_rl.tasks import make_task  # noqa: E402
from replay_rl.tasks.scoring import encode_prompts, score_groups  # noqa: E402

MATCHED = ["cluster.learners=1", "learner.loss.aggregation=global_token_mean", "generation.temperature=1.0"]


def fixed_batches(cfg: RunConfig, model: Path, steps: int, seed: int) -> list[RolloutBatch]:
    """`steps` batches of learner.batch_size rollouts from the starting weights, each with a group that teaches
    (a batch whose groups all have equal rewards carries no gradient on either side, so it is drawn again)."""
    task, tok = make_task(cfg.task, cfg.task.split_seed), load_tokenizer(model)
    backend, rng = HFBackend(str(model)), np.random.default_rng(seed)
    torch.manual_seed(seed)
    g = cfg.generation.group_size
    batches: list[RolloutBatch] = []
    while len(batches) < steps:
        problems = task.sample_train(cfg.learner.batch_size // g, rng)
        prompts = encode_prompts(tok, problems, chat=cfg.model.chat_template)
        groups = backend.generate(prompts, sampling_params(cfg.generation))
        rows = score_groups(task, tok, problems, prompts, groups, range(len(problems)), lambda c: (0, 0, 0), 0)
        if any(r.advantage != 0 for r in rows):
            batches.append(RolloutBatch.from_rollouts(rows))
    return batches


def trl_inputs(batch: RolloutBatch, pad_id: int) -> dict[str, torch.Tensor]:
    """A batch as GRPOTrainer's _generate_and_score_completions hands it to _compute_loss: prompts padded on the
    left, completions on the right, behaviour log-probs as old_per_token_logps, the frozen advantages."""
    rows = [batch.rollout(i) for i in range(len(batch))]
    p_w, c_w = max(len(r.prompt_ids) for r in rows), max(len(r.completion_ids) for r in rows)
    out = {k: torch.zeros(len(rows), w, dtype=torch.long) for k, w in
           [("prompt_ids", p_w), ("prompt_mask", p_w), ("completion_ids", c_w), ("completion_mask", c_w)]}
    out["prompt_ids"].fill_(pad_id)
    out["completion_ids"].fill_(pad_id)
    old = torch.zeros(len(rows), c_w)
    for i, r in enumerate(rows):
        p, c = torch.as_tensor(r.prompt_ids, dtype=torch.long), torch.as_tensor(r.completion_ids, dtype=torch.long)
        out["prompt_ids"][i, p_w - len(p):], out["prompt_mask"][i, p_w - len(p):] = p, 1
        out["completion_ids"][i, :len(c)], out["completion_mask"][i, :len(c)] = c, 1
        old[i, :len(c)] = torch.as_tensor(r.behavior_logprobs)
    return out | {"old_per_token_logps": old, "advantages": torch.as_tensor(batch.advantage, dtype=torch.float32),
                  "num_items_in_batch": out["completion_mask"].sum()}


def ours(cfg: RunConfig, model: Path, batches: list[RolloutBatch]) -> tuple[list[dict], dict[str, torch.Tensor]]:
    from replay_rl.learner.engine import LearnerEngine

    engine = LearnerEngine(cfg, 0, str(model))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine.setup("127.0.0.1", port)
    rows = [engine.train_on(b, np.zeros(len(b), int)) for b in batches]
    return [{"loss": r["loss"], "grad_norm": r["grad_norm"]} for r in rows], engine.full_state()


def trl(cfg: RunConfig, model: Path, batches: list[RolloutBatch], out: Path) -> tuple[list[dict], dict]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tok = load_tokenizer(model)
    net = load_model(str(model), "float32", cfg.model.attn_implementation)
    args = GRPOConfig(**train_args(cfg, out, seed=0, steps=len(batches), every=len(batches)))
    trainer = GRPOTrainer(model=net, args=args, processing_class=tok, reward_funcs=lambda completions, **_: [0.0] *
                          len(completions), train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4))
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    net.train()
    rows = []
    for b in batches:
        loss = trainer.compute_loss(net, trl_inputs(b, tok.pad_token_id))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        rows.append({"loss": loss.item(), "grad_norm": norm.item()})
    return rows, {n: p.detach().clone() for n, p in net.named_parameters()}, type(trainer.optimizer).__name__


def update_gap(start: dict, a: dict, b: dict) -> dict:
    """How far apart two updates from the same start are: ‖Δa − Δb‖ / ‖Δb‖ over all parameters, their cosine, and
    the largest elementwise difference against the largest step."""
    da = torch.cat([(a[n] - start[n]).flatten() for n in start]).double()  # float64: a cosine over 135M terms
    db = torch.cat([(b[n] - start[n]).flatten() for n in start]).double()
    return {"relative_difference": ((da - db).norm() / db.norm()).item(),
            "cosine": torch.nn.functional.cosine_similarity(da, db, 0).item(),
            "max_abs_difference": (da - db).abs().max().item(), "max_abs_step": db.abs().max().item(),
            "update_norm_ours": da.norm().item(), "update_norm_trl": db.norm().item()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="the batches' draws (prompts and completions)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "peer_trl" / "step"))
    args = ap.parse_args()
    cfg = RunConfig.load(str(PRESET), MATCHED)
    model = ensure_model(cfg)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batches = fixed_batches(cfg, model, args.steps, args.seed)
    start = {n: p.detach().clone() for n, p in load_model(str(model), "float32").named_parameters()}
    ours_rows, ours_state = ours(cfg, model, batches)
    trl_rows, trl_state, optimizer = trl(cfg, model, batches, out)
    ours_state = {n: ours_state[n] for n in trl_state}  # tied weights: the names both sides hold
    result = {"steps": args.steps, "seed": args.seed, "overrides": MATCHED, "trl_optimizer": optimizer,
              "rows_per_batch": [len(b) for b in batches],
              "teaching_rows": [int((b.advantage != 0).sum()) for b in batches],
              "per_step": [{"step": i + 1, "ours": o, "trl": t}
                           for i, (o, t) in enumerate(zip(ours_rows, trl_rows))],
              "after_all_steps": update_gap({n: start[n] for n in trl_state}, ours_state, trl_state)}
    (out / f"step_seed{args.seed}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

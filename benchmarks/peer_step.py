"""The same update? TRL's GRPOTrainer and replay-rl's learner take K steps on the same K batches (issue 42).

Both trainers start from the SmolLM2 preset's weights and are given the same K batches, each 4 training prompts × 4
completions sampled once by our HFBackend from the starting weights at temperature 1, scored by our task, with our
frozen group-normalised advantages and behaviour log-probs (batches 2..K are stale: the ratio moves off 1, and each
side's clip fraction is recorded). Ours: one LearnerEngine rank (DeepSpeed ZeRO-2 on gloo, torch AdamW), as a run's
learner with learner.loss.aggregation=global_token_mean. TRL's: GRPOTrainer._compute_loss (loss_type "dapo", ε 0.2,
β 0) on the same tokens, advantages and behaviour log-probs, then HF's clip (torch clip_grad_norm_) and the optimizer
GRPOTrainer builds from the GRPOConfig that benchmarks/peer_trl.py trains with. Also: step 1 against TRL's own
on-policy path (no old log-probs handed in, ratio exactly 1), and TRL's own generate → mask → reward → advantage on a
few training problems against ours on its completions. Random draws play no part once the batches are made.

    PYTHONPATH=. /work/tvenv/bin/python benchmarks/peer_step.py --steps 10   # a venv with trl 1.16
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


def ours(cfg: RunConfig, model: Path, batches: list[RolloutBatch]) -> tuple[list[dict], list[dict]]:
    """Our learner's steps on the batches; each row's age is its step's index (all were drawn from the start)."""
    from replay_rl.learner.engine import LearnerEngine

    engine = LearnerEngine(cfg, 0, str(model))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine.setup("127.0.0.1", port)
    rows, states = [], []
    for k, b in enumerate(batches):
        r = engine.train_on(b, np.full(len(b), k))
        rows.append({"loss": r["loss"], "grad_norm": r["grad_norm"], "clip_fraction": r["clip_fraction"]})
        if k in (0, len(batches) - 1):
            states.append(engine.full_state())
    return rows, states


def trl_trainer(cfg: RunConfig, model: Path, out: Path, steps: int, reward=None, dataset=None):
    """A GRPOTrainer with peer_trl.py's GRPOConfig on the preset's weights."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tok = load_tokenizer(model)
    net = load_model(str(model), "float32", cfg.model.attn_implementation)
    args = GRPOConfig(**train_args(cfg, out, seed=0, steps=steps, every=steps))
    return GRPOTrainer(model=net, args=args, processing_class=tok,
                       reward_funcs=reward or (lambda completions, **_: [0.0] * len(completions)),
                       train_dataset=dataset or Dataset.from_list([{"prompt": "1+1="}] * 4))


def trl(cfg: RunConfig, model: Path, batches: list[RolloutBatch], out: Path,
        behaviour: bool = True) -> tuple[list[dict], dict, str]:
    """TRL's loss, clip and optimizer on the batches. behaviour=False: TRL's own on-policy path, where its loop hands
    no old log-probs (num_iterations 1) and the ratio is exactly 1; ours always takes the generator's."""
    trainer = trl_trainer(cfg, model, out, len(batches))
    net, pad = trainer.model, trainer.processing_class.pad_token_id
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    net.train()
    rows = []
    for b in batches:
        inputs = trl_inputs(b, pad)
        if not behaviour:
            del inputs["old_per_token_logps"]
        loss = trainer.compute_loss(net, inputs)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(net.parameters(), trainer.args.max_grad_norm)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        rows.append({"loss": loss.item(), "grad_norm": norm.item(),
                     "clip_fraction": trainer._metrics["train"]["clip_ratio/region_mean"][-1]})
    return rows, {n: p.detach().clone() for n, p in net.named_parameters()}, type(trainer.optimizer).__name__


def trl_sampling(cfg: RunConfig, model: Path, out: Path, problems: int, seed: int, seen: list | None = None):
    """A GRPOTrainer given `problems` training problems (our sampler's draws at `seed`, as peer_trl.py feeds it) and
    our reward (each value also appended to `seen`); returns it, those problems each repeated group_size times in
    the order TRL generates them, and a call that runs TRL's own `_generate_and_score_completions` once on them:
    its output, and its completions cut at their first EOS as our Completions."""
    from peer_trl import prompts_dataset, reward_function

    from replay_rl.generation.backend import truncate_at_eos

    task, tok, g = make_task(cfg.task, cfg.task.split_seed), load_tokenizer(model), cfg.generation
    dataset = prompts_dataset(task, problems, seed)
    reward = reward_function(task, g.max_new_tokens, tok.eos_token_id, g.group_size, [])
    trainer = trl_trainer(cfg, model, out, 1, reward if seen is None else
                          lambda *a, **k: seen.extend(r := reward(*a, **k)) or r, dataset)
    trainer.model.train()
    mine = [p for p in task.sample_train(problems, np.random.default_rng(seed)) for _ in range(g.group_size)]

    def generate() -> tuple[dict, list]:
        got = trainer._generate_and_score_completions([dataset[i] for i in range(problems)
                                                       for _ in range(g.group_size)])
        return got, [truncate_at_eos(ids.numpy(), np.zeros(len(ids)), tok.eos_token_id, 0)
                     for ids in got["completion_ids"]]
    return trainer, mine, generate


def trl_generation_path(cfg: RunConfig, model: Path, out: Path, problems: int, seed: int) -> dict:
    """TRL's own generate → mask → reward → advantage on `problems` training problems, against ours on TRL's
    completions: prompt tokens, each completion's length to its first EOS, rewards and advantages (TRL's unbiased
    std, so ours at generation.advantage_std=sample) row for row; and the sampler TRL builds."""
    from replay_rl.tasks.scoring import applicable_advantages, completion_rewards

    task, tok, g = make_task(cfg.task, cfg.task.split_seed), load_tokenizer(model), cfg.generation
    seen: list = []
    trainer, mine, generate = trl_sampling(cfg, model, out, problems, seed, seen)
    torch.manual_seed(seed)
    got, cut = generate()
    prompts = encode_prompts(tok, mine, chat=cfg.model.chat_template)
    rewards = completion_rewards(task, tok, list(zip(mine, cut)))
    groups = np.array(rewards).reshape(-1, g.group_size)
    advantages = np.concatenate([applicable_advantages(r, ddof=1)[1] for r in groups])
    return {"completions": len(cut), "rewarded": int(np.sum(rewards)),
            "prompt_tokens_same": all(got["prompt_ids"][i][got["prompt_mask"][i].bool()].tolist() == p.tolist()
                                      for i, p in enumerate(prompts)),
            "lengths_same": [len(c.token_ids) for c in cut] == got["completion_mask"].sum(1).tolist(),
            "rewards_same": list(map(float, seen)) == list(map(float, rewards)),
            "advantage_max_abs_difference": float(np.abs(advantages - got["advantages"].numpy()).max()),
            "sampler": {k: getattr(trainer.generation_config, k) for k in
                        ("do_sample", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "eos_token_id")}}


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
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="the batches' draws (prompts and completions)")
    ap.add_argument("--problems", type=int, default=8, help="training problems TRL's own generation path runs on")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "peer_trl" / "step"))
    args = ap.parse_args()
    cfg = RunConfig.load(str(PRESET), MATCHED)
    model = ensure_model(cfg)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    batches = fixed_batches(cfg, model, args.steps, args.seed)
    start = {n: p.detach().clone() for n, p in load_model(str(model), "float32").named_parameters()}
    ours_rows, (ours_first, ours_last) = ours(cfg, model, batches)
    trl_rows, trl_last, optimizer = trl(cfg, model, batches, out)
    _, trl_first_own, _ = trl(cfg, model, batches[:1], out, behaviour=False)
    assert set(ours_last) == set(trl_last) == set(start), "the two sides hold different parameters"
    result = {"steps": args.steps, "seed": args.seed, "overrides": MATCHED, "trl_optimizer": optimizer,
              "rows_per_batch": [len(b) for b in batches],
              "teaching_rows": [int((b.advantage != 0).sum()) for b in batches],
              "per_step": [{"step": i + 1, "ours": o, "trl": t}
                           for i, (o, t) in enumerate(zip(ours_rows, trl_rows))],
              "after_all_steps": update_gap(start, ours_last, trl_last),
              "step_1_against_trl_on_policy": update_gap(start, ours_first, trl_first_own),
              "trl_generation_path": trl_generation_path(cfg, model, out, args.problems, args.seed)}
    (out / f"step_seed{args.seed}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

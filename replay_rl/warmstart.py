"""Supervised warm start: teach the tiny model the task format from a few correct demonstrations.

RL from a random init gets no reward signal. This trains on prompt+answer+EOS (loss on the answer only) and stops
as soon as greedy eval accuracy reaches `target_accuracy`: clearly above zero, far below the ceiling, so RL has room.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress

from replay_rl.config import RunConfig
from replay_rl.evaluation import evaluate
from replay_rl.generation.hf import HFBackend
from replay_rl.models import init_tiny_model_folder, load_tokenizer, parameter_count, save_model_folder
from replay_rl.tasks import make_task


def demo_batches(tokenizer, task, cfg: RunConfig, rng: np.random.Generator):
    problems = task.sample_train(cfg.warmstart.demos, rng)
    pairs = [(tokenizer(p.prompt, add_special_tokens=False)["input_ids"],
              tokenizer(task.demonstration(p), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
             for p in problems]
    while True:
        chosen = [pairs[i] for i in rng.integers(0, len(pairs), size=cfg.warmstart.batch_size)]
        width = max(len(a) + len(b) for a, b in chosen)
        ids = torch.full((len(chosen), width), tokenizer.pad_token_id)
        labels = torch.full((len(chosen), width), -100)
        for i, (a, b) in enumerate(chosen):
            ids[i, :len(a) + len(b)] = torch.tensor(a + b)
            labels[i, len(a):len(a) + len(b)] = torch.tensor(b)
        yield ids, labels, (ids != tokenizer.pad_token_id).long()


def ensure_model(cfg: RunConfig, log=print) -> Path:
    """cfg.model.path, built first if missing: the tiny model (random init at `<path>-init`, warm-started at path)
    or, with model.build=smollm2_135m, the pretrained SmolLM2 folder."""
    path = Path(cfg.model.path)
    if (path / "config.json").is_file() or not cfg.model.create_if_missing:
        return path
    if cfg.model.build == "smollm2_135m":
        from replay_rl.pretrained import build_smollm2_folder

        return build_smollm2_folder(path)
    init = init_tiny_model_folder(cfg.model.tiny, path.with_name(path.name + "-init"))
    warmstart(cfg, init, path, log)
    return path


def warmstart(cfg: RunConfig, src: str | Path, out_path: str | Path, log=print) -> dict[str, float]:
    """Supervised warm start of the model folder at src; the result is saved at out_path."""
    t0 = time.perf_counter()
    # half the cores at most: on a shared 2-core box two spinning OpenMP pools slowed this 18x (733 s vs 40 s)
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) // 2)))
    torch.manual_seed(cfg.run.seed)
    backend = HFBackend(str(src))
    model, tokenizer = backend.model, load_tokenizer(src)
    task = make_task(cfg.task, cfg.task.split_seed)
    w, g = cfg.warmstart, cfg.generation

    def accuracy() -> float:
        model.eval()
        return evaluate(backend, tokenizer, task, n_problems=w.eval_prompts, k=1, temperature=1.0,
                        max_new_tokens=g.max_new_tokens)["pass@1"]

    opt = torch.optim.AdamW(model.parameters(), lr=w.lr, weight_decay=0.0)
    batches = demo_batches(tokenizer, task, cfg, np.random.default_rng(cfg.run.seed))
    acc, step = accuracy(), 0
    with Progress(transient=True) as bar:
        job = bar.add_task("warm start", total=w.max_steps)
        while step < w.max_steps and acc < w.target_accuracy:
            model.train()
            ids, labels, mask = next(batches)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % w.eval_every == 0:
                acc = accuracy()
                bar.update(job, description=f"warm start loss={loss.item():.3f} acc={acc:.2f}")
            bar.advance(job)
    save_model_folder(model, tokenizer, out_path)
    stats = {"steps": step, "eval_accuracy": acc, "seconds": time.perf_counter() - t0,
             "parameters": parameter_count(model)}
    log(f"warm start: {step} steps, greedy accuracy {acc:.2f} on {w.eval_prompts} problems, {stats['seconds']:.0f} s, "
        f"{stats['parameters']:,} parameters → {out_path}")
    return stats

"""Supervised warm start: teach the tiny model the task format from a few correct demonstrations.

RL from a random init gets no reward signal. This trains on prompt+answer+EOS (loss on the answer only) for a fixed
`warmstart.steps`, on one thread from fixed seeds, so every machine with the pinned torch builds the same weights
(stopping at a noisy accuracy threshold did not: 320 steps and step-0 pass@1 0.308 on one box, 0.377 on another).
The folder gets a manifest, warmstart.json: the settings it was built from, its step-0 accuracy and its checksum.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress

from replay_rl.config import ConfigError, RunConfig
from replay_rl.evaluation.passk import greedy_accuracy
from replay_rl.generation.hf import HFBackend
from replay_rl.models.hf_folder import (init_tiny_model_folder, load_tokenizer, parameter_count, save_model_folder,
                                       write_whole)
from replay_rl.models.shipped import MANIFEST, read_manifest, shipped_models
from replay_rl.tasks import make_task


def model_checksum(path: str | Path) -> str:
    """sha256 over the model folder's weight files (*.safetensors, in name order): the warm model's identity."""
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors weights to checksum")
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def build_settings(cfg: RunConfig) -> dict:
    """Everything the warm-started weights depend on; a folder built from other settings is another model."""
    w = cfg.warmstart.model_dump(exclude={"eval_prompts"})
    return {"tiny": cfg.model.tiny.model_dump(), "warmstart": w, "task": cfg.task.model_dump()}


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
    """The run's model folder: model.path as named (a hub id through the HF cache; a local folder that must exist),
    or else the folder model.build builds at model.build_dir, once: the tiny model (random init at
    `<build_dir>-init`, warm-started at build_dir) or the pretrained SmolLM2 folder. A warm-started folder whose
    manifest names other settings than cfg's is refused in one line, never reused or overwritten."""
    from replay_rl.models.hub import local_or_hub_model

    if cfg.model.path is not None:  # named by the user: loaded, never built (a typo is not a new model)
        path = local_or_hub_model(cfg.model.path)
        check_manifest(cfg, path)
        return path
    path = Path(cfg.model.build_dir)
    if not (path / "config.json").is_file():
        if cfg.model.build == "smollm2_135m":
            from replay_rl.models.pretrained import build_smollm2_folder

            return build_smollm2_folder(path)
        if (shipped := shipped_for(cfg)) is not None:  # the same bits on every machine
            write_whole(path, lambda folder: shutil.copytree(shipped, folder))
            manifest = read_manifest(path)  # the copy's own bits are checked once, in check_reference below
            log(f"warm model: the shipped reference {shipped.name} (sha256 {manifest['sha256'][:12]}, step-0 "
                f"pass@1 {manifest['eval_accuracy']:.3f}) → {path}")
        else:
            warmstart(cfg, init_tiny_model_folder(cfg.model.tiny, path.with_name(path.name + "-init")), path, log)
    check_manifest(cfg, path)
    check_reference(cfg, path, log)
    return path


def shipped_for(cfg: RunConfig) -> Path | None:
    """The shipped warm model built from cfg's settings (model.tiny, warmstart, task), if there is one."""
    if cfg.model.build != "tiny":
        return None
    return next((f for f in shipped_models() if not settings_diff(cfg, read_manifest(f)["settings"])), None)


def reference_sha256(cfg: RunConfig) -> str | None:
    """The checksum the run's warm model should have, for settings that have a shipped model: model.reference_sha256
    if the config pins one, else the shipped model's. None for other settings (nothing to compare a build with)."""
    if (shipped := shipped_for(cfg)) is None:
        return None
    return cfg.model.reference_sha256 or read_manifest(shipped)["sha256"]


def check_reference(cfg: RunConfig, path: Path, log=print, where: str | None = None) -> None:
    """One line when the warm model at `path` (`where`: how to name it; default its model.* field) is not the
    shipped reference for its settings: a rebuild on this machine, so RL starts from another model than the
    shipped testbed's."""
    if read_manifest(path) is None or (want := reference_sha256(cfg)) is None or (have := model_checksum(path)) == want:
        return
    log(f"warning: {where or f'model.{cfg.model.start_field} {str(path)!r}'} holds sha256 {have[:12]}, not the "
        f"shipped reference {want[:12]} for these settings: RL starts from another model than the testbed's (a "
        "warm start rebuilt on another CPU is one: docs/reproducibility.md); delete it to copy the shipped one")


def check_manifest(cfg: RunConfig, path: Path) -> None:
    """Refuse a warm start built from settings other than cfg's. A folder without a manifest (a pretrained model,
    a run's final_model) is used as given."""
    built = (read_manifest(path) or {}).get("settings")
    if built is None or cfg.model.build != "tiny":
        return
    diff = settings_diff(cfg, built)
    if diff:
        field = f"model.{cfg.model.start_field}"
        raise ConfigError(f"{field} {str(path)!r} was warm-started with {', '.join(diff[:3])}: point {field} at "
                          "another folder (model.build_dir: it is built there) or delete this one to rebuild it")


def settings_diff(cfg: RunConfig, built: dict) -> list[str]:
    """Each setting where a manifest and cfg differ. A field added since the manifest was written counts as its
    default there (that build used the behaviour the default keeps), so a new field does not orphan old models."""
    sections = {"tiny": cfg.model.tiny, "warmstart": cfg.warmstart, "task": cfg.task}
    diff = []
    for sec, want in build_settings(cfg).items():
        old, fields = built.get(sec, {}), type(sections[sec]).model_fields
        for k in sorted(old.keys() | want.keys()):
            then = old[k] if k in old else fields[k].get_default(call_default_factory=True) if k in fields else None
            if k not in want or want[k] != then:
                diff.append(f"{sec}.{k}={old.get(k, '(absent)')!r} (config: {want.get(k, '(absent)')!r})")
    return diff


def supervised_steps(model, tokenizer, task, cfg: RunConfig):
    """Run cfg.warmstart.steps Adam steps on demonstrations (the LR constant, then falling linearly to 0 over the
    last warmstart.decay_steps); yields (step, loss) after each. A fixed count on fixed seeds, never a stop at an
    eval: the same settings give the same model on every machine with the pinned torch."""
    w = cfg.warmstart
    opt = torch.optim.AdamW(model.parameters(), lr=w.lr, weight_decay=0.0)
    tail = min(w.decay_steps, w.steps)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (w.steps - i) / tail) if tail else 1.0)
    batches = demo_batches(tokenizer, task, cfg, np.random.default_rng(w.seed))
    for step in range(1, w.steps + 1):
        model.train()
        ids, labels, mask = next(batches)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        decay.step()
        model.eval()
        yield step, loss.item()


def warmstart(cfg: RunConfig, src: str | Path, out_path: str | Path, log=print) -> dict:
    """Supervised warm start of the model folder at src, saved at out_path with its manifest; returns the manifest
    (plus seconds and parameters)."""
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    # one thread on every box: 1 and 2 threads gave the same bits here, but wider boxes split matmuls into other
    # sums; the tiny model loses little (and two spinning pools on a 2-core box once slowed this 18x)
    torch.set_num_threads(1)
    try:
        torch.manual_seed(cfg.warmstart.seed)
        backend = HFBackend(str(src))
        model, tokenizer = backend.model, load_tokenizer(src)
        task = make_task(cfg.task, cfg.task.split_seed)
        w = cfg.warmstart
        with Progress(transient=True) as bar:
            job = bar.add_task("warm start", total=w.steps)
            for step, loss in supervised_steps(model, tokenizer, task, cfg):
                bar.update(job, advance=1, description=f"warm start loss={loss:.3f}")
        acc = greedy_accuracy(backend, tokenizer, task, n_problems=w.eval_prompts,
                              max_new_tokens=cfg.generation.max_new_tokens)
        save_model_folder(model, tokenizer, out_path)
    finally:
        torch.set_num_threads(threads)
    manifest = {"settings": build_settings(cfg), "steps": w.steps, "eval_accuracy": acc,
                "eval_problems": min(w.eval_prompts, len(task.eval_problems())), "sha256": model_checksum(out_path),
                "torch": torch.__version__}
    (Path(out_path) / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    stats = manifest | {"seconds": time.perf_counter() - t0, "parameters": parameter_count(model)}
    log(f"warm start: {w.steps} steps, greedy pass@1 {acc:.3f} on {manifest['eval_problems']} held-out problems, "
        f"{stats['seconds']:.0f} s, {stats['parameters']:,} parameters, sha256 {manifest['sha256'][:12]} → {out_path}")
    return stats

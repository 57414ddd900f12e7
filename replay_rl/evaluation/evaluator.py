"""Evaluator: a Ray actor holding its own generation backend, built by the generation factory; evaluates the latest
published weights. Its backend is transformers whatever generation.backend says unless run.eval_backend=generation:
by default runs on either engine are scored by the same greedy decoder (the engines' learning parity was measured
so), at the cost of speed on large models."""

from __future__ import annotations

import ray
import torch

from replay_rl.config import RunConfig
from replay_rl.evaluation.passk import evaluate_for_run
from replay_rl.generation.factory import make_backend
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.sync.base import load_if_newer
from replay_rl.sync.object_store import ObjectStoreSubscriber
from replay_rl.tasks import make_task


class EvaluatorImpl:
    def __init__(self, cfg: RunConfig, model_path: str, board) -> None:
        torch.set_num_threads(1)
        self.cfg = cfg
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.backend = make_backend(cfg.eval_generation, cfg.model, model_path, device, bucket_mb=cfg.sync.bucket_mb,
                                    seed=cfg.run.seed)
        self.tokenizer = load_tokenizer(model_path)
        self.task = make_task(cfg.task, cfg.task.split_seed)
        self.weights = ObjectStoreSubscriber(board)

    def evaluate_latest(self) -> dict[str, float]:
        load_if_newer(self.weights, self.backend, self.weights.latest())  # the version published just before
        out = evaluate_for_run(self.backend, self.tokenizer, self.task, self.cfg)
        return out | {"version": self.backend.version}


Evaluator = ray.remote(max_restarts=0)(EvaluatorImpl)

"""The trackers a run's metrics are mirrored to (tracking.loggers): TensorBoard, MLflow, Weights & Biases.

Each gets every row the MetricsSink writes to metrics.jsonl, under the same namespaced keys. A resumed run (the same
run id, after a restart or a `resume_from`) continues its tracked runs rather than starting new ones: their ids are
kept in output_dir/trackers.json."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Protocol

from replay_rl.config import RunConfig

IDS_FILE = "trackers.json"


class Tracker(Protocol):
    def log(self, step: int, kind: str, values: dict) -> None: ...

    def close(self, failed: bool = False) -> None: ...


def tracked(kind: str, values: dict) -> dict[str, float]:
    """A row's numbers under metrics.jsonl's keys. An eval row's other keys (its ledger) get eval/ in front: the
    train row of the same step carries its own."""
    numbers = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {k if kind == "train" or k.startswith(f"{kind}/") else f"{kind}/{k}": v for k, v in numbers.items()}


def flat_config(cfg: RunConfig) -> dict[str, str]:
    """The config as dotted parameters (learner.lr, replay.capacity, …), each value as its JSON text."""
    flat: dict[str, str] = {}

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat[prefix] = json.dumps(node)

    walk("", cfg.model_dump(mode="json"))
    return flat


def mlflow_uri(cfg: RunConfig, out: Path) -> str:
    """tracking.mlflow_uri, or the run's own file store, output_dir/mlruns."""
    return cfg.tracking.mlflow_uri or (out / "mlruns").resolve().as_uri()


def mlflow_client(uri: str):
    """An MLflow client of `uri`; MLflow 3 refuses a file store unless asked (maintenance mode, still readable)."""
    from mlflow.tracking import MlflowClient

    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(uri)


class TensorBoardTracker:
    def __init__(self, out: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(out / "tb"))

    def log(self, step: int, kind: str, values: dict) -> None:
        for k, v in tracked("train", values).items():  # tags as train/<key> and eval/<key>
            self._writer.add_scalar(f"{kind}/{k}", v, step)

    def close(self, failed: bool = False) -> None:
        self._writer.close()


class MlflowTracker:
    def __init__(self, cfg: RunConfig, out: Path, run_id: str | None) -> None:
        from mlflow.entities import Param

        self.uri = mlflow_uri(cfg, out)
        self._client = client = mlflow_client(self.uri)
        if run_id is None:
            experiment = client.get_experiment_by_name(cfg.tracking.experiment)
            exp_id = experiment.experiment_id if experiment else client.create_experiment(cfg.tracking.experiment)
            run_id = client.create_run(exp_id, run_name=out.name).info.run_id
            params = [Param(k, v[:6000]) for k, v in flat_config(cfg).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
                client.log_batch(run_id, params=params[i:i + 100])
        else:
            client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def log(self, step: int, kind: str, values: dict) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(re.sub(r"[^\w.\- :/]", "_", k.replace("@", "_at_")), v, now, step)
                   for k, v in tracked(kind, values).items()]
        for i in range(0, len(metrics), 1000):
            self._client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self, failed: bool = False) -> None:
        self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class WandbTracker:
    def __init__(self, cfg: RunConfig, out: Path, run_id: str | None) -> None:
        import wandb

        new = run_id is None
        self._run = wandb.init(project=cfg.tracking.experiment, name=out.name, dir=str(out),
                               mode=cfg.tracking.wandb_mode, id=run_id, resume=None if new else "allow", config=flat_config(cfg) if new else None,
                               settings=wandb.Settings(console="off", silent=True))
        # rows arrive out of step order (an eval is logged after later train steps): the x-axis is a logged key
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")
        self.run_id = self._run.id

    def log(self, step: int, kind: str, values: dict) -> None:
        self._run.log(tracked(kind, values) | {"step": step})

    def close(self, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)


def look_line(cfg: RunConfig, out: Path) -> str:
    """Where a person looks at the run's curves: its plots, and each tracker it logged to."""
    t = cfg.tracking
    wandb = f"wandb sync {out}/wandb/offline-run-*" if t.wandb_mode == "offline" else f"W&B project {t.experiment}"
    hints = {"tensorboard": f"tensorboard --logdir {out}/tb", "mlflow": f"MLflow at {mlflow_uri(cfg, out)}",
             "wandb": wandb}
    return ", or ".join([f"look: {out}/plots/*.png", *(hints[name] for name in t.loggers)])


def make_trackers(cfg: RunConfig, out: Path, run_id: str | None, resume: bool) -> list[Tracker]:
    """The trackers tracking.loggers names. A resumed attempt of the same run (run_id) continues the tracked runs
    that trackers.json names; a fresh run starts new ones and records their ids there."""
    path = out / IDS_FILE
    kept = json.loads(path.read_text()) if resume and path.is_file() else {}
    ids = kept.get("ids", {}) if run_id is not None and kept.get("run_id") == run_id else {}
    built = {"tensorboard": lambda: TensorBoardTracker(out), "mlflow": lambda: MlflowTracker(cfg, out, ids.get("mlflow")),
             "wandb": lambda: WandbTracker(cfg, out, ids.get("wandb"))}
    trackers = {name: built[name]() for name in cfg.tracking.loggers}
    ids = {name: t.run_id for name, t in trackers.items() if name != "tensorboard"}
    path.write_text(json.dumps({"run_id": run_id, "ids": ids}, indent=1))
    return list(trackers.values())

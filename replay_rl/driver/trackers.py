"""The trackers a run's metrics are mirrored to (tracking.loggers): TensorBoard, MLflow, Weights & Biases.

Each gets every row the MetricsSink writes to metrics.jsonl. Every start of a run (its first, a restart, a
resume) opens new MLflow and W&B runs, grouped by the run id and first given the rows metrics.jsonl keeps through the
step it resumed at, so each tracked run holds one history that matches metrics.jsonl, with no step twice (W&B cannot
resume an offline run, and rows after a checkpoint are trained again). TensorBoard's folder is shared: a resume
purges its events past the resumed step."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Protocol

from replay_rl.config import RunConfig
from replay_rl.driver.tracker_queue import QueuedTracker
from replay_rl.metrics import ROW_FIELDS

LOCAL_STORES = ("mlruns", "wandb")  # what the default MLflow and offline W&B write into the run folder


class Tracker(Protocol):
    def log(self, step: int, kind: str, values: dict) -> None: ...

    def log_samples(self, step: int, rows: list[dict]) -> None: ...

    def close(self, failed: bool = False) -> None: ...


def tracked(kind: str, values: dict) -> dict[str, float]:
    """A row's numbers under metrics.jsonl's keys. An eval row's other keys (its ledger) get eval/ in front: the
    train row of the same step carries its own."""
    numbers = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {k if kind == "train" or k.startswith(f"{kind}/") else f"{kind}/{k}": v for k, v in numbers.items()}


def samples_markdown(rows: list[dict]) -> str:
    """Completions as a markdown table (TensorBoard's text tab renders it)."""
    cols = list(rows[0]) if rows else []

    def cell(v) -> str:
        return str(round(v, 3) if isinstance(v, float) else v).replace("|", "\\|").replace("\n", "⏎")

    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
                       *("| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows)])


def flat_config(cfg: RunConfig) -> dict[str, str]:
    """The config as dotted parameters (learner.lr, replay.capacity, …), each value as its JSON text."""
    flat: dict[str, str] = {}

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict) and node:
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
    def __init__(self, out: Path, resumed_at: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a resume writes the steps after its checkpoint again: the earlier events from there on are dropped
        self._writer = SummaryWriter(str(out / "tb"), purge_step=None if resumed_at is None else resumed_at + 1)

    def log(self, step: int, kind: str, values: dict) -> None:
        for k, v in tracked("train", values).items():  # tags as train/<key> and eval/<key>
            self._writer.add_scalar(f"{kind}/{k}", v, step)

    def log_samples(self, step: int, rows: list[dict]) -> None:
        self._writer.add_text("samples", samples_markdown(rows), step)

    def close(self, failed: bool = False) -> None:
        self._writer.close()


class MlflowTracker:
    def __init__(self, cfg: RunConfig, out: Path, run_id: str | None) -> None:
        from mlflow.entities import Param

        self.uri = mlflow_uri(cfg, out)
        self._client = client = mlflow_client(self.uri)
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        exp_id = experiment.experiment_id if experiment else client.create_experiment(cfg.tracking.experiment)
        self.run_id = client.create_run(exp_id, run_name=out.name, tags={"replay_rl.run_id": str(run_id)}).info.run_id
        params = [Param(k, v[:6000]) for k, v in flat_config(cfg).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
            client.log_batch(self.run_id, params=params[i:i + 100])

    def log(self, step: int, kind: str, values: dict) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(re.sub(r"[^\w.\- :/]", "_", k.replace("@", "_at_")), v, now, step)
                   for k, v in tracked(kind, values).items()]
        for i in range(0, len(metrics), 1000):
            self._client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def log_samples(self, step: int, rows: list[dict]) -> None:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        self._client.log_text(self.run_id, text, f"samples/step_{step:07d}.jsonl")

    def close(self, failed: bool = False) -> None:
        self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class WandbTracker:
    def __init__(self, cfg: RunConfig, out: Path, run_id: str | None) -> None:
        import wandb

        self._run = wandb.init(project=cfg.tracking.experiment, name=out.name, group=run_id, dir=str(out),
                               mode=cfg.tracking.wandb_mode, config=flat_config(cfg),
                               settings=wandb.Settings(console="off", silent=True))
        # rows arrive out of step order (an eval is logged after later train steps): the x-axis is a logged key
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")
        self.run_id = self._run.id

    def log(self, step: int, kind: str, values: dict) -> None:
        self._run.log(tracked(kind, values) | {"step": step})

    def log_samples(self, step: int, rows: list[dict]) -> None:
        import wandb

        columns = list(rows[0]) if rows else ["completion"]
        self._run.log({"samples": wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows]),
                       "step": step})

    def close(self, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)


def make_trackers(cfg: RunConfig, out: Path, run_id: str | None, resumed_at: int | None,
                  history: list[dict], first_start: bool | None = None) -> list[Tracker]:
    """The trackers tracking.loggers names, for one start of the run, each on a bounded queue of its own thread
    (tracker_queue.py). history: the rows metrics.jsonl keeps through `resumed_at` (none for a fresh start), given
    first to the new MLflow and W&B runs. first_start: the run's first (not a resume, not a restart): a tracker that
    cannot start stops it before it trains; by default, when nothing is resumed."""
    fresh = resumed_at is None if first_start is None else first_start
    starts = {"tensorboard": ("TensorBoard", lambda: TensorBoardTracker(out, resumed_at)),
              "mlflow": ("Mlflow", lambda: MlflowTracker(cfg, out, run_id)),
              "wandb": ("Wandb", lambda: WandbTracker(cfg, out, run_id))}
    trackers: list[Tracker] = []
    try:
        for name in cfg.tracking.loggers:
            shown, start = starts[name]
            tracker = QueuedTracker(shown, start, cfg.tracking.timeout_s, fresh)
            trackers.append(tracker)
            if name != "tensorboard" and history:  # TensorBoard's folder is shared across starts and kept its rows
                tracker.log_rows([(row["step"], row["kind"], {k: v for k, v in row.items() if k not in ROW_FIELDS})
                                  for row in history])
    except BaseException:
        for tracker in trackers:  # none left open (an MLflow run would stay RUNNING)
            tracker.close(failed=True)
        raise
    return trackers


def look_line(cfg: RunConfig, out: Path) -> str:
    """Where a person looks at the run's curves: its plots, and each tracker it logged to."""
    t, uri = cfg.tracking, mlflow_uri(cfg, out)
    wandb = f"wandb sync {out}/wandb/offline-run-*" if t.wandb_mode == "offline" else f"W&B project {t.experiment}"
    mlflow = f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}" if uri.startswith("file:") else uri
    hints = {"tensorboard": f"tensorboard --logdir {out}/tb", "mlflow": mlflow, "wandb": wandb}
    return ", or ".join([f"look: {out}/plots/*.png", *(hints[name] for name in t.loggers)])

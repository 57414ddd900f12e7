"""Where a run's metrics go besides metrics.jsonl: TensorBoard, MLflow and Weights & Biases (the trackers extra)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from replay_rl.config.base import _Section

Logger = Literal["tensorboard", "mlflow", "wandb"]


class TrackingConfig(_Section):
    loggers: list[Logger] = ["tensorboard"]
    """Where each metrics.jsonl row is mirrored (metrics.jsonl itself is always written): tensorboard
    (output_dir/tb), mlflow, wandb. mlflow and wandb need `pip install -e '.[trackers]'`. Keys are metrics.jsonl's
    (an eval row's ledger keys get eval/ in front; MLflow, which forbids @, reads eval/pass@1 as eval/pass_at_1)."""
    experiment: str = "replay-rl"
    """The MLflow experiment and the W&B project a run logs to; the run is named after its output_dir and carries
    the whole config as parameters. A resumed run (the same run id) continues its tracked runs."""
    mlflow_uri: str | None = None
    """MLflow's tracking URI: a server (http://host:5000) or a database (sqlite:///mlflow.db, which needs the full
    mlflow package). None: a local file store in output_dir/mlruns (the full package's `mlflow ui
    --backend-store-uri` shows it)."""
    timeout_s: float = Field(30.0, gt=0)
    """The longest the driver waits on a tracker, which logs from a thread of its own: for it to start (a fresh run
    then stops in one line before training; a resume or restart drops it in one line and goes on) and to finish
    its rows at the run's end. metrics.jsonl keeps every row whatever a tracker does."""
    wandb_mode: Literal["offline", "online"] = "offline"
    """offline: written under output_dir/wandb with no network, uploaded later by `wandb sync`; online needs a
    `wandb login` (or WANDB_API_KEY) and network."""

    @field_validator("loggers")
    @classmethod
    def _once_each(cls, loggers: list[str]) -> list[str]:
        if len(set(loggers)) != len(loggers):
            raise ValueError(f"{loggers} names a logger twice; name each once")
        return loggers

"""Checks a run's inputs before Ray starts: a bad setting costs seconds and one line, not an actor traceback later.

Each failure is a ConfigError naming the field and the fix; the CLI prints it and exits 2.
"""

from __future__ import annotations

import importlib.util
import netrc
import os
import sys
from pathlib import Path

from replay_rl.driver.checkpoints import is_checkpoint
from replay_rl.config import ConfigError, RunConfig
from replay_rl.driver.run_folder import FolderLock, check_folder


def preflight(cfg: RunConfig) -> None:
    check_model(cfg)
    check_task(cfg)
    check_resume(cfg)
    check_trackers(cfg)
    # the local cluster connect() will start; not inside a Ray worker (a study trial: its driver checked the cluster)
    if cfg.cluster.address is None and "RAY_ADDRESS" not in os.environ and not in_ray_worker():
        check_fits(cfg, {"CPU": max(2, os.cpu_count() or 2), "GPU": local_gpus()})
    check_output_dir(cfg)  # last: the inputs' own errors come first


def check_model(cfg: RunConfig) -> None:
    """model.path must name a model (a hub id is fetched into the HF cache now, before Ray starts); unset, the
    model.build folder is checked once it exists (ensure_model builds it otherwise)."""
    from replay_rl.models.hub import local_or_hub_model

    if cfg.model.path is not None:
        check_model_folder(local_or_hub_model(cfg.model.path))
    elif cfg.model.build == "tiny" and cfg.task.type == "dataset":
        raise ConfigError("model.build=tiny warm-starts on the task's own demonstrations, which task.type=dataset "
                          "does not have; set model.path to your model (or model.build=smollm2_135m)")
    elif Path(cfg.model.build_dir).exists():
        check_model_folder(Path(cfg.model.build_dir), "model.build_dir")


def check_model_folder(path: Path, field: str = "model.path") -> None:
    if not (path / "config.json").is_file():
        raise ConfigError(f"{field} {str(path)!r} is not an HF model folder (no config.json); "
                          "point it at a folder written by save_pretrained or `replay-rl init-model`")
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ConfigError(f"{field} {str(path)!r} has no tokenizer (tokenizer.json / tokenizer_config.json); "
                          "save the tokenizer into the model folder")


def check_task(cfg: RunConfig) -> None:
    """Build the task once here: loaders validate every row, so a bad file fails now, naming file:line."""
    from replay_rl.tasks import make_task

    try:
        make_task(cfg.task, cfg.task.split_seed)
    except (ValueError, KeyError, FileNotFoundError, ImportError, RuntimeError) as e:
        raise ConfigError(str(e.args[0]) if e.args else repr(e)) from None


def check_resume(cfg: RunConfig) -> None:
    src = cfg.run.resume_from
    if src is not None and src != "auto" and not is_checkpoint(Path(src)):
        raise ConfigError(f"run.resume_from {src!r} is not a complete checkpoint (no trainer_state.json); pass a "
                          "checkpoints/step_N folder written by a previous run, or 'auto' for the newest one")


def check_trackers(cfg: RunConfig) -> None:
    """A tracker that cannot start fails now, in one line, not after the roles hold their GPUs."""
    t = cfg.tracking
    for name in sorted(set(t.loggers) & {"mlflow", "wandb"}):
        if importlib.util.find_spec(name) is None:
            raise ConfigError(f"tracking.loggers names {name}, which is not installed: pip install -e '.[trackers]', "
                              f"or drop {name} from tracking.loggers")
    database = (t.mlflow_uri or "").split(":")[0].split("+")[0] in ("sqlite", "postgresql", "mysql", "mssql")
    if "mlflow" in t.loggers and database and importlib.util.find_spec("sqlalchemy") is None:
        raise ConfigError(f"tracking.mlflow_uri {t.mlflow_uri!r} is a database, which mlflow-skinny cannot write: "
                          "pip install mlflow, or use a tracking server (http://…) or no mlflow_uri (a file store)")
    if "wandb" in t.loggers and t.wandb_mode == "online" and not wandb_login():
        raise ConfigError("tracking.wandb_mode=online needs a W&B login (wandb login, or WANDB_API_KEY); or set "
                          "tracking.wandb_mode=offline and `wandb sync` later")


def wandb_login() -> bool:
    """Whether W&B has a key to log in with: WANDB_API_KEY, or the ~/.netrc entry `wandb login` writes."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def check_output_dir(cfg: RunConfig) -> None:
    """Another driver in the folder, or another run's history there, in one line now; train() decides again under
    the folder's lock, which it holds for the run's life."""
    out = Path(cfg.run.output_dir)
    FolderLock(out).release()
    check_folder(cfg, out)


def check_fits(cfg: RunConfig, resources: dict[str, float]) -> None:
    c = cfg.cluster
    gpus, cpus = (sum(b.get(key, 0) for b in c.bundles()) for key in ("GPU", "CPU"))
    if gpus > resources.get("GPU", 0) or cpus > resources.get("CPU", 0):
        raise ConfigError(f"cluster too small for W={c.generators}, T={c.learners}: needs {gpus:g} GPUs and {cpus:g} "
                          f"CPUs, the Ray cluster has {resources.get('GPU', 0):g} GPUs and {resources.get('CPU', 0):g}"
                          " CPUs; lower cluster.generators / cluster.learners or add nodes")
    for field, asks, count in (("generator_resources", c.generator_resources, c.generators),
                               ("learner_resources", c.learner_resources, c.learners)):
        for name, amount in asks.items():
            if amount * count > resources.get(name, 0):
                raise ConfigError(f"cluster.{field}: {count} × {name}={amount:g} but the Ray cluster offers "
                                  f"{resources.get(name, 0):g} {name}; start nodes with `ray start --resources="
                                  f"'{{\"{name}\": N}}'` or change cluster.{field}")


ROLE_NAMES = {"driver": "the run's driver", "evaluator": "the evaluator", "generator": "a generator",
              "learner": "a learner rank"}  # cluster.role_bundles()'s roles, in a sentence


def check_placeable(cfg: RunConfig, nodes: list[dict]) -> None:
    """Whether a study trial of this run's shape can ever be placed on the cluster of `nodes` (ray.nodes()): the
    totals (check_fits), each bundle of cluster.bundles() within one alive node (else Tune would leave the trial
    pending for ever), and on a cluster with GPUs a GPU reserved for the evaluator. One ConfigError line if not."""
    alive = [n["Resources"] for n in nodes if n.get("Alive", True)]
    totals: dict[str, float] = {}
    for offer in alive:
        for key, amount in offer.items():
            totals[key] = totals.get(key, 0) + amount
    check_fits(cfg, totals)
    c = cfg.cluster
    for role, bundle in c.role_bundles():
        if not any(all(offer.get(k, 0) >= v for k, v in bundle.items()) for offer in alive):
            custom = [k for k in bundle if k not in ("CPU", "GPU")]
            near = [offer for offer in alive if all(offer.get(k, 0) >= bundle[k] for k in custom)] or alive
            most = {k: max(offer.get(k, 0) for offer in near) for k in bundle}
            raise ConfigError(f"{ROLE_NAMES[role]}'s bundle {bundle} fits no node of the Ray cluster (its nodes"
                              f"{' offering ' + ', '.join(custom) if custom else ''} offer at most {most}); lower "
                              "cluster.cpus_per_actor or the GPUs or resources it asks for, or add a node that holds it")
    if totals.get("GPU", 0) and not c.gpus_per_evaluator:
        raise ConfigError("cluster.gpus_per_evaluator=0 on a cluster with GPUs: each trial's evaluator would use a GPU "
                          "no trial reserved; set cluster.gpus_per_evaluator (e.g. 0.1)")


def in_ray_worker() -> bool:
    """Whether this process is a Ray worker (a study trial's actor), without importing Ray."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray._private.worker.global_worker.mode == ray.WORKER_MODE


def local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0

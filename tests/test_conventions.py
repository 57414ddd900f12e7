"""Mechanical checks of the style rules: small files, heavy imports only at the edges, tests mirror the package."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "replay_rl"

# modules that must import on a bare CPU box without Ray, DeepSpeed or vLLM
CORE = ["replay_rl.config", "replay_rl.rollout", "replay_rl.replay.selectors", "replay_rl.replay.retention",
        "replay_rl.replay.limits", "replay_rl.replay.table", "replay_rl.replay.snapshot", "replay_rl.learner.losses",
        "replay_rl.replay.live", "replay_rl.replay.pace_check",  # a shard's restore rules; the model check on them
        "replay_rl.replay.reuse_window", "replay_rl.replay.reuse_controller", "replay_rl.learner.trust_region",
        "replay_rl.learner.batching", "replay_rl.learner.agreement", "replay_rl.accounting", "replay_rl.theory", "replay_rl.tasks",
        "replay_rl.generation.backend", "replay_rl.config_errors", "replay_rl.study",
        "replay_rl.run_folder",  # the run folder's lock and id: train() and preflight decide before Ray starts
        # what the GPU check runs on a machine that has no Ray (cluster/gpu_check.py)
        "replay_rl.learner.engine", "replay_rl.sync.base", "replay_rl.sync.buckets", "replay_rl.generation.hf",
        "replay_rl.models",
        # the probe runs in one process: no Ray, no DeepSpeed (probe/run.py)
        "replay_rl.probe.estimators", "replay_rl.probe.correlations", "replay_rl.probe.effective",
        "replay_rl.probe.status", "replay_rl.probe.recommend", "replay_rl.probe.report",
        "replay_rl.probe.run", "replay_rl.probe.drift", "replay_rl.probe.pilot"]  # the pilot: Ray only to train


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_files_stay_under_400_lines(path):
    assert len(path.read_text().splitlines()) <= 400


def test_core_modules_import_no_ray_deepspeed_or_vllm():
    code = ("import importlib, json, sys\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(k for k in ('ray', 'deepspeed', 'vllm') if k in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_only_the_learner_engine_imports_deepspeed_and_only_vllm_files_import_vllm():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if "import deepspeed" in text:
            assert path.relative_to(PACKAGE) == Path("learner/engine.py"), path
        if "import vllm" in text or "from vllm" in text:
            assert path.name.startswith("vllm"), path


def test_tests_mirror_the_package():
    for sub in (ROOT / "tests").iterdir():
        if sub.is_dir() and not sub.name.startswith(("_", ".")):
            assert (PACKAGE / sub.name).is_dir(), f"tests/{sub.name} has no replay_rl/{sub.name} to mirror"

"""Mechanical checks of the style rules: small files, heavy imports only at the edges, tests mirror the package."""

import ast
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
        "replay_rl.learner.batching", "replay_rl.learner.agreement", "replay_rl.analysis.accounting",
        "replay_rl.analysis.theory", "replay_rl.tasks",
        "replay_rl.generation.backend", "replay_rl.config_errors", "replay_rl.analysis.study",
        "replay_rl.driver.run_folder",  # the run folder's lock and id: train() and preflight decide before Ray starts
        "replay_rl.config.replay_specs",  # RunConfig -> the specs a shard is built from: plain data, no Ray
        # what the GPU check runs on a machine that has no Ray (cluster/gpu_check.py)
        "replay_rl.learner.engine", "replay_rl.sync.base", "replay_rl.sync.buckets", "replay_rl.generation.hf",
        "replay_rl.models.hf_folder", "replay_rl.sync.plan",
        # the probe runs in one process: no Ray, no DeepSpeed (probe/run.py)
        "replay_rl.probe.estimators", "replay_rl.probe.correlations", "replay_rl.probe.effective",
        "replay_rl.probe.status", "replay_rl.probe.recommend", "replay_rl.probe.report",
        "replay_rl.probe.run", "replay_rl.probe.drift", "replay_rl.probe.pilot",  # the pilot: Ray only to train
        # the study's specs and tables: --report-only runs without Ray or Tune
        "replay_rl.study.presets", "replay_rl.study.specs", "replay_rl.study.table", "replay_rl.study.main"]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_files_stay_under_300_lines(path):
    assert len(path.read_text().splitlines()) <= 300


def test_core_modules_import_no_ray_deepspeed_or_vllm():
    code = ("import importlib, json, sys\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(k for k in ('ray', 'deepspeed', 'vllm') if k in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_actors_every_run_starts_first_import_no_torch():
    """The two weight boards and the generators' report actor are fresh Ray worker processes in every build: a torch
    import (about 1.5 s of CPU each) would slow every run's start, and the suite's ~55 builds."""
    code = ("import sys, replay_rl.sync.board, replay_rl.generation.reports\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_only_the_learner_engine_imports_deepspeed_and_only_vllm_files_import_vllm():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if "import deepspeed" in text:
            assert path.relative_to(PACKAGE) == Path("learner/engine.py"), path
        if "import vllm" in text or "from vllm" in text:
            assert path.name.startswith("vllm"), path


def test_only_the_study_trials_import_ray_tune():
    """Ray Tune (an optional extra) is the study's engine and nothing else's: one module holds every use of it."""
    for path in PACKAGE.rglob("*.py"):
        if "ray.tune" in path.read_text() or "from ray import tune" in path.read_text():
            assert path.relative_to(PACKAGE) == Path("study/trials.py"), path


def test_tests_mirror_the_package():
    # tests/benchmarks and tests/cluster mirror the repository's benchmarks/ and cluster/ scripts
    for sub in (ROOT / "tests").iterdir():
        if sub.is_dir() and not sub.name.startswith(("_", ".")):
            mirrored = PACKAGE / sub.name if sub.name not in ("benchmarks", "cluster") else ROOT / sub.name
            assert mirrored.is_dir(), f"tests/{sub.name} has nothing to mirror"


# A room may import only rooms of a lower layer (or itself): the dependency runs one way, so no circle can form.
LAYERS = {"config_errors": 0, "rollout": 0, "metrics": 0, "analysis": 1, "replay": 1, "config": 2,
          "tasks": 3, "models": 3, "sync": 3, "generation": 4, "learner": 4, "evaluation": 5, "probe": 6,
          "driver": 7, "study": 8, "cli": 9}


def rooms_imported(path: Path) -> set[str]:
    """The rooms of replay_rl (first package or top-level module) that a file imports, lazily or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "replay_rl":
            parts = node.module.split(".")
            found |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("replay_rl.")}
    return found


def test_top_level_holds_at_most_six_modules():
    assert len(list(PACKAGE.glob("*.py"))) <= 6


def test_every_room_has_a_layer():
    rooms = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert rooms - {"__init__"} == set(LAYERS)


def test_every_package_room_has_its_test_folder():
    """Tests mirror the package: a room's tests are in tests/<room>/ (the rest, at the top, exercise the system)."""
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    missing = [room for room in rooms if not list((ROOT / "tests" / room).glob("test_*.py"))]
    assert not missing, f"rooms without tests/<room>/test_*.py: {missing}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_upward_import(path):
    room = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    if room == "__init__":
        return
    upward = {other for other in rooms_imported(path) - {room} if LAYERS[other] >= LAYERS[room]}
    assert not upward, f"{room} imports {sorted(upward)}, a room at its layer or above"


def test_no_untyped_roles_parameter():
    """The driver's phases take `roles` typed (issue 45): an untyped one hid a circle of calls the imports did not show
    and no IDE could follow."""
    for path in (PACKAGE / "driver").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in node.args.args + node.args.kwonlyargs:
                    assert arg.arg != "roles" or arg.annotation is not None, f"{path}:{node.lineno} {node.name}(roles)"


def test_the_driver_imports_nothing_for_type_checking_only():
    """Issue 45's circle (Roles held a Supervisor that held Roles back, typed only under TYPE_CHECKING) is gone: the
    supervisor, the checkpointer and the eval schedule read RoleHandles, below Roles, so every arrow in the driver
    is a real import that test_no_upward_import and an IDE can see."""
    for path in (PACKAGE / "driver").glob("*.py"):
        tree = ast.parse(path.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"], path


def test_no_type_checking_only_import_of_a_private_name():
    """An import under `if TYPE_CHECKING:` names public things: a private one would be a dependency in disguise."""
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                for imp in (n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))):
                    private = [a.name for a in imp.names if a.name.split(".")[-1].startswith("_")]
                    assert not private, f"{path}:{imp.lineno} imports {private} only for type checking"


def test_no_implementation_inheritance():
    """Classes compose (torchtune's rule): a base is a Protocol, an exception, or a config section's schema."""
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            for base in map(ast.unparse, node.bases if isinstance(node, ast.ClassDef) else []):
                schema = base == "BaseModel" or (base.startswith("_") and base.endswith(("Section", "Common")))
                assert base == "Protocol" or base.endswith("Error") or schema, f"{path}: {node.name}({base})"

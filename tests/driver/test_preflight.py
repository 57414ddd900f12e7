"""Bad inputs fail before Ray starts: one line on stderr naming the field or file, exit code 2, within seconds."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay_rl.driver.checkpoints import commit, latest_checkpoint, resolve_resume, staging_dir
from replay_rl.metrics import MetricsSink, read_metrics

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, timeout=60):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)
    return proc, time.monotonic() - t0


def bad_inputs(tmp):
    (tmp / "bad.yaml").write_text("run:\n  steps: [1, 2\nmodel: {}\n")
    (tmp / "broken.jsonl").write_text('{"question": "a", "answer": "1"}\n{"question": "b"\n')
    (tmp / "empty_answer.jsonl").write_text('{"question": "a", "answer": "1"}\n{"question": "b", "answer": " "}\n')
    (tmp / "three.jsonl").write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n"
                                             for i in range(3)))
    (tmp / "not_a_model").mkdir()
    jsonl = ["-s", "task.type=jsonl_math", "-s"]
    return {
        "yaml syntax": (["-c", str(tmp / "bad.yaml")], "bad.yaml:3:6: YAML syntax error"),
        "yaml in --set": (["-s", "run.steps=[1,"], "--set 'run.steps=[1,'"),
        "missing model": (["-s", f"model.path={tmp / 'nope'}"], "model.path '" + str(tmp / "nope") + "': no such "
                          "folder, and not a hub id"),
        "nothing to start from": (["-s", "model.build=null"], "model.path is unset and model.build is null"),
        "not an HF folder": (["-s", f"model.path={tmp / 'not_a_model'}"], "is not an HF model folder"),
        "malformed jsonl": ([*jsonl, f"task.path={tmp / 'broken.jsonl'}"], "broken.jsonl:2: not valid JSON"),
        "empty answer": ([*jsonl, f"task.path={tmp / 'empty_answer.jsonl'}"], "empty_answer.jsonl:2: empty answer"),
        "tiny jsonl": ([*jsonl, f"task.path={tmp / 'three.jsonl'}"], "leaves an empty split of 3 rows"),
        "not a checkpoint": (["-s", f"run.resume_from={tmp}"], "is not a complete checkpoint"),
        "cluster too small": (["-s", "cluster.generators=64"], "cluster too small for W=64"),
    }


CASES = ["yaml syntax", "yaml in --set", "missing model", "nothing to start from", "not an HF folder",
         "malformed jsonl", "empty answer", "tiny jsonl", "not a checkpoint", "cluster too small"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2_before_ray(tmp_path, case):
    args, expected = bad_inputs(tmp_path)[case]
    proc, seconds = cli("train", *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr[-2000:]
    assert seconds < 10 and "Traceback" not in proc.stderr and not proc.stdout.strip()
    print(f"{case}: exit 2 in {seconds:.1f}s")


def test_a_hub_id_offline_is_one_line_and_never_builds_a_tiny_model(tmp_path):
    """It built the 420k-parameter model at ./Qwen/Qwen2.5-1.5B-Instruct, trained it and exited 0."""
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-s",
                           "model.path=Qwen/Qwen2.5-1.5B-Instruct"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"),
                                             "PYTHONPATH": str(ROOT)})
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("model.path 'Qwen/Qwen2.5-1.5B-Instruct' is not a local folder")
    assert "HF_HUB_OFFLINE=1" in line and "hf download Qwen/Qwen2.5-1.5B-Instruct" in line
    assert not (tmp_path / "Qwen").exists() and not (tmp_path / "runs").exists()


def test_a_mistyped_model_folder_is_one_line_and_never_builds_a_tiny_model(tmp_path):
    """A named path is loaded, never built, though the config builds the tiny model when model.path is unset."""
    proc = subprocess.run([sys.executable, "-m", "replay_rl.cli", "train", "-c", str(ROOT / "configs/tiny_cpu.yaml"),
                           "-s", "model.path=runs/models/arith2-warm-33"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("model.path 'runs/models/arith2-warm-33': no such folder"), line
    assert "leave model.path unset to build model.build at model.build_dir" in line
    assert not (tmp_path / "runs").exists()


def test_a_config_from_before_build_dir_loads_as_it_was_meant():
    """create_if_missing: true built at path (now build_dir); false loaded path (now: path set)."""
    from replay_rl.config import RunConfig

    built = RunConfig.load(None, ["model.path=runs/models/x", "model.create_if_missing=true"]).model
    assert (built.path, built.build_dir, built.start_from) == (None, "runs/models/x", "runs/models/x")
    named = RunConfig.load(None, ["model.path=/models/q", "model.create_if_missing=false"]).model
    assert (named.path, named.start_from) == ("/models/q", "/models/q")
    # a hub id was never built, though old configs wrote create_if_missing: true beside it
    hub = RunConfig.load(None, ["model.path=Qwen/Qwen2.5-1.5B-Instruct", "model.create_if_missing=true"]).model
    assert hub.path == "Qwen/Qwen2.5-1.5B-Instruct"


def test_a_hub_id_in_the_hf_cache_resolves_to_its_snapshot_offline(tmp_path, warm_model, monkeypatch):
    """The HF cache's layout (refs/main → snapshots/<commit>/), as a download leaves it: the run loads that folder."""
    import shutil

    import huggingface_hub.constants

    from replay_rl.config import RunConfig
    from replay_rl.driver.preflight import check_model
    from replay_rl.evaluation.warmstart import ensure_model

    repo = tmp_path / "hub" / "models--acme--tiny-math"
    shutil.copytree(warm_model[0], repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig.load(None, ["model.path=acme/tiny-math"])
    check_model(cfg)
    assert ensure_model(cfg) == repo / "snapshots" / ("0" * 40) and not (tmp_path / "acme").exists()


def test_eval_of_a_missing_model_is_one_line(tmp_path):
    proc, _ = cli("eval", str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.strip().startswith("MODEL '") and "Traceback" not in proc.stderr


def test_checkpoints_are_staged_and_partial_ones_ignored(tmp_path):
    for step in (2, 4):
        staged = staging_dir(tmp_path, step)
        staged.mkdir(parents=True)
        (staged / "trainer_state.json").write_text("{}")
        commit(staged, tmp_path / "checkpoints" / f"step_{step}")
    staging_dir(tmp_path, 6).mkdir()                      # a save that crashed: never committed
    (tmp_path / "checkpoints" / "step_8").mkdir()         # a folder without trainer_state.json
    assert latest_checkpoint(tmp_path).name == "step_4"
    assert resolve_resume("auto", tmp_path).name == "step_4"
    assert resolve_resume("auto", tmp_path / "fresh") is None and resolve_resume(None, tmp_path) is None
    with pytest.raises(RuntimeError, match="incomplete"):
        commit(staging_dir(tmp_path, 6), tmp_path / "checkpoints" / "step_6")


def test_resumed_metrics_and_samples_drop_rows_after_the_checkpoint(tmp_path):
    sink = MetricsSink(tmp_path)
    for step in range(1, 6):
        sink.log(step, "train", {"loss": float(step)})
        if step % 2 == 0:
            sink.log(step, "eval", {"eval/pass@1": 0.5})
        sink.log_samples(step, [{"completion": f"old {step}"}])
    sink.close()
    with (tmp_path / "samples.jsonl").open("a") as f:
        f.write('{"step": 6, "compl')  # a kill mid-write
    sink = MetricsSink(tmp_path, keep_through_step=4)   # resumed from step_4: steps 5.. are written again
    sink.log(5, "train", {"loss": 50.0})
    sink.log_samples(5, [{"completion": "new 5"}])
    sink.close()
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["completion"] for s in samples] == ["old 1", "old 2", "old 3", "old 4", "new 5"]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["kind"]) for r in rows] == [(1, "train"), (2, "train"), (2, "eval"), (3, "train"),
                                                      (4, "train"), (4, "eval"), (5, "train")]
    assert rows[-1]["loss"] == 50.0


def test_custom_resources_the_cluster_lacks_fail_in_one_line_naming_the_field():
    from replay_rl.config import ConfigError, RunConfig
    from replay_rl.driver.preflight import check_fits

    cfg = RunConfig.load(None, ["cluster.generator_resources={generator_node: 1}",
                                "cluster.learner_resources={learner_node: 0.5}"])
    check_fits(cfg, {"CPU": 4, "generator_node": 2, "learner_node": 1})     # W=2 × 1 and T=2 × 0.5 fit exactly
    with pytest.raises(ConfigError) as err:
        check_fits(cfg, {"CPU": 4, "generator_node": 2, "learner_node": 0.5})
    assert str(err.value).startswith("cluster.learner_resources: 2 × learner_node=0.5 but the Ray cluster offers 0.5")
    assert "\n" not in str(err.value)

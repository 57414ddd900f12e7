"""The shipped reference warm models (replay_rl/models/warm/): the same bits and the same step-0 accuracy on every
machine, copied where a run would warm-start, and a folder with other bits (a rebuild on another CPU) named in one
line."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from replay_rl.config import RunConfig
from replay_rl.evaluation.passk import greedy_accuracy
from replay_rl.evaluation.warmstart import ensure_model, model_checksum, reference_sha256, shipped_for
from replay_rl.generation.hf import HFBackend
from replay_rl.models.hf_folder import load_tokenizer
from replay_rl.models.shipped import read_manifest, shipped_models
from replay_rl.tasks import make_task

ROOT = Path(__file__).parents[2]
CONFIGS = {"arith2-warm-330": "configs/tiny_cpu.yaml", "countdown-warm-350": "configs/tiny_cpu_countdown.yaml"}


def test_every_testbed_config_pins_its_shipped_model_and_the_embedded_default_finds_it():
    assert [p.name for p in shipped_models()] == sorted(CONFIGS)
    for name, config in CONFIGS.items():
        cfg = RunConfig.load(str(ROOT / config))
        folder = shipped_for(cfg)
        assert folder is not None and folder.name == name
        assert model_checksum(folder) == read_manifest(folder)["sha256"] == reference_sha256(cfg)
        assert cfg.model.reference_sha256 in (None, reference_sha256(cfg)), config  # pinned, or found by settings
        assert reference_sha256(cfg)[:12] in (ROOT / config).read_text()  # named in the config, for a reader
    assert shipped_for(RunConfig()).name == "arith2-warm-330"
    assert shipped_for(RunConfig.load(None, ["warmstart.steps=300"])) is None  # other settings: built here


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_shipped_model_scores_its_committed_step_0_accuracy(name):
    """Greedy decoding on the task's held-out problems, as the run's step-0 eval does: what the manifest says on
    any CPU (a near tie may flip a handful of 1000 problems on other kernels, never the 0.1 a rebuild moved)."""
    cfg = RunConfig.load(str(ROOT / CONFIGS[name]))
    folder = shipped_for(cfg)
    manifest = read_manifest(folder)
    task = make_task(cfg.task, cfg.task.split_seed)
    acc = greedy_accuracy(HFBackend(str(folder)), load_tokenizer(folder), task,
                          n_problems=manifest["eval_problems"], max_new_tokens=cfg.generation.max_new_tokens)
    assert abs(acc - manifest["eval_accuracy"]) <= 0.005, (acc, manifest["eval_accuracy"])


def test_a_run_copies_the_shipped_model_and_names_a_folder_with_other_bits(tmp_path):
    said: list[str] = []
    cfg = RunConfig.load(str(ROOT / CONFIGS["arith2-warm-330"]), [f"model.build_dir={tmp_path / 'warm'}"])
    path, want = ensure_model(cfg, log=said.append), reference_sha256(cfg)
    assert model_checksum(path) == want and not (tmp_path / "warm-init").exists()
    assert said == [f"warm model: the shipped reference arith2-warm-330 (sha256 {want[:12]}, "
                    f"step-0 pass@1 {read_manifest(path)['eval_accuracy']:.3f}) → {path}"]
    # the same settings, other bits: as a warm start rebuilt on another CPU would be
    weights = load_file(path / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + torch.finfo(torch.float32).eps
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    said.clear()
    assert ensure_model(cfg, log=said.append) == path
    assert len(said) == 1 and said[0].startswith(f"warning: model.build_dir {str(path)!r} holds sha256 "
                                                 f"{model_checksum(path)[:12]}, not the shipped reference "
                                                 f"{want[:12]} for these settings")
    # settings no shipped model has: warm-started here, nothing to compare with
    other = RunConfig.load(str(ROOT / CONFIGS["arith2-warm-330"]), [f"model.build_dir={tmp_path / 'other'}",
                                                                     "warmstart.steps=9", "warmstart.eval_prompts=8"])
    said.clear()
    ensure_model(other, log=said.append)
    assert len(said) == 1 and said[0].startswith("warm start: 9 steps")


def test_the_warmstart_command_warns_when_its_build_is_not_the_reference(init_model, tmp_path):
    """The default settings, built here, against a pinned reference that no build has (a rebuild on this box may be
    the shipped model itself: that is the point of shipping it)."""
    cli = [sys.executable, "-m", "replay_rl.cli", "warmstart", str(init_model), str(tmp_path / "w"),
           "-s", "warmstart.eval_prompts=8", "-s", "model.reference_sha256=" + "a" * 64]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: {tmp_path / 'w'} holds sha256 {model_checksum(tmp_path / 'w')[:12]}, not the shipped reference "
        "aaaaaaaaaaaa for these settings"), done.stderr[-2000:]


def test_replay_rl_eval_scores_a_model_folder_through_the_factory_as_the_step_0_eval_does():
    """`replay-rl eval FOLDER` builds its backend through the generation factory (cfg.eval_generation): on the
    shipped model its greedy pass@1 is the manifest's, as the run's step-0 eval is."""
    import json

    from typer.testing import CliRunner

    from replay_rl.cli import app

    folder = shipped_for(RunConfig.load(str(ROOT / CONFIGS["arith2-warm-330"])))
    manifest = read_manifest(folder)
    result = CliRunner().invoke(app, ["eval", str(folder), "-c", str(ROOT / CONFIGS["arith2-warm-330"]),
                                      "-s", f"run.eval_prompts={manifest['eval_problems']}", "--k", "1"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert abs(scores["pass@1"] - manifest["eval_accuracy"]) <= 0.005, scores

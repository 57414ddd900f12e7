"""The study's Tune side without starting Ray: a trial's reservation is its run's shape, trials are named by their
runs, and a resumed study refuses runs its experiment was not started with."""

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("ray.tune")

from replay_rl.config import ConfigError, RunConfig  # noqa: E402
from replay_rl.study.trials import SPECS_FILE, error_line, run_phase, trial_name, trial_resources  # noqa: E402


def test_a_trial_reserves_its_runs_bundles_and_is_named_by_its_run():
    cfg = RunConfig.load(None, ["cluster.generators=1", "cluster.learners=1", "cluster.learner_resources={learner_node: 1}"])
    config = {"run": {"name": "arithmetic-baseline-lr0.0001-seed0", "cfg": cfg.model_dump_json()}}
    factory = trial_resources(config)
    assert factory.bundles == cfg.cluster.bundles() and factory.strategy == "PACK"
    assert trial_name(SimpleNamespace(config=config)) == "arithmetic-baseline-lr0.0001-seed0"
    assert error_line(SimpleNamespace(cause=RuntimeError("learner rank 0 died (traceback: x/error.log)\nmore"))) == (
        "learner rank 0 died (traceback: x/error.log)")


def test_a_resumed_study_with_other_runs_is_refused_in_one_line(tmp_path):
    phase = tmp_path / "_tune" / "base"
    phase.mkdir(parents=True)
    (phase / SPECS_FILE).write_text(json.dumps([str(tmp_path / "arithmetic" / "baseline" / "seed0")]))
    new = RunConfig.load(None, [f"run.output_dir={tmp_path / 'arithmetic' / 'baseline' / 'seed1'}"])
    with pytest.raises(ConfigError, match=r"was started with other runs \(e.g. .*seed1 is new to its base phase\); "
                                          r"rerun with the arguments it was started with, or use a new --out$"):
        run_phase("base", [("arithmetic-baseline-seed1", new)], tmp_path / "_tune", None)

"""run_cfg: the config of an end-to-end test run on the warm-started tiny model (tests/test_trainer_runs.py,
tests/test_reuse_rules.py)."""

from replay_rl.config import RunConfig


def run_cfg(warm_path, out, *overrides):
    return RunConfig.load(None, [f"model.path={warm_path}", f"run.output_dir={out}", "run.eval_prompts=40",
                                 "run.eval_every=3", "replay.sample_timeout_s=120", "learner.batch_size=32",
                                 "replay.capacity=64", *overrides])

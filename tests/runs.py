"""run_cfg: the config of an end-to-end test run on the warm-started tiny model (tests/test_trainer_runs.py,
tests/replay/test_reuse_rules.py, the session's checkpointed run); copy_run: a run folder copied to be used as one's own."""

import shutil
from pathlib import Path

from replay_rl.config import RunConfig


def run_cfg(warm_path, out, *overrides):
    return RunConfig.load(None, [f"model.path={warm_path}", f"run.output_dir={out}", "run.eval_prompts=40",
                                 "run.eval_every=3", "replay.sample_timeout_s=120", "learner.batch_size=32",
                                 "replay.capacity=64", *overrides])


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of the run folder src at dst, links kept: final_model still points into the copy's own checkpoints."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


class Planted:
    """A pickle that runs code when loaded, as a planted checkpoint or Tune state file would."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))  # loading it creates the marker file

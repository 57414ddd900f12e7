"""The compute-saved study's presets: one YAML file each in replay_rl/study/preset_files/ (which rows: W/T split, μ,
buffer size rule, overrides; learning rates, seeds and budgets, per task), validated when read
(preset_schema.py). `replay-rl study --preset NAME` runs one. A preset's `description` says what it answers; the
history of each, and why its grids are what they are, is on the results page it names."""

from __future__ import annotations

from pathlib import Path

from replay_rl.study.preset_schema import read

PAPER_MU = 5.28  # Qwen2.5-7B, paper Table 2
FILES = Path(__file__).with_name("preset_files")
PRESETS: dict[str, dict] = {p.stem: read(p) for p in sorted(FILES.glob("*.yaml"))}

# the study runs one generator actor and one learner rank: on 2 cores that wastes least; the emulated W/T is
# set by cluster.emulate, which is all the pacing and accounting read. A role that dies restarts the run's roles once
# (from step 0, or an extension's base checkpoint: study runs keep no other, which would change when ranks draw
# ahead) rather than fail the trial and, with it, an unattended phase (issue 44); once, so that a death that comes
# back every time costs one more attempt, not two. A run that restarted is named in the study's progress line
STUDY_BASE = ["cluster.generators=1", "cluster.learners=1", "replay.sample_timeout_s=600", "run.checkpoint_every=null",
              "run.max_restarts=1"]

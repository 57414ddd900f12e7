"""The fault soak's CI sample (benchmarks/fault_soak.py): three faults drawn from a fixed seed, each in a short run
of the default config on the local runtime, through the soak's own code (plan, trial, checks); every one passes."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]
SEED, STEPS = 6, 10  # the generator reports killed, a generator paused, the evaluator paused in a checkpoint


# 500 s here beside a running benchmark on 2 cores (two of the three faults restart every role), over the suite's
# 600 s per test
@pytest.mark.timeout(900)
def test_three_seeded_faults_on_the_local_runtime_are_survived(warm_model, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fault_soak import Local, markdown, plan, run_settings, soak

    trials = plan(SEED, 3, cluster=False, steps=STEPS)
    outcomes = soak(trials, Local(warm_model[0]), tmp_path, run_settings(STEPS, checkpoint_every=3))
    table = markdown(outcomes, {"cluster": False, "date": "", "commit": "", "command": "", "wall_s": 0})
    assert all(o.passed for o in outcomes), table
    print(table)

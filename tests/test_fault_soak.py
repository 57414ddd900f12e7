"""The fault soak's CI sample (benchmarks/fault_soak.py): faults drawn from a fixed seed, each in a short run of the
default config on the local runtime, through the soak's own code (plan, trial, checks); every one passes."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]
SEED, STEPS = 6, 10  # the generator reports killed, a generator paused, the evaluator paused in a checkpoint
COVERED = (("generator", "stop"),)  # a paused generator: test_faults.py makes that fault in a run of its own


# 500 s here beside a running benchmark on 2 cores (both faults restart every role), over the suite's 600 s per test
@pytest.mark.timeout(900)
def test_the_seeded_faults_no_other_test_makes_are_survived_on_the_local_runtime(warm_model, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fault_soak import Local, markdown, plan, run_settings, soak

    # the seed's plan, less the faults another test makes: the suite runs within its 25 minutes on 2 cores
    trials = [t for t in plan(SEED, 3, cluster=False, steps=STEPS) if (t.role, t.fault) not in COVERED]
    assert len(trials) == 2, trials
    outcomes = soak(trials, Local(warm_model[0]), tmp_path, run_settings(STEPS, checkpoint_every=3))
    table = markdown(outcomes, {"cluster": False, "date": "", "commit": "", "command": "", "wall_s": 0})
    assert all(o.passed for o in outcomes), table
    print(table)


def test_a_resumed_soak_reads_back_finished_trials_and_refuses_another_plans_folder(tmp_path):
    """--resume: a trial whose outcome.json is in its folder is not run again (the runtime here would fail if it
    were asked to launch), one cut off without it starts over in an emptied folder, and a folder holding another
    trial than the plan's stops the soak in one line."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from dataclasses import asdict

    from fault_soak import Outcome, plan, soak

    first, second = plan(0, 2, cluster=False)
    (tmp_path / "trial_00").mkdir()
    done = Outcome(first, passed=True, path="finished", landed_at=first.step, wall_s=61.5, lines=["restart 1 of 2"])
    (tmp_path / "trial_00" / "outcome.json").write_text(json.dumps(asdict(done)))
    said = []
    assert soak([first], object(), tmp_path, [], echo=said.append) == [done]
    assert said[0].endswith("(finished, 62s, from an earlier sitting) []"), said
    (tmp_path / "trial_01").mkdir()
    (tmp_path / "trial_01" / "metrics.jsonl").write_text("{}\n")  # a trial cut off by the end of a sitting

    class Launches:  # run_trial's first call on its runtime: by then the cut-off trial's files must be gone
        failed_prefix = "run failed: "

        def launch(self, settings, log):
            raise RuntimeError(f"launched; its folder left behind: {(tmp_path / 'trial_01').exists()}")

    with pytest.raises(RuntimeError, match="launched; its folder left behind: False"):
        soak([first, second], Launches(), tmp_path, [], echo=said.append)
    (tmp_path / "trial_01").mkdir()
    (tmp_path / "trial_01" / "outcome.json").write_text(json.dumps(asdict(done)))  # trial 0's, in trial 1's folder
    with pytest.raises(SystemExit, match="holds another trial than the plan's"):
        soak([first, second], object(), tmp_path, [], echo=said.append)


def test_the_results_say_per_cell_how_the_passing_trials_got_through():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fault_soak import Outcome, Trial, table

    def trial(i, role="learner rank", fault="kill"):
        return Trial(i, role, fault, 3, "fifo", 0)

    outcomes = [Outcome(trial(0), True, "finished", lines=["restart 1 of 2: learner rank 0 died"]),
                Outcome(trial(1), True, "resumed", lines=["run failed: learner rank 1 died"]),
                Outcome(trial(2), True, "finished", lines=["generator 0: replaced (killed)"]),
                Outcome(trial(3), False, "failed", lines=["run failed: x"]),
                Outcome(trial(4, "generator reports"), True, "finished")]
    assert table(outcomes) == [
        {"role": "generator reports", "fault": "kill", "tried": 1, "survived": 1, "by": "no line 1"},
        {"role": "learner rank", "fault": "kill", "tried": 4, "survived": 3, "by": "in place 1, restart 1, resume 1"}]

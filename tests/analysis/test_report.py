"""`replay-rl report`: PNGs drawn from the files a run writes, several runs on shared axes; a folder that is not a
run gets one line and exit 2. The end-to-end train test checks that every run draws them (test_trainer_runs.py)."""

import json
import subprocess
import sys

import numpy as np

from replay_rl.metrics import MetricsSink
from replay_rl.analysis.report import PLOTS, RunRecord, accuracy_panels, write_report


def fake_run(path, slope, oldest_bin=1):
    """A run folder as train() leaves it, with made-up numbers (the report reads files, not actors); its age and
    reuse histograms have one filled bin."""
    sink = MetricsSink(path, keep_through_step=-1)
    for step in range(0, 41):
        if step:
            sink.log(step, "train", {"batch/reward_mean": slope * step, "batch/entropy": 0.7 - 0.01 * step,
                                     "batch/loss": 0.01, "batch/clip_fraction": 0.1, "batch/age_mean": 1.0,
                                     "ledger/compute": 6.3 * step, "ledger/mu": 5.28, "ledger/gamma": 0.42,
                                     "buffer/replay_ratio": 1.0, "sync/publish_s": 0.02})
        if step % 10 == 0:
            sink.log(step, "eval", {"eval/pass@1": 0.3 + slope * step, "eval/pass@4": 0.45 + slope * step})
    sink.close()
    (path / "config.json").write_text(json.dumps({"run": {"eval_k": 4}}))
    hist = [0] * 64
    hist[oldest_bin] = 100
    (path / "replay_stats.json").write_text(json.dumps({"age_hist": hist, "reuse_hist": hist}))


def test_report_draws_every_plot_for_several_runs(tmp_path):
    fake_run(tmp_path / "a" / "seed0", 0.005)
    fake_run(tmp_path / "b" / "seed0", 0.002)
    paths = write_report([tmp_path / "a" / "seed0", tmp_path / "b" / "seed0"], tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(PLOTS)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    run = RunRecord.load(tmp_path / "a" / "seed0")
    steps, acc = run.series("eval/pass@1", "eval")
    assert steps.tolist() == [0, 10, 20, 30, 40] and np.isclose(acc[-1], 0.5)


def test_the_sampled_panel_reads_the_sampled_score_at_every_k():
    # at eval_k = 1 it once drew eval/pass@1, the greedy score, a second time under the label "sampled"
    assert [key for key, _, _ in accuracy_panels(1)] == ["eval/pass@1", "eval/pass@1_sampled"]
    assert [key for key, _, _ in accuracy_panels(4)] == ["eval/pass@1", "eval/pass@4"]


def test_a_run_whose_rollouts_reach_the_histograms_last_bin_is_drawn(tmp_path):
    # the last bin counts every age above it (a 100-step run at N = 20B got there, and its report raised)
    fake_run(tmp_path / "old", 0.005, oldest_bin=63)
    paths = write_report([tmp_path / "old"], tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(PLOTS)


def test_report_cli_defaults_to_the_run_folder_and_rejects_a_non_run(tmp_path):
    fake_run(tmp_path / "run", 0.005)
    ok = subprocess.run([sys.executable, "-m", "replay_rl.cli", "report", str(tmp_path / "run")],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and sorted(p.name for p in (tmp_path / "run" / "plots").iterdir()) == sorted(PLOTS)
    bad = subprocess.run([sys.executable, "-m", "replay_rl.cli", "report", str(tmp_path)], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "no metrics.jsonl" in bad.stderr



def test_a_run_that_used_an_adaptive_rule_also_draws_its_signals_and_actions(tmp_path):
    fake_run(tmp_path / "plain", 0.005)
    fake_run(tmp_path / "ruled", 0.005)
    sink = MetricsSink(tmp_path / "ruled")  # appends: steps 41.. carry the rules' keys
    for step in range(41, 51):
        sink.log(step, "train", {"reuse/capacity": 1280.0 - 100 * (step - 41), "reuse/controller_scale": 1.0,
                                 "trust/m2": 0.01 * step, "trust/masked_fraction": 0.1})
    sink.close()
    assert sorted(p.name for p in write_report([tmp_path / "plain"], tmp_path / "a")) == sorted(PLOTS)
    paths = write_report([tmp_path / "plain", tmp_path / "ruled"], tmp_path / "b")
    assert sorted(p.name for p in paths) == sorted([*PLOTS, "rules.png"])
    assert (tmp_path / "b" / "rules.png").stat().st_size > 10_000

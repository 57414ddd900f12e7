"""The compute-saved study: its arithmetic on hand-made curves, and a miniature of the benchmark end to end on real
Ray, DeepSpeed and the warm-started tiny model (2 configs, 1 seed, a few steps: the numbers mean nothing, the files
and keys do)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replay_rl.study import Curve, bootstrap_interval, fraction_of_budgets_ahead, recharge, saved_fraction, \
    summarise_config

ROOT = Path(__file__).parents[1]


def c(points):
    compute, acc = zip(*points)
    return Curve(np.array(compute, float), np.array(acc, float))


def test_reach_interpolates_between_evals_and_is_inf_when_never_reached():
    curve = c([(0, 0.1), (10, 0.3), (20, 0.5)])
    assert curve.reach(0.4) == pytest.approx(15.0)
    assert curve.reach(0.05) == 0.0
    assert curve.reach(0.6) == float("inf")
    assert c([(0, 0.2), (10, 0.5), (20, 0.3)]).drawdown() == pytest.approx(0.2)


def test_recharge_prices_the_same_counts_at_another_mu():
    # 10 steps of B=32 on-policy: K_train = K_inf = 320 → steps·(1+μ)
    assert recharge([320], [320], 32, 5.28)[0] == pytest.approx(10 * 6.28)
    # 10 steps at replay ratio 3.17 (W/T = 5/3 at μ=5.28) → steps·(1+W/T)
    assert recharge([320], [320 / (5.28 * 3 / 5)], 32, 5.28)[0] == pytest.approx(10 * (1 + 5 / 3))


def test_saved_fraction_bootstrap_and_budgets_ahead():
    base = [c([(0, 0.1), (30, 0.3), (60, 0.5)]), c([(0, 0.1), (30, 0.4), (60, 0.5)])]
    fast = [c([(0, 0.1), (15, 0.5), (60, 0.6)]), c([(0, 0.1), (30, 0.5), (60, 0.6)])]
    # baseline reaches 0.5 at 60 and 60, replay at 15 and 30 → median 22.5 → 62.5% saved
    assert saved_fraction([60, 60], [15, 30]) == pytest.approx(1 - 22.5 / 60)
    lo, hi = bootstrap_interval([60, 60], [15, 30])
    assert 1 - 30 / 60 <= lo <= hi <= 1 - 15 / 60
    assert saved_fraction([60], [float("inf")]) == float("-inf")
    assert fraction_of_budgets_ahead(base, fast) == 1.0
    assert fraction_of_budgets_ahead(fast, base) == 0.0
    row = summarise_config(base, fast, threshold=0.5)
    assert row["reached"] == "2/2" and row["lift_median"] == pytest.approx(0.5)
    assert row["compute_saved_pct"] == pytest.approx(100 * (1 - 22.5 / 60))
    never = summarise_config(base, [c([(0, 0.1), (60, 0.2)])], threshold=0.5)
    assert never["compute_saved_pct"] is None and never["reached"] == "0/1"
    # a baseline that ends below its start reaches its own final accuracy at compute 0: no saving is defined
    falling = [c([(0, 0.44), (40, 0.31)])]
    assert np.isnan(saved_fraction([0.0], [0.0]))
    undefined = summarise_config(falling, [c([(0, 0.44), (40, 0.30)])], threshold=0.31)
    assert undefined["compute_saved_pct"] is None and undefined["compute_saved_pct_ci90"] == [None, None]


@pytest.mark.parametrize("preset", ["ladder", "full", "quick", "mini"])
def test_every_preset_builds_valid_run_configs(preset, tmp_path):
    # the full preset is run by hand only: a config rule added later (positive-bias capacity floor) once broke it
    # before any run started, and nothing in CI noticed
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import BASELINE, PRESETS, STUDY_BASE, run_specs

    specs = run_specs(PRESETS[preset], [*STUDY_BASE, *PRESETS[preset]["set"]], tmp_path)
    names = {name for name, _, _ in specs}
    assert names == {BASELINE, *PRESETS[preset]["configs"], *PRESETS[preset]["sensitivity"]}
    for name, _, cfg in specs:
        keep = 1 - cfg.replay.delta if cfg.replay.type == "positive_bias" else 1.0
        assert keep * cfg.replay.capacity >= cfg.learner.batch_size, name
        assert cfg.cluster.emulate is not None, name


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.deepspeed
def test_mini_study_end_to_end_writes_table_plots_and_paper_compute(warm_model, tmp_path):
    path, _ = warm_model
    out = tmp_path / "study"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compute_saved.py"), "--preset", "mini",
                           "--out", str(out), "-s", f"model.path={path}"], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[2/2] replay_53_N seed 0" in proc.stderr  # progress a person can follow
    report = json.loads((out / "results.json").read_text())
    assert set(report["table"]) == {"baseline", "replay_53_N"}
    for name in ("accuracy_vs_compute.png", "accuracy_vs_tokens.png", "entropy_vs_steps.png", "saved_map.png"):
        assert (out / name).stat().st_size > 1000
    base, rep = report["runs"]["baseline"][0], report["runs"]["replay_53_N"][0]
    # compute on the paper's axis, from the counts: (K_train + μ·K_inf)/B at every eval
    for run in (base, rep):
        assert run["steps"][0] == 0 and run["compute"][0] == 0
        expect = (np.array(run["k_train"]) + 5.28 * np.array(run["k_inf"])) / run["batch_size"]
        assert np.allclose(run["compute"], expect)
    # the baseline consumes each rollout once and keeps up with its learner; replay reuses at about μ·T/W
    assert base["replay_ratio"] <= 1.0 and np.mean(base["age_mean"]) <= 2
    assert 1.5 < rep["replay_ratio"] < 3.5
    # replay got the baseline's compute budget (to within one eval interval)
    assert rep["compute"][-1] == pytest.approx(base["compute"][-1], rel=0.25)
    row = report["table"]["replay_53_N"]
    for key in ("lift_median", "compute_saved_pct", "compute_saved_pct_ci90", "budgets_ahead_fraction",
                "entropy_mean_median", "final_pass@4_median", "batch_age_mean", "reuse_at_eviction_mean_median"):
        assert key in row
    summary = (out / "summary.md").read_text()
    assert "| replay_53_N |" in summary and "(i) the buffer" in summary

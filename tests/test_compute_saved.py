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

from replay_rl.analysis.study import Curve, compare, recharge

ROOT = Path(__file__).parents[1]


def c(points):
    compute, acc = zip(*points)
    return Curve(np.array(compute, float), np.array(acc, float))


def test_drawdown_is_the_largest_fall_from_a_running_peak():
    assert c([(0, 0.2), (10, 0.5), (20, 0.3)]).drawdown() == pytest.approx(0.2)


def test_recharge_prices_the_same_counts_at_another_mu():
    # 10 steps of B=32 on-policy: K_train = K_inf = 320 → steps·(1+μ)
    assert recharge([320], [320], 32, 5.28)[0] == pytest.approx(10 * 6.28)
    # 10 steps at replay ratio 3.17 (W/T = 5/3 at μ=5.28) → steps·(1+W/T)
    assert recharge([320], [320 / (5.28 * 3 / 5)], 32, 5.28)[0] == pytest.approx(10 * (1 + 5 / 3))


def test_capacity_rules_name_the_clamp_and_add_rows_above_b():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import STUDY_BASE, capacity_for
    from replay_rl.config import RunConfig

    cfg = RunConfig.load(None, STUDY_BASE)  # B = 128; R = 128·(5/3)/5.28 = 40.4 per step at (5,3)
    n, how = capacity_for("horizon", cfg, 5, 3, 5.28)
    assert n == 128 and "raised to B" in how  # x*·R = 2.43·40.4 = 98 < B: the horizon row is really N = B
    assert capacity_for("B+R", cfg, 5, 3, 5.28)[0] == 169
    assert [capacity_for(r, cfg, 5, 3, 5.28)[0] for r in ("B", "2B", "5B", "10B")] == [128, 256, 640, 1280]


def test_a_baseline_that_ends_below_its_start_leaves_no_saving_defined():
    # the 12-step mini study once had the baseline go 0.44 → 0.31: its best is its start, so it "reaches" 98% of
    # it at compute 0 and nothing can be saved against it
    falling = {"lr": [c([(0, 0.44), (40, 0.31)])]}
    out = compare(falling, {"lr": [c([(0, 0.44), (40, 0.30)])]})
    assert out["reach_base"] == 0 and out["saved_pct"] is None and out["saved_pct_ci"] == [None, None]


PRESET_NAMES = ["ladder", "full", "frontier", "quick", "mini", "measure", "rules", "rules_frontier", "probe_grid"]


def test_the_preset_check_covers_every_preset():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from study_presets import PRESETS

    assert sorted(PRESETS) == sorted(PRESET_NAMES)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_every_preset_builds_valid_run_configs(preset, tmp_path):
    # the full preset is run by hand only: a config rule added later (positive-bias capacity floor) once broke it
    # before any run started, and nothing in CI noticed
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import BASELINE, PRESETS, STUDY_BASE, TASKS, run_specs, task_presets

    for task, p in task_presets(PRESETS[preset], None).items():
        specs = run_specs(p, [*STUDY_BASE, *p["set"]], tmp_path / task, TASKS[task])
        assert {name for name, _, _ in specs} == {BASELINE, *p["configs"], *p["sensitivity"]}
        assert {cfg.task.type for _, _, cfg in specs} == {task}
        check_specs(specs, p, BASELINE)


def test_report_only_on_an_empty_folder_says_so_in_one_line(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import main

    with pytest.raises(SystemExit, match=r"^--report-only: .*empty holds no finished run and no TASK/results.json"):
        main(["--preset", "frontier", "--out", str(tmp_path / "empty"), "--report-only"])


def test_frontier_preset_runs_both_tasks_and_one_can_be_picked():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import PRESETS, task_presets

    assert set(task_presets(PRESETS["frontier"], None)) == {"arithmetic", "countdown"}
    assert set(task_presets(PRESETS["frontier"], ["countdown"])) == {"countdown"}
    assert set(task_presets(PRESETS["quick"], None)) == {"arithmetic"}


def check_specs(specs, preset, baseline):
    # every row runs at each of its learning rates, each in a folder of its own
    assert len({cfg.run.output_dir for _, _, cfg in specs}) == len(specs)
    base_lrs = {cfg.learner.lr for name, _, cfg in specs if name == baseline}
    assert len(base_lrs) == len(preset["lrs"])
    for name, _, cfg in specs:
        keep = 1 - cfg.replay.delta if cfg.replay.type == "positive_bias" else 1.0
        assert keep * cfg.replay.capacity >= cfg.learner.batch_size, name
        assert cfg.cluster.emulate is not None, name


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.deepspeed
def test_mini_study_end_to_end_writes_table_plots_and_paper_compute(warm_model, tmp_path, monkeypatch):
    path, _ = warm_model
    out = tmp_path / "study"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compute_saved.py"), "--preset", "mini",
                           "--out", str(out), "-s", f"model.path={path}"], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # progress a person can follow; then each side's best LR extended from step 12 to 24 (its final checkpoint)
    assert "[4/4] arithmetic replay_53_N2B lr 0.0002 seed 0" in proc.stderr, proc.stderr[-3000:]
    # the replay row runs 12·(1 + 5.28)/(1 + 5/3) = 28 steps for the baseline's 12
    assert "extended from step 12)" in proc.stderr and "extended from step 28)" in proc.stderr
    assert "[6/6]" in proc.stderr
    front = json.loads((out / "results.json").read_text())
    assert set(front["tasks"]) == {"arithmetic"} and "**Headline**" in (out / "summary.md").read_text()
    out = out / "arithmetic"
    report = json.loads((out / "results.json").read_text())
    assert set(report["table"]) == {"baseline", "replay_53_N2B"}
    for name in ("accuracy_vs_compute.png", "accuracy_vs_tokens.png", "entropy_vs_compute.png", "saved_map.png",
                 "diversity.png", "reward_vs_compute.png", "saved_vs_target.png"):
        assert (out / name).stat().st_size > 1000
    runs = report["runs"]
    assert sorted(r["lr"] for r in runs["baseline"]) == sorted(r["lr"] for r in runs["replay_53_N2B"]) == [1e-4, 2e-4]
    extended = report["extended"]
    assert set(extended) == {"baseline", "replay_53_N2B"} and all(len(v) == 1 for v in extended.values())
    longest = {name: max(r["steps"][-1] for r in rs) for name, rs in runs.items()}
    assert longest == {"baseline": 24, "replay_53_N2B": 56}  # 2x, resumed: evals at 0, 6, ..., 24
    assert [r["steps"] for r in runs["baseline"] if r["lr"] in extended["baseline"]] == [[0, 6, 12, 18, 24]]
    base, rep = runs["baseline"][0], runs["replay_53_N2B"][0]
    # compute on the paper's axis, from the counts: (K_train + μ·K_inf)/B at every eval
    for run in (base, rep):
        assert run["steps"][0] == 0 and run["compute"][0] == 0
        expect = (np.array(run["k_train"]) + 5.28 * np.array(run["k_inf"])) / run["batch_size"]
        assert np.allclose(run["compute"], expect)
    # the baseline consumes each rollout once and keeps up with its learner; replay reuses at about μ·T/W
    assert base["replay_ratio"] <= 1.0 and np.mean(base["age_mean"]) <= 2
    assert 1.5 < rep["replay_ratio"] < 3.5
    assert rep["sampler"] == "fresh_anchored" and all(0 <= x <= 1 for x in rep["overlap_prev"][1:])
    # replay got the baseline's compute budget (to within one eval interval)
    assert rep["compute"][-1] == pytest.approx(base["compute"][-1], rel=0.25)
    row = report["table"]["replay_53_N2B"]
    for key in ("saved_pct", "saved_pct_ci", "censored_fraction", "own_saved_pct", "own_saved_pct_ci",
                "budgets_ahead_fraction", "threshold", "best_lr", "best_entropy_mean_median",
                "best_overlap_prev_mean_median", "best_since_last_use_mean_median", "best_final_pass@4_median"):
        assert key in row, key
    assert set(row["by_lr"]) == {"0.0001", "0.0002"} and row["capacity"] == 64  # 2B at B = 32
    assert report["headline"]["rows"] == ["replay_53_N2B"] and report["pooled_buffer_frontier"]["rows"] == ["replay_53_N2B"]
    summary = (out / "summary.md").read_text()
    assert "| replay_53_N2B |" in summary and "(i) the buffer" in summary and "**Headline" in summary
    # a fresh clone has the committed results.json, not the run folders: --report-only rebuilds the same report
    # (the extended runs cut back to the base budget stand in for their base specs); --no-extend reads the base
    # budget into base_budget/, leaving the full report as it was
    again = tmp_path / "committed"
    (again / "arithmetic").mkdir(parents=True)
    (again / "arithmetic" / "results.json").write_text((out / "results.json").read_text())
    (again / "results.json").write_text(json.dumps(front))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import main

    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--no-extend"]):  # in-process: reading JSON and drawing needs no interpreter of its own
        main(["--preset", "mini", "--out", str(again), "-s", f"model.path={path}", "--report-only", *extra])
    without_plots = lambda r: {k: v for k, v in r.items() if k != "plots"}  # noqa: E731
    assert without_plots(json.loads((again / "arithmetic" / "results.json").read_text())) == without_plots(report)
    assert json.loads((again / "results.json").read_text())["wall_min"] == front["wall_min"] > 0  # the study's time
    at_base = json.loads((again / "base_budget" / "arithmetic" / "results.json").read_text())
    assert at_base["extended"] == {}
    assert {name: max(r["steps"][-1] for r in rs) for name, rs in at_base["runs"].items()} == {
        "baseline": 12, "replay_53_N2B": 28}


def fake_run(lr: float, capacity: int, acc: list[float]) -> dict:
    """A run as load_run keeps it, on a hand-made curve: 10 steps of B=32 per eval, each rollout used once, so the
    compute at the evals is 0, 62.8, 125.6, 188.4, 251.2 at μ=5.28."""
    counts = [320 * i for i in range(len(acc))]
    return {"k_train": counts, "k_inf": counts, "batch_size": 32, "mu": 5.28, "pass@1": acc, "lr": lr,
            "capacity": capacity, "w_t": [5, 3], "sampler": "uniform"}


def test_n_grid_compares_every_n_at_the_shared_lr_and_checks_the_probe_by_hand():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from study_table import n_grid

    results = {"baseline": [fake_run(1e-4, 1024, [0.3, 0.5, 0.6, 0.7, 0.8])],
               "replay_53_N2B": [fake_run(5e-5, 64, [0.3, 0.6, 0.8, 0.8, 0.8]),
                                 fake_run(1e-4, 64, [0.3, 0.3, 0.3, 0.3, 0.3])],  # another LR: not in the grid
               "replay_53_Nprobe": [fake_run(5e-5, 48, [0.3, 0.5, 0.7, 0.8, 0.8])]}
    grid = n_grid(results)
    assert grid["lr"] == 5e-5 and list(grid["rows"]) == ["replay_53_Nprobe", "replay_53_N2B"]  # by N
    # smoothed (±2 evals, running max): baseline 0.3, 0.6, 0.65, 0.65, 0.7; N=2B 0.3, 0.7333, 0.75, 0.75, 0.8; the
    # probe's N 0.3, 0.6667, 0.7, 0.7, 0.7667. 98% of the baseline's best 0.7 is 0.686: the baseline reaches it at
    # 188.4 + 62.8·0.036/0.05 = 233.616, N=2B at 62.8·0.386/0.4333 = 55.94 (76.05% saved), the probe's N at
    # 62.8 + 62.8·0.0193/0.0333 = 99.22 (57.53% saved)
    assert grid["rows"]["replay_53_N2B"]["0.98"]["saved_pct"] == pytest.approx(76.05, abs=0.05)
    assert grid["rows"]["replay_53_Nprobe"]["0.98"]["saved_pct"] == pytest.approx(57.53, abs=0.05)
    check = grid["probe_check"]["0.98"]
    assert check["grid_best"] == "replay_53_N2B" and check["probe_within_10_points"] is False
    # at 90% (0.63): the baseline at 62.8 + 62.8·0.03/0.05 = 100.48, the probe's N at 62.8·0.33/0.3667 = 56.52
    assert grid["rows"]["replay_53_Nprobe"]["0.9"]["saved_pct"] == pytest.approx(100 * (1 - 56.52 / 100.48), abs=0.05)
    # a probe within 10 points of the best counts as right: smoothed 0.3, 0.73, 0.7475, ... reaches at 56.37 (75.87%)
    results["replay_53_Nprobe"] = [fake_run(5e-5, 48, [0.3, 0.6, 0.79, 0.8, 0.8])]
    assert n_grid(results)["probe_check"]["0.98"]["probe_within_10_points"] is True


def test_n_grid_ranks_a_row_that_never_reaches_below_any_that_does():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from study_markdown import n_grid_markdown
    from study_table import n_grid

    results = {"baseline": [fake_run(1e-4, 1024, [0.3, 0.5, 0.6, 0.7, 0.8])],
               "replay_53_N2B": [fake_run(5e-5, 64, [0.3, 0.4, 0.5, 0.5, 0.5])],  # never reaches 0.686
               "replay_53_Nprobe": [fake_run(5e-5, 48, [0.3, 0.5, 0.7, 0.8, 0.8])]}
    grid = n_grid(results)
    assert grid["probe_check"]["0.98"] == {"grid_best": "replay_53_N2B", "grid_best_saved_pct": None,
                                           "probe_saved_pct": pytest.approx(57.53, abs=0.05),
                                           "probe_within_10_points": True}
    text = "\n".join(n_grid_markdown(grid))
    assert "| replay_53_N2B | 64 | 1 |" in text and "right (within 10 points)" in text
    # no probe row: no check; rows that share no LR: no grid
    del results["replay_53_Nprobe"]
    assert n_grid(results)["probe_check"] == {}
    results["replay_53_N5B"] = [fake_run(1e-4, 160, [0.3, 0.5, 0.6, 0.7, 0.8])]
    assert n_grid(results) == {}


def test_a_task_the_preset_does_not_name_is_refused():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compute_saved import PRESETS, task_presets

    with pytest.raises(ValueError, match="this preset runs"):
        task_presets(PRESETS["quick"], ["countdown"])

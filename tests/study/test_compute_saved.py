"""The compute-saved study: its arithmetic on hand-made curves, its presets and specs. The mini study end to end, on
real Ray Tune, DeepSpeed and the warm-started tiny model, runs on the loopback cluster (tests/test_cluster_submit.py;
the checks of what it writes are tests/study/mini.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from replay_rl.analysis.study import Curve, compare, recharge

ROOT = Path(__file__).parents[2]


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
    from replay_rl.study.presets import STUDY_BASE
    from replay_rl.study.specs import capacity_for
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


PRESET_NAMES = ["ladder", "full", "frontier", "quick", "mini", "measure", "rules", "rules_frontier", "probe_grid",
                "replicate", "replicate_phase2", "smollm2_sides",
                "rules43"]


def test_the_preset_check_covers_every_preset():
    from replay_rl.study.presets import PRESETS

    assert sorted(PRESETS) == sorted(PRESET_NAMES)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_every_preset_builds_valid_run_configs(preset, tmp_path):
    # the full preset is run by hand only: a config rule added later (positive-bias capacity floor) once broke it
    # before any run started, and nothing in CI noticed
    from replay_rl.config import RunConfig
    from replay_rl.study.presets import PRESETS, STUDY_BASE
    from replay_rl.study.specs import TASKS, run_specs, task_presets
    from replay_rl.study.table import BASELINE

    for task, p in task_presets(PRESETS[preset], None).items():
        specs = run_specs(p, [*STUDY_BASE, *p["set"]], tmp_path / task, TASKS[task])
        assert {name for name, _, _ in specs} == {BASELINE, *p["configs"], *p["sensitivity"]}
        testbed = RunConfig.load(TASKS[task], []).task  # smollm2's is arithmetic, asked in words
        assert {cfg.task.model_dump_json() for _, _, cfg in specs} == {testbed.model_dump_json()}
        check_specs(specs, p, BASELINE)
        assert {cfg.run.max_restarts for _, _, cfg in specs} == {1}  # a death restarts the run, not fails the trial


def test_the_replication_preset_holds_its_plans_budget(tmp_path):
    # benchmarks/results/replication/plan.md, phase 1: the measure study's 3x budget from step 0 (baseline 1500
    # steps, replay 3534), its eval spacing, each side's two LRs, seeds 0-2, eval_k 16
    from replay_rl.study.presets import PRESETS, STUDY_BASE
    from replay_rl.study.specs import TASKS, run_specs

    p = PRESETS["replicate"]
    runs = {}
    for name, seed, cfg in run_specs(p, [*STUDY_BASE, *p["set"]], tmp_path, TASKS["arithmetic"]):
        runs.setdefault(name, set()).add((cfg.learner.lr, seed, cfg.run.steps, cfg.run.eval_every, cfg.run.eval_k))
    assert runs["baseline"] == {(lr, s, 1500, 25, 16) for lr in (1e-4, 1.5e-4) for s in range(3)}
    assert runs["replay_53_N10B"] == {(lr, s, 3534, 59, 16) for lr in (2.5e-5, 5e-5) for s in range(3)}
    # phase 2: the LR phase 1 chose a side (benchmarks/results/replication/phase1/choice.json), seeds 3-12
    chosen = json.loads((ROOT / "benchmarks/results/replication/phase1/choice.json").read_text())["sides"]
    p, runs = PRESETS["replicate_phase2"], {}
    for name, seed, cfg in run_specs(p, [*STUDY_BASE, *p["set"]], tmp_path / "p2", TASKS["arithmetic"]):
        runs.setdefault(name, set()).add((cfg.learner.lr, seed, cfg.run.steps, cfg.run.eval_every, cfg.run.eval_k))
    assert runs == {side: {(chosen[side]["chosen_lr"], s, steps, every, 16) for s in range(3, 13)}
                    for side, steps, every in (("baseline", 1500, 25), ("replay_53_N10B", 3534, 59))}


def test_report_only_on_an_empty_folder_says_so_in_one_line(tmp_path, capsys):
    from replay_rl.study.main import main

    with pytest.raises(SystemExit, match=r"^--report-only: .*empty holds no finished run and no TASK/results.json"):
        main(["--preset", "frontier", "--out", str(tmp_path / "empty"), "--report-only"])


def test_frontier_preset_runs_both_tasks_and_one_can_be_picked():
    from replay_rl.study.presets import PRESETS
    from replay_rl.study.specs import task_presets

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


def fake_run(lr: float, capacity: int, acc: list[float]) -> dict:
    """A run as load_run keeps it, on a hand-made curve: 10 steps of B=32 per eval, each rollout used once, so the
    compute at the evals is 0, 62.8, 125.6, 188.4, 251.2 at μ=5.28."""
    counts = [320 * i for i in range(len(acc))]
    return {"k_train": counts, "k_inf": counts, "batch_size": 32, "mu": 5.28, "pass@1": acc, "lr": lr,
            "capacity": capacity, "w_t": [5, 3], "sampler": "uniform"}


def test_n_grid_compares_every_n_at_the_shared_lr_and_checks_the_probe_by_hand():
    from replay_rl.study.table import n_grid

    results = {"baseline": [fake_run(1e-4, 1024, [0.3, 0.5, 0.6, 0.7, 0.8])],
               "replay_53_N2B": [fake_run(5e-5, 64, [0.3, 0.6, 0.8, 0.8, 0.8]),
                                 fake_run(1e-4, 64, [0.3, 0.3, 0.3, 0.3, 0.3])],  # another LR: not in the grid
               "replay_53_Nprobe": [fake_run(5e-5, 48, [0.3, 0.5, 0.7, 0.8, 0.8])]}
    grid = n_grid(results)
    assert grid["lr"] == 5e-5 and list(grid["rows"]) == ["replay_53_Nprobe", "replay_53_N2B"]  # by N
    # each curve already rises, so the isotonic fit keeps it: 98% of the baseline's best 0.8 is 0.784, which the
    # baseline reaches at 188.4 + 62.8·0.084/0.1 = 241.152, N=2B at 62.8 + 62.8·0.184/0.2 = 120.576 (50% saved),
    # the probe's N at 125.6 + 62.8·0.084/0.1 = 178.352 (26.04% saved)
    assert grid["rows"]["replay_53_N2B"]["0.98"]["saved_pct"] == pytest.approx(50.0, abs=0.05)
    assert grid["rows"]["replay_53_Nprobe"]["0.98"]["saved_pct"] == pytest.approx(26.04, abs=0.05)
    check = grid["probe_check"]["0.98"]
    assert check["grid_best"] == "replay_53_N2B" and check["probe_within_10_points"] is False
    # at 90% (0.72): the baseline at 188.4 + 62.8·0.02/0.1 = 200.96, the probe's N at 125.6 + 12.56 = 138.16
    assert grid["rows"]["replay_53_Nprobe"]["0.9"]["saved_pct"] == pytest.approx(100 * (1 - 138.16 / 200.96), abs=0.05)
    # a probe within 10 points of the best counts as right: 0.3, 0.6, 0.79, ... reaches at 62.8 + 62.8·0.184/0.19 =
    # 123.62 (48.74%)
    results["replay_53_Nprobe"] = [fake_run(5e-5, 48, [0.3, 0.6, 0.79, 0.8, 0.8])]
    assert n_grid(results)["probe_check"]["0.98"]["probe_within_10_points"] is True


def test_n_grid_ranks_a_row_that_never_reaches_below_any_that_does():
    from replay_rl.study.markdown import n_grid_markdown
    from replay_rl.study.table import n_grid

    results = {"baseline": [fake_run(1e-4, 1024, [0.3, 0.5, 0.6, 0.7, 0.8])],
               "replay_53_N2B": [fake_run(5e-5, 64, [0.3, 0.4, 0.5, 0.5, 0.5])],  # never reaches 0.784
               "replay_53_Nprobe": [fake_run(5e-5, 48, [0.3, 0.5, 0.7, 0.8, 0.8])]}
    grid = n_grid(results)
    assert grid["probe_check"]["0.98"] == {"grid_best": "replay_53_N2B", "grid_best_saved_pct": None,
                                           "probe_saved_pct": pytest.approx(26.04, abs=0.05),
                                           "probe_within_10_points": True}
    text = "\n".join(n_grid_markdown(grid))
    assert "| replay_53_N2B | 64 | 1 |" in text and "right (within 10 points)" in text
    # no probe row: no check; rows that share no LR: no grid
    del results["replay_53_Nprobe"]
    assert n_grid(results)["probe_check"] == {}
    results["replay_53_N5B"] = [fake_run(1e-4, 160, [0.3, 0.5, 0.6, 0.7, 0.8])]
    assert n_grid(results) == {}


def test_a_task_the_preset_does_not_name_is_refused():
    from replay_rl.study.presets import PRESETS
    from replay_rl.study.specs import task_presets

    with pytest.raises(ValueError, match="this preset runs"):
        task_presets(PRESETS["quick"], ["countdown"])


def test_a_preset_file_with_a_typo_or_a_wrong_type_is_one_line_naming_the_file_and_the_field(tmp_path):
    from replay_rl.config import ConfigError
    from replay_rl.study.preset_schema import validated
    from replay_rl.study.presets import FILES

    import yaml

    good = yaml.safe_load((FILES / "quick.yaml").read_text())
    with pytest.raises(ConfigError, match=r"^study preset quick.yaml: sead: Extra inputs are not permitted$"):
        validated("quick.yaml", good | {"sead": 3})
    rows = {"replay_53_N10B": good["configs"]["replay_53_N10B"] | {"w": "five"}}
    with pytest.raises(ConfigError, match=r"^study preset quick.yaml: configs.replay_53_N10B.w: Input should be a "):
        validated("quick.yaml", good | {"configs": rows})
    # a task's part is checked as the preset it makes there
    with pytest.raises(ConfigError, match=r"^study preset quick.yaml: tasks.countdown.seeds: Input should be greater"):
        validated("quick.yaml", good | {"tasks": {"countdown": {"seeds": 0}}})
    with pytest.raises(ConfigError, match=r"^study preset quick.yaml: Value error, extend and extend_best go together"):
        validated("quick.yaml", good | {"extend": 3})
    with pytest.raises(ConfigError, match=r"^study preset quick.yaml: tasks.cowntdown.\[key\]: Input should be "):
        validated("quick.yaml", good | {"tasks": {"cowntdown": {}}})
    from replay_rl.study.preset_schema import read

    (tmp_path / "mine.yaml").write_text("steps: [1\n")
    with pytest.raises(ConfigError, match=r"^study preset mine.yaml: not YAML \("):
        read(tmp_path / "mine.yaml")


def test_the_schema_knows_every_study_task():
    from typing import get_args

    from replay_rl.study.preset_schema import Preset
    from replay_rl.study.specs import TASKS

    assert set(get_args(Preset.model_fields["tasks"].annotation.__args__[0])) == set(TASKS)


@pytest.mark.parametrize("argv, line", [
    (["--preset", "typo"], "--preset 'typo': choose from ["),
    (["--preset", "quick", "--configs", "nope"], "--configs: ['nope'] not in preset 'quick'; choose from"),
    (["--preset", "quick", "--task", "nope"], "--task: ['nope'] is not a study task; choose from"),
    (["--preset", "nothere.yaml"], "--preset nothere.yaml: no such file"),
])
def test_the_study_commands_mistakes_are_one_line_and_exit_2(argv, line, capsys):
    """`replay-rl study` is a typer command like the others (issue 45: one CLI framework); a mistake in its options
    is one line naming the option and the choices, before anything runs."""
    from replay_rl.study.main import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(line) and err.count("\n") == 1, err


def test_the_cli_takes_the_studys_own_command():
    from replay_rl.cli import app
    from replay_rl.study.main import command

    assert [c.callback for c in app.registered_commands if c.name == "study"] == [command]


def test_a_thread_that_fails_in_the_study_process_is_one_line_with_its_traceback_in_error_log(tmp_path, capsys,
                                                                                            monkeypatch):
    import threading

    from replay_rl.study.main import command, main

    before = threading.excepthook
    with pytest.raises(SystemExit):
        main(["--preset", "quick", "--out", str(tmp_path), "--report-only"])  # nothing to report: it stops
    assert threading.excepthook is before  # an in-process caller gets its own hook back
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # put back after: the hook is process-wide
    with pytest.raises(SystemExit):  # the command itself, as `replay-rl study` runs it
        command(preset="quick", out=str(tmp_path), task=None, set_=None, seeds=None, configs=None,
                max_concurrent=None, report_only=True, no_extend=False)
    capsys.readouterr()

    def fail():
        raise OSError(28, "No space left on device")

    thread = threading.Thread(target=fail, name="writer")
    thread.start()
    thread.join()
    err = capsys.readouterr().err
    assert err.startswith("a background thread (writer) failed: ") and err.count("\n") == 1, err
    assert "No space left on device" in (tmp_path / "error.log").read_text()

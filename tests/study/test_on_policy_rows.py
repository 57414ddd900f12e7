"""A study row on the on-policy side (n: once, issue 43's learner.drop_zero_advantage): its specs, and that the
study's report never reads it as a buffer."""

from replay_rl.study.preset_schema import Preset
from replay_rl.study.presets import STUDY_BASE
from replay_rl.study.specs import TASKS, run_specs
from replay_rl.study.table import buffer_frontier, fidelity, summarise
from tests.study.test_compute_saved import fake_run

ROW = {"w": 5, "t": 3, "mu": 5.28, "overrides": []}


def test_an_on_policy_row_runs_the_baselines_queue_and_its_steps_scaled(tmp_path):
    """lifo_once at the baseline's capacity and eval spacing, its own overrides, and steps_scale times the
    baseline's steps (it charges less per step); a buffer row keeps its same-compute steps."""
    p = Preset.model_validate({"description": "x", "steps": 100, "eval_every": 25, "seeds": 1, "lrs": [1e-4],
                               "configs": {"replay_53_N10B": ROW | {"n": "10B"},
                                           "drop_once": ROW | {"n": "once", "lrs": [1e-4, 2e-4], "steps_scale": 1.1,
                                                               "overrides": ["learner.drop_zero_advantage=true"]}}
                               }).model_dump()
    cfgs = {(name, cfg.learner.lr): cfg for name, _, cfg in run_specs(p, STUDY_BASE, tmp_path, TASKS["arithmetic"])}
    base, drop, buffer = cfgs[("baseline", 1e-4)], cfgs[("drop_once", 2e-4)], cfgs[("replay_53_N10B", 1e-4)]
    assert (drop.replay.type, drop.replay.capacity, drop.run.steps, drop.run.eval_every) == (
        "lifo_once", base.replay.capacity, 110, 25) and drop.learner.drop_zero_advantage
    assert buffer.replay.type != "lifo_once" and buffer.run.steps == int(round(100 * ((1 + 5.28) / (1 + 5 / 3))))


def test_the_report_never_reads_an_on_policy_row_as_a_buffer():
    """Even with the most runs, the on-policy row is neither the headline's buffer (plain or pooled) nor the
    entropy finding's buffer, and its table row says lifo_once."""
    acc = [0.3, 0.5, 0.6, 0.7, 0.8]
    described = {"entropy": [1.0], "age_mean": [0.0], "replay_ratio": 1.0, "wall_s": 1.0, "pass@16": acc,
                 "age_hist": [1], "since_last_use_hist": [1], "overlap_prev": []}  # what summarise describes
    runs = lambda lrs, cap, **k: [fake_run(lr, cap, acc) | described | k for lr in lrs]  # noqa: E731
    results = {"baseline": runs([1e-4], 1024), "replay_53_N10B": runs([5e-5], 320),
               "drop_once": runs([1e-4, 2e-4], 1024, replay_type="lifo_once")}
    assert buffer_frontier(results, pooled=False)[0]["rows"] == ["replay_53_N10B"]
    assert buffer_frontier(results, pooled=True)[0]["rows"] == ["replay_53_N10B"]
    table, _ = summarise(results, 16)
    assert table["drop_once"]["replay_type"] == "lifo_once" and table["replay_53_N10B"]["replay_type"] == "fifo"
    entropy = [f for f in fidelity(table, {}) if f["finding"].startswith("(iii)")]
    assert len(entropy) == 1 and entropy[0]["numbers"].startswith("replay_53_N10B:")

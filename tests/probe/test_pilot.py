"""The pilot over N (issue 30, items 5 and 6) on hand-made curves and a hand-made probe.json: its decision rule, the
difference it says it resolves, its cost statement and the drift/LR/W-T lines; no training."""

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from replay_rl.config import RunConfig
from replay_rl.probe import drift
from replay_rl.probe.pilot import (area_se, arms, capacities, command, decide, eval_steps, pilot, plan, resolvable,
                                   verdict_lines)
from replay_rl.analysis.study import Curve, t_quantile

STEPS = np.array([0, 25, 50, 75, 100])


def probe_result(status="premise_failed", kl=lambda a: 1e-4 * a ** 2) -> dict:
    at = {"capacity": 486, "lr": 5e-5, "replay_ratio": 3.17, "limit": "unbounded", "generators": 5, "learners": 3}
    return {"status": {"status": status, "reason": "σ²_eff does not grow"}, "config": None,
            "overrides": ["run.eval_prompts=100"],
            "run": {"batch_size": 128, "lr": 5e-5, "capacity": 1280, "out": "runs/p", "split": [5, 3],
                    "rollouts_per_step": 40.4, "horizon": 12, "steps": 43, "seconds": {"steps": 30.1}},
            "recommendation": {"batch_size": 128, "at_config_split": at, "best_split": dict(at)},
            "effective": {"ages": [{"age": a, "kl_mean": kl(a)} for a in range(13)]}}


def test_resolvable_difference_is_the_eval_noise_arithmetic():
    # trapezoid weights of 5 evenly spaced evals: 1/8, 1/4, 1/4, 1/4, 1/8; step 0 is one model for all runs
    sigma = math.sqrt(0.25 / 1000)
    se_seed = sigma * math.sqrt(3 * 0.25 ** 2 + 0.125 ** 2)
    assert area_se(STEPS, 1000) == pytest.approx(se_seed)
    z = NormalDist().inv_cdf
    assert resolvable(se_seed * math.sqrt(2 / 2)) == pytest.approx((z(0.95) + z(0.8)) * se_seed)
    assert resolvable(1.0) == pytest.approx(2.486, abs=1e-3)
    assert area_se(STEPS, 4000) == pytest.approx(se_seed / 2)  # 4× the problems halves it
    assert eval_steps(100, 25) == list(STEPS) and eval_steps(90, 25) == [0, 25, 50, 75, 90]


def curve(level: float, start: float = 0.5) -> Curve:
    return Curve(STEPS.astype(float), np.array([start, *[level] * 4]))


def side(lr_levels: dict, d: float) -> dict:
    """{lr: two seeds at level ± d}"""
    return {lr: [curve(m + d), curve(m - d)] for lr, m in lr_levels.items()}


def test_decision_recommends_the_largest_n_not_clearly_worse():
    d = 0.004
    sides = {100: side({1e-4: 0.60, 5e-5: 0.55}, d), 200: side({1e-4: 0.50, 5e-5: 0.595}, d),
             400: side({1e-4: 0.50, 5e-5: 0.52}, d)}
    out = decide(sides, eval_prompts=10 ** 6)  # eval floor negligible: the seeds' spread sets the interval
    rows = {r["capacity"]: r for r in out["rows"]}
    assert out["best"] == 100 and out["recommended"] == 200
    assert rows[200]["lr"] == 5e-5 and rows[100]["lr"] == 1e-4  # each N at its own LR, chosen on held-out seeds
    assert not rows[200]["clearly_worse"] and rows[400]["clearly_worse"]
    # pooled over 6 cells of 2 seeds (6 df): per-seed variance 2(d·w)², w = 7/8 the weight of the evals after step
    # 0, so the SE of a difference of two 2-seed means is √2·d·w
    weight = 1 - 0.125
    assert out["df"] == 6 and out["seed_sd"] == pytest.approx(math.sqrt(2) * d * weight)
    half = t_quantile(0.95, 6) * math.sqrt(2) * d * weight
    assert rows[200]["diff"] == pytest.approx(-0.005 * weight)
    assert rows[200]["ci"][1] - rows[200]["diff"] == pytest.approx(half, rel=1e-6)
    assert "recommends N = 200" in verdict_lines(out)[-1] and "-s replay.capacity=200" in verdict_lines(out)[-1]


def test_the_largest_n_wins_when_nothing_is_clearly_worse_and_eval_noise_floors_the_interval():
    sides = {n: side({1e-4: 0.6 - 0.001 * i}, 0.0) for i, n in enumerate((100, 200, 400))}
    out = decide(sides, eval_prompts=100)  # identical seeds: no spread, the binomial floor still stands
    assert out["seed_sd"] == 0 and out["eval_floor_sd"] == pytest.approx(area_se(STEPS, 100, out["mean_accuracy"]))
    assert out["best"] == 100 and out["recommended"] == 400


def test_the_plan_states_cost_and_resolution_before_any_run(tmp_path):
    result = probe_result()
    cfg = RunConfig.load(None, ["run.eval_prompts=100"])
    caps = capacities(result, 128, cfg.cluster.learners, 2560)
    assert caps == [486, 1280, 2560]  # 12 versions × 40.4 rollouts = 484.8, to a multiple of 2 learner ranks
    assert capacities(result, 128, 2, 1000) == [486, 1000, 1280]  # --max-capacity below 10B: kept, still sorted
    grid = arms(cfg, None, result["overrides"], caps, tmp_path, steps=60)
    assert len(grid) == 12 and {a.cfg.run.steps for a in grid} == {60}
    assert {(a.capacity, a.lr, a.cfg.run.seed) for a in grid} >= {(486, 5e-5, 0), (2560, 2.5e-5, 1)}
    p = plan(result, grid, eval_prompts=100, eval_every=25)
    assert p["learner_steps"] == 720 and p["wall_s"] == pytest.approx(720 * 30.1 / 43)
    assert p["resolvable_area"] == pytest.approx(resolvable(area_se([0, 25, 50, 60], 100)))
    lines = []
    report = pilot(cfg, None, result["overrides"], result, tmp_path, 2560, 60, True, lines.append, print)
    kept = json.loads((tmp_path / "pilot.json").read_text())
    assert "decision" not in report and kept["plan"]["runs"] == 12
    assert [b["capacity"] for b in kept["drift"]] == caps and kept["drift"][0]["lr_by_drift"] > 5e-5  # 486 < 1280
    text = "\n".join(lines)
    assert "12 runs × 60 steps = 720 learner steps" in text and f"{720 * 30.1 / 43 / 60:.1f} min" in text
    assert f"resolves a difference in area of {p['resolvable_area']:.3f}" in text and "lr bracket" in text
    assert not any(tmp_path.glob("N*/lr*/seed*/metrics.jsonl"))  # nothing trained
    assert command(result) == ("replay-rl probe --pilot -s run.eval_prompts=100 --out runs/p --max-capacity 2560")


def test_drift_expresses_age_in_kl_and_brackets_the_lr():
    result = probe_result()  # KL ∝ τ²
    c, beta = drift.kl_fit(drift.kl_by_age(result))
    assert beta == pytest.approx(2) and c == pytest.approx(1e-4)
    b = drift.lr_bracket(result, 4 * 1280, 1280)
    a_n, a_cfg = drift.mean_age(4 * 1280, 40.4), drift.mean_age(1280, 40.4)
    assert b["lr_by_drift"] == pytest.approx(5e-5 * a_cfg / a_n)  # KL ∝ lr²·τ²: lr ∝ 1/age holds it
    assert b["bracket"] == [pytest.approx(b["lr_by_drift"]), 5e-5] and b["extrapolated"]
    lines = drift.drift_lines(result, [486, 5120], 1280)
    assert "fit KL ≈ 0.0001·τ^2.00" in lines[0] and "heuristic" in lines[-1]
    assert drift.drift_lines(probe_result(kl=lambda a: None), [486], 1280)[0].startswith("drift: no KL")


def test_the_split_line_says_when_and_why_w_t_was_not_searched():
    for status in ("premise_failed", "not_resolved"):
        line = drift.split_line(probe_result(status))
        assert line.startswith(f"W/T: not searched ({status})") and "5/3" in line
    assert "α < 0.01" in drift.split_line(probe_result("ok"))  # ok, but unbounded: the bound names no split
    ok = probe_result("ok")
    ok["recommendation"]["at_config_split"]["limit"] = None
    ok["recommendation"]["best_split"] = {**ok["recommendation"]["at_config_split"], "generators": 6, "learners": 2}
    assert drift.split_line(ok).startswith("W/T: searched over the integer splits with W + T = 8")



def test_a_pilot_run_that_fails_is_one_line_and_exit_1(tmp_path, monkeypatch):
    """The pilot trains through the driver's train(); a run that fails there (here: train raising as a dead learner
    rank does) ends the command in one line naming the run and its error log, not a traceback, and nothing is
    recommended."""
    from typer.testing import CliRunner

    import replay_rl.driver.session as session
    import replay_rl.driver.trainer as trainer
    from replay_rl.cli import app

    result = probe_result()
    (tmp_path / "probe.json").write_text(json.dumps(result))

    def dies(cfg, *args):
        raise RuntimeError("learner rank 0 died: ActorDiedError")

    monkeypatch.setattr(session, "connect", lambda cfg: False)
    monkeypatch.setattr(trainer, "train", dies)
    done = CliRunner().invoke(app, ["probe", "--pilot", "--out", str(tmp_path), "-s", "run.eval_prompts=100",
                                    "--max-capacity", "2560", "--pilot-steps", "4"])
    first = arms(RunConfig.load(None, result["overrides"]), None, result["overrides"], [486], tmp_path / "pilot", 4)[0]
    log = Path(first.cfg.run.output_dir) / "error.log"  # the run's own folder, where its restarts' causes also go
    assert done.exit_code == 1, done.output
    assert done.stderr.strip().splitlines()[-1] == (f"probe --pilot: run N=486 lr 5e-05 seed 0 failed: RuntimeError: "
                                                    f"learner rank 0 died: ActorDiedError (traceback: {log})")
    assert "Traceback" not in done.stderr and "Traceback" in log.read_text()
    assert not (tmp_path / "pilot" / "pilot.json").exists()

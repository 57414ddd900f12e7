"""The compute-saved report's arithmetic on hand-made curves (the benchmark itself is not a timed test)."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("compute_saved", Path(__file__).parents[1] / "benchmarks" / "compute_saved.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def run(curve, **kw):
    points = [{"step": i, "active_s": c, "pass@1": a, "pass@4": a} for i, (c, a) in enumerate(curve)]
    return {"curve": points, "final_pass@1": points[-1]["pass@1"], "active_s": points[-1]["active_s"],
            "mu": 1.0, "mu_busy": 1.0, "gamma": 1.0, "replay_ratio": 1.0, "age_mean": 1.0, "age_max": 2,
            "entropy": [0.5], **kw}


def test_compute_saved_is_measured_at_the_baseline_final_accuracy():
    results = {
        "on_policy": [run([(10, 0.2), (20, 0.3), (30, 0.4)]), run([(10, 0.2), (20, 0.4), (30, 0.4)]),
                      run([(10, 0.1), (20, 0.2), (30, 0.4)])],
        "replay": [run([(5, 0.2), (12, 0.4)]), run([(6, 0.4)]), run([(8, 0.1), (15, 0.3)])],
    }
    s = bench.summarise(results)
    assert s["baseline_final_pass@1"] == 0.4
    t = s["table"]["replay"]
    # baselines reach 0.4 at 30, 20, 30; replay at 12 and 6 (seed 3 never does)
    assert t["reached_baseline"] == "2/3"
    assert t["compute_saved_pct_median"] == pytest.approx(100 * ((1 - 12 / 30) + (1 - 6 / 20)) / 2)
    assert s["table"]["on_policy"]["compute_saved_pct_median"] == 0.0
    assert "| replay |" in bench.markdown(s)


def test_compute_to_reach_returns_none_when_never_reached():
    assert bench.compute_to_reach(run([(1, 0.1), (2, 0.2)])["curve"], 0.5) is None

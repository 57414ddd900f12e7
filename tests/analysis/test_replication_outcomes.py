"""The replication's phase-2 outcomes script (benchmarks/replication_phase2.py), fed phase 1's committed runs (seeds
0-2 at the LRs phase 1 chose): it reads the plan's 14 targets with a Bonferroni band wider than each pointwise 90%
interval, and its verdicts follow the band's sign. In-sample data: a check of the script, not a result."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PHASE1 = ROOT / "benchmarks/results/replication/phase1/results.json"


def test_phase2_outcomes_follow_the_plan_on_phase_1s_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from replication_phase2 import TARGETS, main, verdict

    monkeypatch.setattr(sys, "argv", ["replication_phase2.py", str(PHASE1), "--seeds", "0,1,2",
                                      "--out", str(tmp_path / "o.json"), "--md", str(tmp_path / "o.md")])
    main()
    o = json.loads((tmp_path / "o.json").read_text())
    assert [t["target"] for t in o["primary"]["targets"]] == list(TARGETS) and len(TARGETS) == 14
    assert o["primary"]["per_target_level"] == 1 - 0.10 / 14 and o["primary"]["df"] == 4
    assert {s["lr"] for s in o["sides"].values()} == {1e-4, 5e-5}  # phase 1's choice.json
    for t in o["primary"]["targets"]:
        assert t["verdict"] == verdict(*t["band"], t["saved_pct"])
        if t["band"][0] is not None and t["band"][0] > 0:
            assert t["verdict"] == "replay saves"
    assert [round(g["compute"]) for g in o["secondary"]["delta_pass@1"]] == [3140, 6281, 9421]
    # the band is Bonferroni's: each finite interval the pointwise 90% one, widened by t(1 − 0.05/14) / t(0.95)
    from replay_rl.analysis.study import compare, t_quantile
    from replay_rl.study.table import side

    runs = json.loads(PHASE1.read_text())["runs"]
    sides = [side([r for r in runs[name] if r["lr"] == lr]) for name, lr in (("baseline", 1e-4),
                                                                            ("replay_53_N10B", 5e-5))]
    pointwise = compare(*sides, pick="own_best", level=0.9, targets=TARGETS)["targets"]
    widen, checked = t_quantile(1 - 0.05 / 14, 4) / t_quantile(0.95, 4), 0
    for band, point in zip(o["primary"]["targets"], pointwise):
        if None not in band["band"] and None not in point["saved_pct_ci"]:
            half, want = band["band"][1] - band["band"][0], point["saved_pct_ci"][1] - point["saved_pct_ci"][0]
            assert half == pytest.approx(want * widen, rel=1e-6) and widen > 2
            checked += 1
    assert checked >= 10
    assert "| 0.86 |" in (tmp_path / "o.md").read_text()


def test_the_verdict_says_unresolved_unless_the_whole_band_is_on_one_side(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from replication_phase2 import verdict

    assert verdict(1.0, 30.0, 10.0) == "replay saves"
    assert verdict(-30.0, -1.0, -10.0) == "baseline cheaper"
    assert verdict(-1.0, 30.0, 10.0) == "unresolved"
    assert verdict(None, -1.0, -10.0) == "baseline cheaper (one bound censored)"  # replay never reached in one
    assert verdict(None, None, None).startswith("unresolved")

"""The peer gap script (benchmarks/peer_gap.py) on the committed TRL and matched runs: the Welch interval it prints
is the textbook one (checked by hand at df 2, where t is tabled), each gap is ours − TRL on the evals and training
rows it was given, and a window past a run's steps stops in one line."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from replay_rl.metrics import read_metrics

ROOT = Path(__file__).parents[2]
PEER = ROOT / "benchmarks/results/peer_trl"


def test_welch_is_the_textbook_interval(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from equal_compute import welch

    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])  # variances 1 and 4, 3 seeds each
    # se² = 1/3 + 4/3; Welch df = (5/3)² / ((1/3)²/2 + (4/3)²/2) = 2.94 → 2; t(0.95, 2) = 2.920
    d, lo, hi = welch(x, y, 0.9)
    assert d == 2.0 and hi - d == pytest.approx(2.920 * np.sqrt(5 / 3), abs=2e-3) and d - lo == pytest.approx(hi - d)
    d, lo, hi = welch(np.array([0.64, 0.64]), np.array([0.58, 0.58]))  # no spread on either side: no interval
    assert d == pytest.approx(-0.06) and np.isnan(lo) and np.isnan(hi)


def test_peer_gap_reads_ours_minus_trl_on_the_committed_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from peer_gap import main

    trl, ours = [PEER / "seed0", PEER / "seed1"], [PEER / "ours_matched_seed0", PEER / "ours_matched_seed1"]
    monkeypatch.setattr(sys, "argv", ["peer_gap.py", "--trl", *map(str, trl), "--ours", *map(str, ours),
                                      "--window", "26", "50", "--out", str(tmp_path)])
    main()
    rows = {r["measure"]: r for r in json.loads((tmp_path / "gap.json").read_text())["rows"]}
    assert list(rows) == ["greedy pass@1 at step 25", "greedy pass@1 at step 50", "training reward, steps 26-50"]
    at50 = rows["greedy pass@1 at step 50"]
    assert at50["trl"] == [0.64, 0.625] and at50["ours"] == [0.585, 0.58]
    assert at50["ours_minus_trl"] == pytest.approx(np.mean(at50["ours"]) - np.mean(at50["trl"]))
    assert at50["lo"] < at50["ours_minus_trl"] < at50["hi"]
    reward = rows["training reward, steps 26-50"]
    trl_rewards = [json.loads(line)["reward_mean"] for line in (trl[0] / "steps.jsonl").read_text().splitlines()]
    assert reward["trl"][0] == pytest.approx(np.mean(trl_rewards[25:50]))
    our_rewards = {r["step"]: r["batch/reward_mean"] for r in read_metrics(ours[1] / "metrics.jsonl", "train")}
    assert reward["ours"][1] == pytest.approx(np.mean([our_rewards[s] for s in range(26, 51)]))
    monkeypatch.setattr(sys, "argv", ["peer_gap.py", "--trl", *map(str, trl), "--ours", *map(str, ours),
                                      "--window", "26", "60", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no training row at steps"):
        main()


def test_peer_power_is_the_rules_false_gap_rate_without_a_gap_and_grows_with_seeds(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from peer_power import gap_rates

    rng = np.random.default_rng(1)
    below, off = gap_rates(0.0, 0.02, 0.01, 6, 2000, 0.9, rng)  # a 90% interval: ~1 in 10 off 0 by chance
    assert 0.02 <= below <= 0.08 and 0.05 <= off <= 0.15
    few, many = (gap_rates(-0.03, 0.02, 0.01, n, 1000, 0.9, rng)[0] for n in (3, 8))
    assert few < 0.8 < many

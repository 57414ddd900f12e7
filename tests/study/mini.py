"""What a finished `--preset mini` study holds, checked by the loopback study test: the table, the plots, compute on
the paper's axis, each side's best LR extended, and the same report rebuilt by --report-only from results.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def check_mini_study(out: Path) -> dict:
    """Asserts the study in `out` is the mini preset's, complete; returns its task's report."""
    front = json.loads((out / "results.json").read_text())
    assert set(front["tasks"]) == {"arithmetic"} and "**Headline**" in (out / "summary.md").read_text()
    task = out / "arithmetic"
    report = json.loads((task / "results.json").read_text())
    assert set(report["table"]) == {"baseline", "replay_53_N2B"}
    for name in ("accuracy_vs_compute.png", "accuracy_vs_tokens.png", "entropy_vs_compute.png", "saved_map.png",
                 "diversity.png", "reward_vs_compute.png", "saved_vs_target.png"):
        assert (task / name).stat().st_size > 1000
    runs = report["runs"]
    assert sorted(r["lr"] for r in runs["baseline"]) == sorted(r["lr"] for r in runs["replay_53_N2B"]) == [1e-4, 2e-4]
    extended = report["extended"]
    assert set(extended) == {"baseline", "replay_53_N2B"} and all(len(v) == 1 for v in extended.values())
    longest = {name: max(r["steps"][-1] for r in rs) for name, rs in runs.items()}
    # the replay row runs 12·(1 + 5.28)/(1 + 5/3) = 28 steps for the baseline's 12; each side's best LR 2x, resumed
    assert longest == {"baseline": 24, "replay_53_N2B": 56}
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
    summary = (task / "summary.md").read_text()
    assert "| replay_53_N2B |" in summary and "(i) the buffer" in summary and "**Headline" in summary
    return report


def check_report_only(out: Path, report: dict, scratch: Path, model: str) -> None:
    """--report-only, in-process (no Ray, no Tune), rebuilds the same report: on the study's own folders, and on a
    copy of its results.json alone, as a fresh clone has it (the extended runs cut back to the base budget stand in
    for their base specs); --no-extend reads the base budget into base_budget/, leaving the full report as it was."""
    from replay_rl.study.main import main

    front = json.loads((out / "results.json").read_text())
    without = lambda r, *keys: {k: v for k, v in r.items() if k not in ("plots", *keys)}  # noqa: E731
    main(["--preset", "mini", "--out", str(out), "-s", f"model.path={model}", "--report-only"])
    assert without(json.loads((out / "arithmetic" / "results.json").read_text())) == without(report)
    assert without(json.loads((out / "results.json").read_text()), "tasks") == without(front, "tasks")
    again = scratch / "committed"
    (again / "arithmetic").mkdir(parents=True)
    (again / "arithmetic" / "results.json").write_text((out / "arithmetic" / "results.json").read_text())
    (again / "results.json").write_text(json.dumps(front))
    for extra in ([], ["--no-extend"]):
        main(["--preset", "mini", "--out", str(again), "-s", f"model.path={model}", "--report-only", *extra])
    assert without(json.loads((again / "arithmetic" / "results.json").read_text())) == without(report)
    assert json.loads((again / "results.json").read_text())["wall_min"] == front["wall_min"] > 0  # the study's time
    at_base = json.loads((again / "base_budget" / "arithmetic" / "results.json").read_text())
    assert at_base["extended"] == {}
    assert {name: max(r["steps"][-1] for r in rs) for name, rs in at_base["runs"].items()} == {
        "baseline": 12, "replay_53_N2B": 28}

"""`replay-rl probe` end to end on the warm-started tiny model, with a tiny budget."""

import json
import math

from typer.testing import CliRunner

from replay_rl.cli import app
from replay_rl.probe.status import EXIT_CODES


def test_probe_writes_its_files_with_finite_constants(warm_model, tiny_cfg, tmp_path):
    path, _ = warm_model
    out = tmp_path / "probe"
    # B = 32 at the emulated (5,3), μ = 5.28: R = 10.1 rollouts a step, at least one group of 8 every version
    res = CliRunner().invoke(app, ["probe", "-s", f"model.path={path}", "-s", "learner.batch_size=32", "-s",
                                   "replay.capacity=32", "-s", "generation.group_size=8", "--horizon", "4",
                                   "--points", "2", "--every", "2", "--fresh-groups", "4", "--out", str(out),
                                   "--time-limit", "120"])
    assert (out / "probe.json").exists(), res.output + repr(res.exception)
    data = json.loads((out / "probe.json").read_text())
    status = data["status"]["status"]
    assert res.exit_code == EXIT_CODES[status], res.output  # 0 only with ok
    assert f"status: {status}: " in res.output
    assert (out / "sigma2.png").stat().st_size > 0
    for key in ("mu", "alpha", "rho"):
        assert all(math.isfinite(data[key][k]) for k in ("value", "lo", "hi")), data[key]
    assert data["mu"]["source"].startswith("emulated") and data["mu"]["value"] == 5.28
    assert [s["age"] for s in data["sigma2"]] == list(range(5))
    assert all(s["value"] > 0 for s in data["sigma2"])
    eff = data["effective"]
    assert [a["age"] for a in eff["ages"]] == list(range(5))
    assert all(k in eff["ages"][1] for k in ("clip_active_share", "clip_removed_share", "ratio_mean", "kl_mean"))
    # points 2 steps apart; none where a point's ‖∇F‖² reads ≤ 0 (the tiny model's groups often share one reward)
    assert {b - a for a, b in (x["ages"] for x in data["paired_retention"])} <= {2}
    assert {"never_sampled", "sampled"} <= set(eff["by_use"]) and eff["grad_norm2"]["value"] is not None
    rec = data["recommendation"]
    assert rec["at_config_split"]["capacity"] >= 32
    if status == "ok":  # a paste line only with ok
        assert rec["paste_valid"] is True and "-s replay.capacity=" in res.output
    else:  # no paste line: the pilot's command instead, runnable as printed (here: its plan only)
        assert rec["paste"] is None and "paste: none" in res.output and "paste: -s" not in res.output
        assert "run the pilot" in res.output and "replay-rl probe --pilot -s model.path=" in res.output
    assert "W/T: " in res.output and "drift: KL" in res.output and "lr bracket" in res.output
    assert len(data["run"]["probe_points"]) == 2
    pilot = CliRunner().invoke(app, ["probe", "-s", f"model.path={path}", "-s", "learner.batch_size=32", "-s",
                                     "replay.capacity=32", "-s", "generation.group_size=8", "--out", str(out),
                                     "--pilot", "--plan-only", "--max-capacity", "640"])
    assert pilot.exit_code == 0, pilot.output
    assert "pilot: cost ≥" in pilot.output and "pilot: resolves a difference" in pilot.output
    assert "N ∈ [" in pilot.output and ", 320, 640]" in pilot.output  # 10B and --max-capacity
    other = CliRunner().invoke(app, ["probe", "-s", f"model.path={path}", "--out", str(out), "--pilot"])
    assert other.exit_code == 2 and "measured with other -c/-s" in other.output


def test_probe_that_cannot_fit_one_point_is_one_line_and_exit_1(warm_model, tmp_path):
    path, _ = warm_model
    res = CliRunner().invoke(app, ["probe", "-s", f"model.path={path}", "--out", str(tmp_path), "--time-limit", "5"])
    assert res.exit_code == 1
    assert "no probe point finished" in res.output and "Traceback" not in res.output

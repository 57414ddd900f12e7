"""Each adaptive reuse rule through the real loop on the warm tiny model (issue 29): its keys are in metrics.jsonl
on every step and its action happened. The rules' decisions on hand-made inputs are tested in
tests/replay/test_reuse_window.py, test_reuse_controller.py and tests/learner/test_trust_region.py."""

import pytest

from replay_rl.metrics import read_metrics
from replay_rl.replay.reuse_controller import SpikeController
from replay_rl.driver.trainer import train
from tests.runs import run_cfg

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]
STEPS = 8
SHORT = [f"run.steps={STEPS}", f"run.eval_every={STEPS}", "run.eval_prompts=20"]  # B = 32, N = 64, 2 shards


def rows_of(out, steps: int = STEPS):
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    return rows


def test_the_capacity_schedule_shrinks_the_window_from_n_to_b(ray_cluster, warm_model, tmp_path):
    out = tmp_path / "schedule"
    train(run_cfg(warm_model[0], out, *SHORT, "replay.capacity_schedule={end: 0.5}"))
    rows = rows_of(out)
    # step s samples for version s − 1, progress (s − 1)/8: 64 → 32 over the first half, linearly
    assert [r["reuse/capacity"] for r in rows] == [64, 56, 48, 40, 32, 32, 32, 32]
    assert [r["reuse/progress"] for r in rows] == [(s - 1) / STEPS for s in range(1, STEPS + 1)]
    assert not any(k.startswith(("trust/", "reuse/controller")) for k in rows[0])
    assert (out / "plots" / "rules.png").is_file()


def test_the_trust_region_masks_rollouts_the_policy_has_moved_away_from(ray_cluster, warm_model, tmp_path):
    out = tmp_path / "trust"
    train(run_cfg(warm_model[0], out, *SHORT, "learner.loss.trust_region={max_m2: 1e-5}"))
    rows = rows_of(out)
    # step 1 trains on rollouts of the weights it starts from (log ρ is the engines' mismatch, ~1e-7): none masked;
    # later steps replay rollouts of older weights, and those the policy moved away from are masked
    assert rows[0]["trust/masked_fraction"] == 0 and rows[0]["trust/m2_max"] < 1e-5
    assert max(r["trust/masked_fraction"] for r in rows) > 0
    assert all(r["trust/m2_max"] > 1e-5 for r in rows if r["trust/masked_fraction"] > 0)
    assert all(0 < r["trust/ess"] <= 1 for r in rows) and not any(k.startswith("reuse/") for k in rows[0])


def test_the_controller_acts_on_the_logged_signal_as_its_policy_decides(ray_cluster, warm_model, tmp_path):
    out = tmp_path / "controller"
    # a hair-trigger: any grad norm above the mean of the last two calm ones is a spike (window × 0.5), any below it
    # calm (× 2 back). Against the mean of 20 calm values, a run whose grad norms fell at every one of its 8 steps
    # never spiked (seen once in CI); against the last two, over 12 steps, a run must fall ever faster not to
    rule = dict(warmup=2, window=2, z_high=0.01, z_low=0.005, patience=1, down=0.5, up=2.0, min_scale=0.5)
    train(run_cfg(warm_model[0], out, *SHORT, "run.steps=12", "replay.reuse_controller={%s}"
                  % ", ".join(f"{k}: {v}" for k, v in rule.items())))
    rows = rows_of(out, 12)
    policy = SpikeController(**rule)
    for r in rows:  # the signal a step logs is the previous step's grad norm (none at step 1), as the shard saw it
        d = policy.update(float("nan") if r["reuse/grad_norm"] is None else r["reuse/grad_norm"])
        assert (r["reuse/controller_action"], r["reuse/controller_scale"]) == (d.action, d.scale)
        assert r["reuse/signal_z"] == pytest.approx(d.z)
        assert r["reuse/capacity"] == 2 * max(16, round(32 * d.scale))  # per shard: never below its batch of 16
    assert rows[0]["reuse/grad_norm"] is None
    assert [r["reuse/grad_norm"] for r in rows[1:]] == pytest.approx([r["batch/grad_norm"] for r in rows[:-1]])
    assert any(r["reuse/controller_action"] != 0 for r in rows)

"""Each adaptive reuse rule through the real loop on the warm tiny model (issue 29): its keys are in metrics.jsonl
on every step and its action happened. The rules' decisions on hand-made inputs are tested in
tests/replay/test_reuse_window.py, test_reuse_controller.py and tests/learner/test_trust_region.py."""

import pytest

from replay_rl.metrics import read_metrics
from replay_rl.replay.reuse_controller import SpikeController
from replay_rl.trainer import train
from tests.test_trainer import run_cfg

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.deepspeed]
STEPS = 8
SHORT = [f"run.steps={STEPS}", f"run.eval_every={STEPS}", "run.eval_prompts=20"]  # B = 32, N = 64, 2 shards


def rows_of(out):
    rows = read_metrics(out / "metrics.jsonl", "train")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
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
